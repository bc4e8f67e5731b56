"""Overlapped F&B pairs through megatron-core's own combined step.

With `overlap_moe_expert_parallel_comm` on and model chunks that build a schedule plan
(GPTModel.build_schedule_plan), every F and B/BW of a step runs through megatron-core's
`combined_forward_backward_step` (pipeline_parallel/combined_1f1b.py:237 at core_v0.16.1): a pair of
the schedule (`Schedule.pairs`) as one call with both halves, whose plan interleaves the layers of the
two microbatches and puts the expert all-to-all on its communication stream
(models/common/model_chunk_schedule_plan.py:215-253); an op outside a pair with the other half empty.
Every op takes that path because a B finds its microbatch's plan on the output its F made
(combined_1f1b.py:367-371): an F run by megatron's plain forward_step leaves none. Without a schedule
plan the ops run as F then B (megatron's forward_step / backward_step), as without the flag.

One owner per weight gradient: with `delay_wgrad_compute` off the plan's `backward_dw` calls return at
once (fine_grained_callables.py:315-318) and the weight gradients come out of the autograd backward,
where our weight-gradient store captures them (B: deferred to W; a BW of a schedule with W ops:
captured and run as it ends), as without pairs. `delay_wgrad_compute` would make the plan run them
itself inside the pair: refused (unsupported.py).

Without that step (model chunks with no schedule plan, such as emulated ones) a pair's halves run as two
ops, F then B; while each runs, `running_half()` says which half it is (`RunningHalf`), so that a chunk
that emulates its time can make the two halves take what the pair takes (emulation/chunks.py).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..schedules import Batch, Recv, Send


def combined_step(config: Any, chunks, forward_only: bool) -> Optional[Callable]:
    """megatron's combined_forward_backward_step when this step runs ops through it, else None."""
    if forward_only or not getattr(config, "overlap_moe_expert_parallel_comm", False):
        return None
    from megatron.core.utils import get_attr_wrapped_model

    try:
        for chunk in chunks:
            get_attr_wrapped_model(chunk, "build_schedule_plan")
    except RuntimeError:  # megatron's lookup raises for a model without the attribute: F then B
        return None
    from megatron.core.pipeline_parallel import combined_1f1b

    return combined_1f1b.combined_forward_backward_step


@dataclass
class RunningHalf:
    """The op now running on this rank, when it is one half of a pair run as two ops: `half` "F" or "B"
    (None: not a half), `b_kind` the B half's kind (B or BW), and `carry`, what the F half leaves for
    the B half (one rank's executor runs one op at a time: one object per process)."""

    half: Optional[str] = None
    b_kind: Optional[str] = None
    carry: dict = field(default_factory=dict)


_RUNNING = RunningHalf()


def running_half() -> RunningHalf:
    """Which half of a pair the op now running is (module doc); `half` None outside a pair."""
    return _RUNNING


@contextlib.contextmanager
def half_of_pair(half: Optional[str], b_kind: Optional[str] = None):
    """Run an op as `half` ("F", "B" or None) of a pair whose B half is a `b_kind`; the F half clears
    what an earlier pair carried."""
    if half == "F":
        _RUNNING.carry = {}
    _RUNNING.half, _RUNNING.b_kind = half, b_kind
    try:
        yield _RUNNING
    finally:
        _RUNNING.half = _RUNNING.b_kind = None


def pair_halves(items, paired: frozenset) -> dict:
    """{item index of a pair's first half (F): item index of its second half} of a rank's lowered
    items; the lowering posts nothing between the halves (lowering.py's module doc)."""
    out, position, first = {}, 0, None
    for index, item in enumerate(items):
        if isinstance(item, (Send, Recv, Batch)):
            continue
        if first is not None:
            assert index == first + 1, f"a pair's halves are items {first} and {index}, not consecutive"
            out[first], first = index, None
        elif position in paired:
            first = index
        position += 1
    return out


@contextlib.contextmanager
def loss_on(is_last_stage: bool, cp_group_size: int):
    """The combined step computes the loss with megatron's forward_step_calc_loss, which without these two
    arguments asks parallel state whether this is the last stage (schedules.py:240-245 at core_v0.16.1):
    not ours under V placement, where rank 0 holds the last stage. The step imports it from the module at
    each call (combined_1f1b.py:405): swapped for the call."""
    from megatron.core.pipeline_parallel import schedules

    original = schedules.forward_step_calc_loss

    def calc_loss(*args, **kwargs):
        kwargs.update(cp_group_size=cp_group_size, is_last_stage=is_last_stage)
        return original(*args, **kwargs)

    schedules.forward_step_calc_loss = calc_loss
    try:
        yield
    finally:
        schedules.forward_step_calc_loss = original
