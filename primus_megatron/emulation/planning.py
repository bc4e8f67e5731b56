"""What a launch runs: our schedule, planned and validated before any rank starts (`auto`
chosen, and cost-driven orders made, with the runtime's host work per op charged to every op),
and the baselines asked for, as `Variant`s."""
from __future__ import annotations

from typing import Optional, Sequence

from .. import schedules as S
from .baselines import BASELINES, baseline_variant
from .variants import Variant, for_layout, make_variant

AUTO = "auto"


def choose(pp: int, microbatches: int, costs: S.Costs, *, scale: float, op_overhead_s: float,
           memory_limit: Optional[float] = None, post_validation: bool = False) -> tuple[str, list]:
    """`auto` on emulated devices: (the registered schedule with the lowest simulated iteration
    time, every candidate), each op charged the runtime's host work per op (`op_overhead_s`
    seconds, as `measure_op_overhead` finds it), which weighs most on schedules of many small ops."""
    return S.auto.choose(pp, microbatches, costs, memory_limit, post_validation=post_validation,
                         op_overhead=op_overhead_s / scale)


def planning_costs(name: str, pp: int, costs: S.Costs, op_overhead: float, chunks: Optional[int] = None) -> S.Costs:
    """The costs `name` is planned on: `costs` with `op_overhead` (cost units) of host work added to
    every op when the schedule's order depends on its costs (`auto.with_op_overhead`), else `costs`.
    The host work per op does not shrink with an op's share, so it moves a cost-driven plan (fewer,
    larger ops under a fixed overhead) as it moves `auto`'s choice."""
    from ..schedules.auto import with_op_overhead
    from ..schedules.registry import info, resolve_chunks

    entry = info(name)
    if not op_overhead or not entry.uses_costs:
        return costs
    return with_op_overhead(costs, op_overhead, pp, resolve_chunks(entry, chunks), entry.placement)


def plan(name: str, pp: int, microbatches: int, costs: S.Costs, *, scale: float, memory_limit: Optional[float] = None,
         chunks: Optional[int] = None, post_validation: bool = False, baselines: Sequence[str] = (),
         label: Optional[str] = None, op_overhead_s: float = 0.0) -> list[Variant]:
    """The variants of one emulate run (module doc); ScheduleError / ValueError for bad input.
    `name` "auto": the schedule `choose` picks with `op_overhead_s`, labelled auto=NAME. A schedule
    whose order depends on the costs (`uses_costs`: zb-auto, the V family) is planned on the costs
    with `op_overhead_s` charged to every op (`planning_costs`), as `choose` compares it; its
    emulated op times, and the simulated numbers reported, stay the given costs."""
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise ValueError(f"--baselines takes {', '.join(BASELINES)}, got {', '.join(unknown)}")
    if name == AUTO:
        name, _ = choose(pp, microbatches, costs, scale=scale, op_overhead_s=op_overhead_s,
                         memory_limit=memory_limit, post_validation=post_validation)
        label = label or f"{AUTO}={name}"
    from ..schedules.registry import resolve_chunks

    own = for_layout(costs, resolve_chunks(S.info(name), chunks))
    sched = S.generate(name, pp, microbatches, costs=planning_costs(name, pp, own, op_overhead_s / scale, chunks),
                       memory_limit=memory_limit, chunks=chunks, post_validation=post_validation)

    out = [make_variant(label or sched.name, sched, costs, scale=scale)]
    out += [baseline_variant(base, sched, pp, microbatches, costs, chunks=chunks, scale=scale) for base in baselines]
    return out
