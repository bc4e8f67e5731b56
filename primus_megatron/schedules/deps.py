"""Data dependencies between ops, derived from stages alone (DESIGN.md).

A dependency is a key naming a result: ("F", mb, stage) once a forward is done,
("B", mb, stage) once the input gradient is (by B or BW), ("W", mb, stage)
once the weight gradient is.
"""
from __future__ import annotations

from .ir import B, BW, F, W, Op

Key = tuple[str, int, int]


def produces(op: Op, stage: int) -> tuple[Key, ...]:
    """Results an op makes available."""
    if op.kind == F:
        return ((F, op.mb, stage),)
    if op.kind == B:
        return ((B, op.mb, stage),)
    if op.kind == W:
        return ((W, op.mb, stage),)
    return ((B, op.mb, stage), (W, op.mb, stage))  # BW


def needs(op: Op, stage: int, num_stages: int) -> tuple[Key, ...]:
    """Results an op must wait for (at most one, by construction)."""
    if op.kind == F:
        return ((F, op.mb, stage - 1),) if stage > 0 else ()
    if op.kind in (B, BW):
        if stage == num_stages - 1:
            return ((F, op.mb, stage),)
        return ((B, op.mb, stage + 1),)
    return ((B, op.mb, stage),)  # W


def describe(key: Key) -> str:
    kind, mb, stage = key
    what = {F: "forward", B: "input gradient", W: "weight gradient"}[kind]
    return f"the {what} of microbatch {mb} at stage {stage}"
