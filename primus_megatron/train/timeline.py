"""The executed schedule of examples/pretrain_gpt.py: every pipeline rank's op records of one
iteration, the bubble they measure, and the picture (plan above measurement) and Chrome trace."""
from __future__ import annotations

import os
from typing import Optional

import torch.distributed as dist


def measured_bubble(timelines: list[list]) -> float:
    """1 - busy / (pp * span) of one executed iteration (all ranks' op records)."""
    spans = [r for tl in timelines for r in tl]
    if not spans:
        return float("nan")
    start = min(r.start for r in spans)
    end = max(r.end for r in spans)
    busy = sum(r.end - r.start for r in spans)
    return max(0.0, 1.0 - busy / (len(timelines) * (end - start)))


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


def write_timeline(path: str, timeline: list[list], title: str, plan=None,
                   time_sharing: Optional[tuple[int, int]] = None) -> tuple[str, str]:
    """The picture of one iteration at `path`: with `plan` (the executed Schedule), the plan
    simulated from this iteration's measured op costs above the measurement, on one
    time axis (ms); where ranks time-share cores (`time_sharing`: (ranks, cores)), the costs
    are the ops' CPU times and the executed order replayed from them (`cpu_replay`) sits
    between the two; plus a Chrome trace of the measurement. Returns (picture, trace)."""
    from dataclasses import replace

    from ..schedules import simulate
    from ..schedules.plot import plot_timeline
    from ..schedules.trace import write_chrome_trace
    from .cpu_replay import p2p_latency, replayed

    t0 = min(r.start for tl in timeline for r in tl)
    # milliseconds since the iteration's first op (the trace's time unit)
    shifted = [[r._replace(start=1e3 * (r.start - t0), end=1e3 * (r.end - t0),
                           cpu=None if r.cpu is None else 1e3 * r.cpu) for r in tl] for tl in timeline]
    # ranks time-sharing cores: the executed order, each op taking the CPU time it used
    again = replayed(shifted) if time_sharing else None
    panels, notes = {}, {}
    measured = "measured (this run, wall clock)" if again else "measured (this run)"
    if plan is not None:
        costs = (replace(costs_from_timeline(again, plan.num_stages), comm=p2p_latency(shifted)) if again
                 else costs_from_timeline(shifted, plan.num_stages, time_shared=bool(time_sharing)))
        planned = simulate(plan, costs)
        what = "CPU times" if again else "costs"
        panels[f"planned (the schedule simulated from this run's measured op {what})"] = planned
    if again:
        panels["replayed (the order this run executed, each op taking the CPU time it used: one core per rank)"] = again
    panels[measured] = shifted
    if time_sharing:
        ranks, cores = time_sharing
        notes[measured] = (f"{ranks} rank processes time-share {cores} core{'s' * (cores != 1)}: gaps are mostly the "
                           f"operating system switching between ranks, not pipeline bubbles")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    plot_timeline(panels, path, title=title, time_unit="ms", notes=notes)
    trace = os.path.splitext(path)[0] + ".json"
    write_chrome_trace(shifted, trace, name=title)
    return path, trace
