"""Every registered schedule ranked for a model's per-layer costs (pure Python, no torch).

`rank` runs `balance.per_schedule` over the schedules training's `--pipeline-schedule
auto` chooses from (the integer program, for small cases only, is left out), each on
a few layer splits (the even one, the embedding/loss accounting options and the
layouts that even out the ranks' work: `balance.candidates(exhaustive=False)`),
and orders them by simulated step time. Schedules within `tie_percent` of the
fastest are a tie: the simulator cannot tell them apart.

TIE_PERCENT, 2%: the runtime on emulated devices, fed the H200 dense profile at
pp=8, measured step-time ratios against megatron's schedules within 0.007 of the
simulated ones (BENCHMARKS.md, "Projected speed-up from a GPU's own costs:
emulated at pp=8"), and iterations within 0.9-2.3% of their simulated time at
pp=32 (docs/emulated-devices.md). Costs derived from FLOPs for a shape other than
the profiled one add an error of their own that nothing has measured: 2% is the
least the ranking can be trusted to, not the most.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .balance import ModelCosts, ScheduleChoice, flag_args, per_schedule
from .registry import info, names

TIE_PERCENT = 2.0


def candidates() -> list[str]:
    """The schedules ranked: those `--pipeline-schedule auto` takes (not the integer program's)."""
    return [n for n in names() if info(n).needs_extra != "ilp"]


@dataclass(frozen=True)
class Ranked:
    """One schedule's place: its choice (best split or why none), step time relative to the fastest, tie."""

    choice: ScheduleChoice
    vs_best: Optional[float]
    tie: bool


def rank(pp: int, microbatches: int, model: ModelCosts, num_layers: int, *, memory_limit: Optional[float] = None,
         tie_percent: float = TIE_PERCENT, schedules: Optional[list[str]] = None) -> list[Ranked]:
    """Every schedule, fastest first (those no split fits last, in registry order)."""
    choices = per_schedule(schedules or candidates(), pp, microbatches, model, num_layers, memory_limit=memory_limit,
                           exhaustive=False)
    built = sorted((c for c in choices if c.best is not None), key=lambda c: c.best.iteration)
    if not built:
        return [Ranked(c, None, False) for c in choices]
    fastest = built[0].best.iteration
    out = [Ranked(c, c.best.iteration / fastest, c.best.iteration <= fastest * (1 + tie_percent / 100) + 1e-12)
           for c in built]
    return out + [Ranked(c, None, False) for c in choices if c.best is None]


def use_args(choice: ScheduleChoice, memory_limit: Optional[float] = None) -> list[str]:
    """Megatron-LM's arguments that run `choice`: the schedule, its layer split and, for a schedule
    planned under a memory limit, the limit (units: microbatches of a rank's layer share)."""
    out = ["--pipeline-schedule", choice.name]
    if memory_limit is not None and info(choice.name).cost_driven:
        out += ["--pipeline-memory-limit", f"{memory_limit:.4g}"]
    return out + flag_args(choice.best.split)
