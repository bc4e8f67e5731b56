"""What `primus-pipeline emulate` prints: the report (one JSON-friendly object, times in ms),
its text table, one line per failing rank, and the spans the Chrome-trace writer takes."""
from __future__ import annotations

import os
from typing import Optional

from .measure import launch_costs
from .variants import Variant, with_host_work


def first_failure(text: str, most: int = 4) -> str:
    """Each failing rank's error line out of `local_ranks.run_ranks`'s RuntimeError text, on one line
    (a rank that timed out first and the ranks left waiting on it all show)."""
    lines = text.splitlines()
    found = [f"{line[:-len(' failed:')]}: {lines[i + 1]}" for i, line in enumerate(lines)
             if line.startswith("rank ") and line.endswith("failed:") and i + 1 < len(lines)]
    if not found:
        return lines[0] if lines else text
    more = f"; and {len(found) - most} more rank(s)" if len(found) > most else ""
    return "; ".join(found[:most]) + more


def _ms(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(1e3 * x, 4)


def _measured(r: dict) -> dict:
    return {"makespan": _ms(r["makespan"]), "makespan_min": _ms(r["makespan_min"]),
            "makespan_max": _ms(r["makespan_max"]),
            "bubble_rate": round(r["bubble_rate"], 5), "bubble_rate_async": round(r["bubble_rate_async"], 5),
            "busy": [_ms(b) for b in r["busy"]], "idle": [_ms(i) for i in r["idle"]],
            "overhead_per_op": _ms(r["overhead_per_op"]), "mean_op_time": _ms(r["mean_op_time"]), "steps": r["steps"],
            "iteration": _ms(r["iteration"]), "cpu_per_op": _ms(r["cpu_per_op"]),
            "main_cpu_per_op": _ms(r["main_cpu_per_op"]), "hop_latency": _ms(r.get("hop_latency")),
            "between_ops": _ms(r.get("between_ops")),
            "cores_busy": round(r["cores_busy"], 2)}


def _simulated(v: Variant) -> dict:
    s = v.simulated
    busy = s["busy"]
    return {"makespan": _ms(s["makespan"]), "bubble_rate": round(s["bubble_rate"], 5),
            "bubble_rate_async": round(s["bubble_rate_async"], 5), "busy": [_ms(b) for b in busy],
            "idle": [_ms(s["makespan"] - b) for b in busy]}


def report(variants: list[Variant], results: list, memory: dict, *, pp: int, microbatches: int, unit_ms: float,
           elements: int, p2p_mode: str, optimizer: Optional[dict] = None) -> dict:
    """One JSON-friendly object: the schedule's measured and simulated numbers (times in ms), the
    baselines' likewise (or why one did not run), memory per rank (KiB)."""
    head, rest = variants[0], list(zip(variants[1:], results[1:]))
    # one host work per op for the launch (ours measure it; megatron's and torch's ops are not ours to time)
    overhead, hop = launch_costs(variants, results)

    def host(v: Variant) -> Optional[dict]:
        if overhead is None or v.costs is None:
            return None
        h = with_host_work(v, overhead, unit_ms / 1000.0, hop or 0.0)
        return {"makespan": _ms(h["makespan"]), "bubble_rate": round(h["bubble_rate"], 5),
                "bubble_rate_async": round(h["bubble_rate_async"], 5), "host_per_op": _ms(overhead),
                "message": _ms(hop)}

    out = {"schedule": head.label, "pp": pp, "microbatches": microbatches, "chunks": head.chunks,
           "placement": head.placement, "time_unit_ms": unit_ms, "activation_bytes": 4 * elements,
           "p2p_mode": p2p_mode, "units": "ms", "optimizer": optimizer,
           "post_validation": head.post_validation,
           "measured": _measured(results[0]), "simulated": _simulated(head),
           "simulated_with_host_work": host(head), "baselines": []}
    for v, r in rest:
        if r is None:
            out["baselines"].append({"name": v.label, "skipped": v.skipped})
        else:
            out["baselines"].append({"name": v.label, "chunks": v.chunks, "measured": _measured(r),
                                     "simulated": _simulated(v), "simulated_with_host_work": host(v)})
    private = memory["private_kib"]
    out["memory_per_rank_kib"] = {"rss_max": max(memory["rss_kib"]), "private_max": max(private),
                                  "private_mean": round(sum(private) / len(private))}
    return out


def report_text(rep: dict) -> str:
    def num(x) -> str:
        return "-" if x is None else f"{x:.2f}"

    none = {"bubble_rate": None, "bubble_rate_async": None, "makespan": None}
    rows = [(rep["schedule"], rep["measured"], rep["simulated"], rep.get("simulated_with_host_work") or none)]
    rows += [(b["name"], b["measured"], b["simulated"], b.get("simulated_with_host_work") or none)
             for b in rep["baselines"] if "measured" in b]

    def rate(x) -> str:
        return f"{'-':>8s}" if x is None else f"{x:8.4f}"

    lines = [f"emulated {rep['schedule']}: pp={rep['pp']}, {rep['microbatches']} microbatches, {rep['chunks']} "
             f"chunk(s) per rank; 1 cost unit = {rep['time_unit_ms']:g} ms; activations {rep['activation_bytes']} "
             f"bytes; p2p {rep['p2p_mode']}; median of {rep['measured']['steps']} steps (times in ms)", ""]
    header = (f"{'schedule':24s} {'makespan':>10s} {'sim':>10s} {'sim+host':>10s} {'bubble':>8s} {'sim':>8s} "
              f"{'sim+host':>8s} {'async':>8s} {'sim':>8s} {'sim+host':>8s} {'overhead/op':>12s}")
    lines += [header, "-" * len(header)]
    for name, meas, sim, hw in rows:
        lines.append(f"{name:24s} {num(meas['makespan']):>10s} {num(sim['makespan']):>10s} {num(hw['makespan']):>10s} "
                     f"{meas['bubble_rate']:8.4f} {sim['bubble_rate']:8.4f} {rate(hw['bubble_rate'])} "
                     f"{meas['bubble_rate_async']:8.4f} {sim['bubble_rate_async']:8.4f} "
                     f"{rate(hw['bubble_rate_async'])} {num(meas['overhead_per_op']):>12s}")
    for b in rep["baselines"]:
        if "skipped" in b:
            lines.append(f"{b['name']:24s} not run: {b['skipped']}")
    meas, sim = rep["measured"], rep["simulated"]
    hw0 = rep.get("simulated_with_host_work") or {}
    if rep.get("optimizer"):
        lines += ["", "iteration with the optimizer step (steps back to back, slowest rank's period): "
                  + "; ".join(f"{name} {num(m_['iteration'])}" for name, m_, _ in rows)]
    lines += ["", f"{'rank':>4s} {'busy':>10s} {'idle':>10s} {'sim idle':>10s}"]
    for r, (busy, idle) in enumerate(zip(meas["busy"], meas["idle"])):
        lines.append(f"{r:4d} {num(busy):>10s} {num(idle):>10s} {num(sim['idle'][r]):>10s}")
    mem = rep["memory_per_rank_kib"]
    cores = os.cpu_count() or 1
    lines += ["", f"host work: {num(meas['cpu_per_op'])} ms of CPU per op (all ranks' threads; "
                  f"{num(meas['main_cpu_per_op'])} ms in the main threads: executor, megatron, autograd), "
                  f"{meas['cores_busy']:.2f} cores busy on average over the step; this machine has {cores}"
                  + (" (fewer: the measured times include waiting for a core; emulate longer ops with --time-unit)"
                     if meas["cores_busy"] > 0.8 * cores else "")]
    lines += ["", f"overhead/op: an op's wall time beyond its emulated time (megatron's forward_step/backward_step, "
                  f"the executor's bookkeeping, the wake-up), mean op {num(meas['mean_op_time'])} ms; between ops: from an "
                  f"op's end to the next one's start when it waited for nothing, {num(meas.get('between_ops'))} ms; hop: "
                  f"from an op's end to the start of the waiting op that takes its message, "
                  f"{num(meas.get('hop_latency'))} ms; sim+host: the simulator with every op costing overhead + "
                  f"between more and every message at least hop - between (medians over our schedules in this "
                  f"launch: {num(hw0.get('host_per_op'))} and {num(hw0.get('message'))} ms); what is left between it "
                  f"and the measured number is neither; memory per rank: "
                  f"{mem['private_max'] / 1024:.1f} MiB of its own (max), {mem['rss_max'] / 1024:.0f} MiB resident "
                  f"with the pages shared with the fork server"]
    return "\n".join(lines)


class _Span:
    __slots__ = ("op", "start", "end", "stage")

    def __init__(self, op, start, end) -> None:
        self.op, self.start, self.end, self.stage = op, start, end, None


def spans(timeline: list) -> list[list]:
    """(kind, mb, chunk, start, end) rows as objects the trace writer takes."""
    return [[_Span((k, mb, c), a, b) for k, mb, c, a, b in row] for row in timeline]
