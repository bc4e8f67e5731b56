"""The warning for a step of fewer microbatches than pipeline ranks (pure Python, no torch).

With m < pp microbatches no schedule fills the pipeline: the first rank has finished its
forwards before the last one starts, and much of each step is idle whatever the order (at
pp=4 and m=2 with equal F, B and W costs: 45% for zbv, 60% for 1F1B, against 20% and 43% at
m=4). Nothing refuses it (a debugging run may want it), so the CLI and both training entry
points say it once, with the bubble the simulator gives at this count and at m = pp.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from .costs import Costs
from .errors import ScheduleError
from .registry import generate
from .simulation import simulate


def _bubble(name: str, pp: int, microbatches: int, costs: Optional[Costs], chunks: Optional[int]) -> Optional[float]:
    """The simulated bubble (idle share of the ranks' step time, optimizer barrier included), or None
    where the schedule is not built for these numbers."""
    try:
        return simulate(generate(name, pp, microbatches, costs=costs, chunks=chunks, validate=False), costs).bubble_sync
    except ScheduleError:
        return None


def few_microbatches(name: str, pp: int, microbatches: int, *, costs: Optional[Costs] = None,
                     chunks: Optional[int] = None, fix: str = "", label: Optional[str] = None) -> Optional[str]:
    """One sentence when `microbatches` < `pp` (else None): schedule `name`'s simulated bubble at this
    count and at pp microbatches under `costs` (default: equal F, B and W), then `fix` (what to change).
    `label`: how the sentence names the schedule (default: its name)."""
    if pp < 2 or microbatches >= pp:
        return None
    here = _bubble(name, pp, microbatches, costs, chunks)
    # per-microbatch factors are for this count's microbatches: the comparison runs without them
    full = _bubble(name, pp, pp, dataclasses.replace(costs, mb_scale=None) if costs is not None else None, chunks)
    count = f"{microbatches} microbatch{'es' * (microbatches != 1)} per step on {pp} pipeline ranks"
    if here is None:
        text = f"{count}: fewer microbatches than pipeline ranks leave every rank idle for much of each step"
    else:
        against = f"; {100 * full:.0f}% with {pp}, as many microbatches as ranks" if full is not None else ""
        text = f"{count}: {label or name} leaves the ranks idle {100 * here:.0f}% of each step (simulated bubble{against})"
    return f"{text}; {fix}" if fix else text
