"""The executed schedule of examples/pretrain_gpt.py: every pipeline rank's op records of one
iteration, and its picture (the plan, what ran and 1F1B's plan from the same op times on one time
axis; the wall clock below on its own where ranks time-share cores) and Chrome trace."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import torch.distributed as dist


def gather_timeline(runner) -> Optional[list[list]]:
    """The last step's op records of every pipeline rank (on pipeline group members)."""
    from megatron.core import parallel_state as ps

    if runner is None or getattr(runner, "last_step", None) is None:
        return None
    from .cpu_replay import ExecutedOp, cpu_seconds

    group = ps.get_pipeline_model_parallel_group()
    records = [(r.op, r.stage, r.start, r.end, cpu_seconds(r)) for r in runner.last_step.timeline]
    gathered: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, (ps.get_pipeline_model_parallel_rank(), records), group=group)
    out: list[list] = [[] for _ in gathered]
    for rank, recs in gathered:
        out[rank] = [ExecutedOp(rank, *rec) for rec in recs]
    return out


def costs_from_timeline(timeline: list[list], num_stages: int, *, time_shared: bool = False):
    """Per-stage F/B/W costs (median op durations, the timeline's unit; the shortest
    when ranks time-share cores, since an op that had its core alone shows its own
    cost) and the p2p latency (the shortest gap between an activation's producer
    on one rank and its consumer on another) of one executed iteration: what the
    plan panel simulates."""
    import statistics

    from ..schedules import B, BW, F, W, Costs
    from ..schedules.costs import measured_backward
    from .cpu_replay import p2p_latency

    durations: dict = {}
    for tl in timeline:
        for r in tl:
            durations.setdefault((r.op.kind, r.stage), []).append(r.end - r.start)

    pick = min if time_shared else statistics.median

    def per_stage(kind, default=0.0):
        return [pick(durations[(kind, s)]) if (kind, s) in durations else default for s in range(num_stages)]

    f = per_stage(F)
    b, w, bw = measured_backward(per_stage(B), per_stage(W), per_stage(BW, None))
    return Costs(f=f, b=b, w=w, comm=p2p_latency(timeline), bw=bw)


def one_f_one_b(plan, costs):
    """Megatron's default schedule, 1F1B, on the plan's pipeline ranks and microbatches, each of its
    stages holding the layers of `chunks` consecutive global stages of the plan, their op times summed
    (a BW op: B + W, or the measured BW): the baseline the plan's gain is seen against. A SimResult, or
    None for a plan that is 1F1B already."""
    from ..schedules import B, F, W, Costs, generate, simulate

    if plan.name == "1f1b":
        return None
    c, sc = plan.chunks_per_rank, costs.resolve(plan.pp, plan.chunks_per_rank, plan.placement)

    def summed(per_stage) -> list:
        return [sum(per_stage[s * c:(s + 1) * c]) for s in range(plan.pp)]

    fused = sc.fused or [b + w for b, w in zip(sc.time[B], sc.time[W])]
    base = Costs(f=summed(sc.time[F]), b=summed(sc.time[B]), w=summed(sc.time[W]), bw=summed(fused),
                 comm=max(sc.comm), mem_f=summed(sc.mem[F]), mem_b=summed(sc.mem[B]), mem_w=summed(sc.mem[W]))
    return simulate(generate("1f1b", plan.pp, plan.microbatches, costs=base, validate=False), base)


@dataclass
class Drawn:
    """What write_timeline wrote, and one line per panel (its title) for the log."""

    picture: str
    trace: str
    panels: list[str]


BUBBLE_MEANING = "bubble: the share of the ranks' time idle between the iteration's first op and its last"


def write_timeline(path: str, timeline: list[list], title: str, plan=None,
                   time_sharing: Optional[tuple[int, int]] = None) -> Drawn:
    """The picture of one iteration at `path`, one panel per row of `timeline_panels`, and a Chrome trace
    of the measurement beside it (FILE.json)."""
    from ..schedules.plot import Labels, plot_timeline
    from ..schedules.trace import write_chrome_trace

    t0 = min(r.start for tl in timeline for r in tl)
    # milliseconds since the iteration's first op (the trace's time unit)
    shifted = [[r._replace(start=1e3 * (r.start - t0), end=1e3 * (r.end - t0),
                           cpu=None if r.cpu is None else 1e3 * r.cpu) for r in tl] for tl in timeline]
    rows = timeline_panels(shifted, plan, time_sharing)
    notes = {}
    if time_sharing:
        notes["wall clock"] = "gaps are mostly the operating system switching between ranks, not pipeline bubbles"
    labels = Labels(notes=notes, titles={key: text for key, _, text in rows}, own_axis=frozenset({"wall clock"}),
                    legend_note=BUBBLE_MEANING)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    plot_timeline({key: drawn for key, drawn, _ in rows}, path, title=title, time_unit="ms", labels=labels)
    trace = os.path.splitext(path)[0] + ".json"
    write_chrome_trace(shifted, trace, name=title)
    return Drawn(path, trace, [text for _, _, text in rows])


def timeline_panels(shifted: list[list], plan=None, time_sharing: Optional[tuple[int, int]] = None) -> list[tuple]:
    """(key, what to draw, title) per panel of one iteration (`shifted`: its ops in ms from 0), one bubble
    figure each: the plan simulated from this run's op times (its ops' CPU times where ranks time-share
    cores, else their measured durations); the order that ran (replayed from those CPU times where ranks
    time-share cores: `cpu_replay.as_it_ran`); 1F1B from the same op times (`one_f_one_b`); and where ranks
    time-share cores, the wall clock, whose gaps are mostly the operating system switching ranks."""
    from dataclasses import replace

    from ..schedules import simulate
    from .cpu_replay import as_it_ran, bubble, p2p_latency

    ran, again = as_it_ran(shifted, time_sharing)
    what = "op CPU times" if again else "op times"

    def line(label: str, ms: float, idle: float, tail: str = "") -> str:
        return f"{label}: {ms:.0f} ms, bubble {100 * idle:.1f}%{tail}"

    rows = []
    name = plan.name if plan is not None else "the schedule"
    if plan is not None:
        costs = (replace(costs_from_timeline(ran, plan.num_stages), comm=p2p_latency(shifted)) if again
                 else costs_from_timeline(shifted, plan.num_stages, time_shared=bool(time_sharing)))
        planned = simulate(plan, costs)
        rows.append(("planned", planned, line(f"{name} as planned from this run's {what}", planned.makespan,
                                              planned.bubble_sync)))
    label = f"{name} as it ran" + (", each op taking the CPU time it used (one core per rank)" if again else "")
    rows.append(("ran", ran, line(label, _span(ran), bubble(ran))))
    base = one_f_one_b(plan, costs) if plan is not None else None
    if base is not None:
        gain = f"; {name}'s plan {base.makespan / planned.makespan:.2f}x as fast" if planned.makespan else ""
        rows.append(("1F1B", base, line(f"1F1B (megatron's) from the same {what}", base.makespan,
                                        base.bubble_sync, gain)))
    if again:
        ranks, cores = time_sharing
        rows.append(("wall clock", shifted, line(f"as it ran on the wall clock, {ranks} ranks time-sharing {cores} "
                                                 f"core{'s' * (cores != 1)}", _span(shifted), bubble(shifted))))
    return rows


def _span(timeline: list[list]) -> float:
    """From the first op's start to the last op's end (0 without ops)."""
    spans = [r for tl in timeline for r in tl]
    return max(r.end for r in spans) - min(r.start for r in spans) if spans else 0.0
