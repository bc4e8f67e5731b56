"""The dependency rule: which result an op waits for and which results it makes.

This module is the planner's statement of "which op waits for which";
the compiled form (`compiled`), and through it the simulator, the
completeness check, the lowering and the rendezvous check, as well as the list
scheduler, the building blocks (`blocks`) and the integer program
(`builtin/optimal.py`) derive their dependencies from `input_of`, `outputs_of`,
`consumer_stage` and `runs_after`. (The runtime's executor names the messages
it sends and receives from the lowering.)

A result is named (kind, microbatch, stage): F once the forward of a
microbatch at a stage is done, B once its input gradient is (by a B or a BW
op), W once its weight gradient is. Dependencies follow from stages alone:
F at stage s needs the forward at s - 1; B (or BW) needs the input gradient
at s + 1, or at the last stage the forward at s itself; W needs the input
gradient at s.
"""
from __future__ import annotations

from typing import Optional

from .errors import ScheduleError
from .ir import B, BW, COMPUTE_KINDS, F, W

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
    raise ScheduleError(f"op kind must be one of {', '.join(COMPUTE_KINDS)}, got {kind!r}")


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


def runs_after(kind: str) -> Optional[str]:
    """The kind of the same microbatch's op at the same stage that an op of `kind`
    follows on its rank (B and BW use F's saved activations, W uses B's saved
    gradient); None for F. At the last stage this is also the op's input."""
    return {B: F, BW: F, W: B}.get(kind)


def describe(key: Key) -> str:
    kind, mb, stage = key
    what = {F: "forward", B: "input gradient", W: "weight gradient"}[kind]
    return f"the {what} of microbatch {mb} at stage {stage}"
