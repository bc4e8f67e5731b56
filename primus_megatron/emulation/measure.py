"""The measured numbers of a launch: every rank's op spans turned into what the simulator gives.

Time: the emulated ops wait on CLOCK_MONOTONIC, one clock for every process of the
host, so spans from all ranks share one axis. Before each measured step the ranks
meet at a barrier (the optimizer step's global synchronisation in a run without
post-validation), so a step's makespan is from the earliest op start to the latest
op end over all ranks, as the simulator's `makespan`, and its bubble rate is the
paper's (cost - work) / cost with cost = P x makespan and work the emulated op time
(`bubble_rate`, the simulator's sync bubble); `bubble_rate_async` uses the longest
rank's own span instead (the simulator's async bubble: no barrier between steps).
The runtime's own host costs (`host_gaps`, `host_costs`, `launch_costs`) come from our
ops' timelines.
"""
from __future__ import annotations

import statistics
from typing import Optional

from .variants import Variant


def summarise(v: Variant, ranks: list[dict]) -> dict:
    """Measured numbers of one variant from every rank's step records (median over steps)."""
    pp = len(ranks)
    nsteps = len(ranks[0]["steps"])
    makespans, syncs, asyncs, busies, overheads, hops, betweens = [], [], [], [], [], [], []
    for s in range(nsteps):
        recs = [r["steps"][s] for r in ranks]
        starts, ends, busy, spans = [], [], [], []
        for rec in recs:
            ops = [sp for c in rec["chunks"] for sp in c["spans"]]
            first, last = min(sp[1] for sp in ops), max(sp[2] for sp in ops)
            starts.append(first)
            ends.append(last)
            spans.append(last - first)
            busy.append(sum(c["emulated"] for c in rec["chunks"]))
        makespan = max(ends) - min(starts)
        work = sum(busy)
        makespans.append(makespan)
        syncs.append(1.0 - work / (pp * makespan))
        asyncs.append(1.0 - work / (pp * max(spans)))
        busies.append(busy)
        if all("timeline" in rec for rec in recs):
            hop, gap = host_gaps([rec["timeline"] for rec in recs], [rec.get("partners", {}) for rec in recs])
            if hop is not None and gap is not None:
                hops.append(hop)
                betweens.append(gap)
        n_ops = sum(rec["ops"] for rec in recs)
        if n_ops:
            inside = sum(c["emulated"] + c["comm_wait"] for rec in recs for c in rec["chunks"])
            overheads.append((sum(rec["op_time"] for rec in recs) - inside) / n_ops)
    # steps back to back (an optimizer step, no barrier): the iteration is the slowest rank's period
    periods = [(r["steps"][-1]["end"] - r["steps"][0]["begin"]) / nsteps for r in ranks]
    mid = sorted(range(nsteps), key=lambda i: makespans[i])[nsteps // 2]  # the median step
    # host work: every rank's CPU time in the step (all its threads) per emulated op, and the cores
    # that work needs at the measured pace (more than the machine has: the times include waiting for one)
    cpu = sum(r["steps"][mid]["cpu"] for r in ranks)
    cpu_main = sum(r["steps"][mid].get("cpu_main", 0.0) for r in ranks)
    n_emulated = sum(len(c["spans"]) for r in ranks for c in r["steps"][mid]["chunks"])
    mean_op = (sum(busies[mid]) / max(1, sum(len(c["spans"]) for r in ranks for c in r["steps"][mid]["chunks"])))
    busy = busies[mid]
    return {
        "label": v.label,
        "makespan": statistics.median(makespans),
        "makespan_min": min(makespans),
        "makespan_max": max(makespans),
        "bubble_rate": statistics.median(syncs),
        "bubble_rate_async": statistics.median(asyncs),
        "busy": busy,
        "idle": [makespans[mid] - b for b in busy],
        "overhead_per_op": statistics.median(overheads) if overheads else None,
        "hop_latency": statistics.median(hops) if hops else None,
        "between_ops": statistics.median(betweens) if betweens else None,
        "iteration": max(periods),
        "cpu_per_op": cpu / max(1, n_emulated),
        "main_cpu_per_op": cpu_main / max(1, n_emulated),  # the rank's main thread: executor, megatron, autograd
        "cores_busy": cpu / makespans[mid],
        "stalled_ops": sum(c.get("stalled", 0) for r in ranks for c in r["steps"][mid]["chunks"]),  # ROCm stall
        "params": [r.get("params") for r in ranks],
        "mean_op_time": mean_op,
        "steps": nsteps,
        "timeline": _timeline(ranks, mid),
        "records": ranks,
    }


def _timeline(ranks: list[dict], step: int) -> list[list[tuple]]:
    """Per rank (kind, mb, chunk, start, end) of one step's emulated ops, seconds from the step's first op."""
    rows = [[(sp[0], None, c, sp[1], sp[2]) for c, ch in enumerate(r["steps"][step]["chunks"]) for sp in ch["spans"]]
            for r in ranks]
    origin = min(sp[3] for row in rows for sp in row)
    return [sorted(((k, mb, c, a - origin, b - origin) for k, mb, c, a, b in row), key=lambda t: t[3]) for row in rows]


def host_gaps(timelines: list, partners: Optional[list] = None) -> tuple[Optional[float], Optional[float]]:
    """(hop, between) of one step, seconds, means: `hop`, the time from an op's end to the start of
    the op on another rank that takes its message (an activation to the next stage, a gradient to
    the previous one), over the messages whose consumer was waiting for them (its rank's previous
    op had ended by then); `between`, the time from an op's end to its rank's next op's start when
    that op was not waiting for a message (the executor's work between ops: posting, reaping).
    `timelines`: per rank, (kind, mb, chunk, stage, start, end) of its ops. `partners`: per rank,
    {(F, mb, stage) of a pair's F half run as two ops: (kind, mb, stage) of its B half}; such an F
    half starts once the B half's message is there too, so it waits for the later of the two."""
    where = {}
    for rank, row in enumerate(timelines):
        for kind, mb, _chunk, stage, start, end in row:
            if kind != "W":  # a W sends nothing
                where[("F" if kind == "F" else "B", mb, stage)] = (rank, start, end)

    def source(kind: str, mb: int, stage: int):
        if kind == "W":
            return None
        key = ("F", mb, stage - 1) if kind == "F" else ("B", mb, stage + 1)
        return where.get(key)

    def latest(rank: int, kind: str, mb: int, stage: int):
        """The remote message the op waits for that ended last (a pair's F half: its B half's too)."""
        keys = [(kind, mb, stage)]
        partner = partners[rank].get((kind, mb, stage)) if partners else None
        if partner is not None:
            keys.append(partner)
        found = [src for src in (source(*key) for key in keys) if src is not None and src[0] != rank]
        return max(found, key=lambda src: src[2], default=None)

    hops, between = [], []
    for rank, row in enumerate(timelines):
        row = sorted(row, key=lambda t: t[4])
        for prev, (kind, mb, _chunk, stage, start, _end) in zip([None, *row], row):
            src = latest(rank, kind, mb, stage)
            if src is not None and (prev is None or prev[5] <= src[2]):  # idle until the message's op ended
                hops.append(start - src[2])
            elif prev is not None:  # its input was there when its rank became free
                between.append(start - prev[5])
    return (statistics.fmean(hops) if hops else None, statistics.fmean(between) if between else None)


def host_costs(r: dict) -> tuple[Optional[float], Optional[float]]:
    """(host work per op, message time) of one measured variant, seconds, as the simulator takes
    them: an op's wall time beyond its emulated time plus the executor's work before the next op
    (`between_ops`), and a message's time from its op's end to its waiting consumer's start less
    that same work between ops (the producer's share, which the op now carries)."""
    overhead, between, hop = r.get("overhead_per_op"), r.get("between_ops"), r.get("hop_latency")
    if overhead is None:
        return None, None
    per_op = max(0.0, overhead + (between or 0.0))
    return per_op, (None if hop is None else max(0.0, hop - (between or 0.0)))


def launch_costs(variants: Sequence[Variant], results: list) -> tuple[Optional[float], Optional[float]]:
    """(host work per op, message time) of one launch, seconds (`host_costs`): the medians over our
    schedules (megatron's and torch's runtimes are not ours to time per op); None where none ran."""
    ours = [host_costs(r) for v, r in zip(variants, results) if r is not None and not v.megatron and not v.torch]
    per_op = [o for o, _ in ours if o is not None]
    hops = [h for _, h in ours if h is not None]
    return (statistics.median(per_op) if per_op else None, statistics.median(hops) if hops else None)
