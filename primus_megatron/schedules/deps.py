"""The dependency rule: which result an op waits for and which results it makes.

This module is the planner's only statement of "which op waits for which";
the compiled form (`compiled`), and through it the simulator, the
completeness check, the lowering, the rendezvous check and the list
scheduler, the building blocks (`blocks`) and the integer program
(`builtin/optimal.py`) all derive their dependencies from `input_of` and
`outputs_of`.

A result is named (kind, microbatch, stage): F once the forward of a
microbatch at a stage is done, B once its input gradient is (by a B or a BW
op), W once its weight gradient is. Dependencies follow from stages alone:
F at stage s needs the forward at s - 1; B (or BW) needs the input gradient
at s + 1, or at the last stage the forward at s itself; W needs the input
gradient at s.
"""
from __future__ import annotations

from typing import Optional

from .ir import B, BW, F, W, Op

Key = tuple[str, int, int]
RESULT_KINDS = (F, B, W)  # results, in the order of their index in the compiled form's result keys


def input_of(kind: str, stage: int, num_stages: int) -> Optional[tuple[str, int]]:
    """(result kind, stage) an op of `kind` at `stage` waits for; None where it waits for nothing."""
    if kind == F:
        return (F, stage - 1) if stage > 0 else None
    if kind == W:
        return (B, stage)
    if kind in (B, BW):
        return (F, stage) if stage == num_stages - 1 else (B, stage + 1)
    raise ValueError(f"unknown op kind {kind!r}")


def outputs_of(kind: str) -> tuple[str, ...]:
    """Result kinds an op of `kind` makes, at its own stage."""
    return (B, W) if kind == BW else (kind,)


def consumer_stage(result: str, stage: int, num_stages: int) -> Optional[int]:
    """The other stage whose ops wait for `result` made at `stage` (None if only `stage` uses it):
    where a message goes when that stage lives on another rank. By the rule above at most one."""
    for other in (stage - 1, stage + 1):
        if 0 <= other < num_stages and any(input_of(kind, other, num_stages) == (result, stage) for kind in (F, B, W)):
            return other
    return None


def needs(op: Op, stage: int, num_stages: int) -> tuple[Key, ...]:
    """Results an op must wait for (at most one)."""
    need = input_of(op.kind, stage, num_stages)
    return () if need is None else ((need[0], op.mb, need[1]),)


def produces(op: Op, stage: int) -> tuple[Key, ...]:
    """Results an op makes available."""
    return tuple((kind, op.mb, stage) for kind in outputs_of(op.kind))


def describe(key: Key) -> str:
    kind, mb, stage = key
    what = {F: "forward", B: "input gradient", W: "weight gradient"}[kind]
    return f"the {what} of microbatch {mb} at stage {stage}"
