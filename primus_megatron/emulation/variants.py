"""What an emulate launch runs: one `Variant` per schedule (ours or a baseline), with its
per-stage op times (`chunks.StageTimes`) and its simulation, plain or with the runtime's
measured host work charged (`with_host_work`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .. import schedules as S


@dataclass
class Variant:
    """One thing to run: our schedule (`schedule` set) or a megatron baseline."""

    label: str
    schedule: S.Schedule  # ours: the plan run; a baseline: its counterpart's plan (for the simulation)
    megatron: bool
    times: list  # chunks.StageTimes per virtual stage, seconds
    simulated: dict  # makespan (seconds), bubble_rate, bubble_rate_async
    skipped: Optional[str] = None  # why it is not run (a baseline whose constraints this setting breaks)
    sim_timeline: Any = None  # the simulator's timeline (seconds), kept in the launcher
    post_validation: bool = False  # with an optimizer step: ours steps under post-validation
    # activation offload (ours): {"mode", "bandwidth" (units per time unit), "costs", "memory_limit",
    # "scale" (seconds per time unit)}: the runner plans it, the copies take the time the bandwidth says;
    # or {"plan" (an OffloadPlan chosen once, here), "costs", "scale"}: every rank runs that plan (an
    # `auto` plan at pp=32 costs each rank seconds of CPU, which 32 ranks on a few cores pay in turn)
    offload: Optional[dict] = None
    torch: bool = False  # a torch.distributed.pipelining baseline (`label` is its baselines.TORCH_BASELINES name)
    costs: Any = None  # the cost units it was planned with (for `with_host_work`)
    health: Optional[dict] = None  # ours: in-flight health options of its own (None: the launch's)

    @property
    def chunks(self) -> int:
        return self.schedule.chunks_per_rank

    @property
    def placement(self) -> str:
        return self.schedule.placement


def for_layout(costs, chunks: int) -> S.Costs:
    """`costs` for a schedule of `chunks` per rank: a profile's (`balance.LayoutCosts`, a callable:
    its stage costs depend on how the layers split into chunks) is asked; plain Costs are as given."""
    return costs(chunks) if callable(costs) else costs


def simulated(sched: S.Schedule, costs: S.Costs, scale: float) -> dict:
    sim = S.simulate(sched, costs)
    return {"makespan": scale * sim.makespan, "bubble_rate": sim.bubble_sync, "bubble_rate_async": sim.bubble_async,
            "busy": [scale * b for b in sim.busy], "peak_memory": max(sim.peak_memory)}


def make_variant(label: str, sched: S.Schedule, costs: S.Costs, *, scale: float, megatron: bool = False,
                 skipped: Optional[str] = None, torch: bool = False) -> Variant:
    """A variant running `sched` (or, `megatron`, megatron's own schedule of its shape) on chunks
    whose op times are `costs` x `scale` seconds (a profile's: those of the schedule's own layout)."""
    costs = for_layout(costs, sched.chunks_per_rank)
    from .chunks import stage_times

    pp = sched.pp
    return Variant(label, sched, megatron, stage_times(costs, pp, sched.chunks_per_rank, sched.placement, scale=scale,
                                                     microbatches=sched.microbatches),
                   simulated(sched, costs, scale), skipped,
                   [[(sp.op.kind, sp.op.mb, sp.op.chunk, scale * sp.start, scale * sp.end) for sp in row]
                    for row in S.simulate(sched, costs).timeline], torch=torch, costs=costs)


def with_host_work(v: Variant, overhead_s: float, scale: float, hop_s: float = 0.0) -> dict:
    """`v`'s simulation with the runtime's measured costs added (`host_costs`): `overhead_s` of
    host work on every op (`auto.with_op_overhead`) and each message between ranks taking at least
    `hop_s`. Makespan (seconds) and bubble rates are counted as the measured ones are, against the
    emulated op time alone. What is left between this and the measured numbers is neither."""
    import dataclasses

    from ..schedules.auto import with_op_overhead

    sched, pp = v.schedule, v.schedule.pp
    work = sum(S.simulate(sched, v.costs).busy)
    costs = with_op_overhead(v.costs, overhead_s / scale, pp, sched.chunks_per_rank, sched.placement)
    if hop_s > 0:
        comm = costs.resolve(pp, sched.chunks_per_rank, sched.placement).comm
        costs = dataclasses.replace(costs, comm=tuple(max(c, hop_s / scale) for c in comm))
    host = S.simulate(sched, costs)
    return {"makespan": scale * host.makespan, "bubble_rate": 1.0 - work / (pp * host.makespan),
            "bubble_rate_async": 1.0 - work / (pp * max(host.span)), "overhead": overhead_s, "hop": hop_s}
