"""`auto`: the registered schedule with the lowest simulated iteration time for
given (usually measured) costs, among those that fit the memory limit.

Every registered schedule but the exact solver is a candidate, `interleaved-1f1b`
included: it wins where W is small against F and B and p2p is not free (a zero-bubble
schedule's W then has little bubble to fill), if the memory limit admits its larger
peak (p + (p - 1)/chunks units at the default 2 chunks, above 1F1B's p: never under
the default limit). The runtime's host work per op (`op_overhead`, what `primus-pipeline
emulate` measures as overhead/op) is the same for an op of any size, so it weighs
most on schedules with more, smaller ops (interleaved chunks, V's two chunks, split W).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

from .costs import Costs
from .errors import ScheduleError
from .ir import BW, B, F, W
from .registry import generate, info, names, resolve_chunks
from .simulation import simulate


@dataclass(frozen=True)
class Candidate:
    name: str
    chunks: int
    placement: str
    iteration: Optional[float]  # simulated iteration time (None: not built)
    bubble: Optional[float]
    peak: Optional[float]  # max peak activation memory per rank, in units
    note: str = ""


def with_op_overhead(costs: Costs, overhead: float, pp: int, chunks: int, placement: str) -> Costs:
    """`costs` with `overhead` added to every op (F, B, W and an unsplit BW) of every virtual stage
    of a `pp` x `chunks` pipeline: per-op host work does not shrink with a chunk's share. (With
    per-microbatch factors, `Costs.mb_scale`, the overhead is scaled with the op it is added to.)"""
    sc = costs.resolve(pp, chunks, placement)
    n = pp * chunks

    def per_stage(kind: str) -> tuple:
        return tuple(sc.duration(kind, s) + overhead for s in range(n))

    return dataclasses.replace(costs, f=per_stage(F), b=per_stage(B), w=per_stage(W), bw=per_stage(BW))


def choose(pp: int, microbatches: int, costs: Union[Costs, Callable[[str], Costs]],
           memory_limit: Optional[float] = None, *,
           post_validation: bool = False, candidates: Optional[Sequence[str]] = None,
           op_overhead: float = 0.0) -> tuple[str, list[Candidate]]:
    """(best name, every candidate) for `pp` ranks and `microbatches`.

    Iteration time is the simulated makespan with an optimizer barrier between
    iterations (sync), or, with post-validation, the longest per-rank span
    (async: a rank starts its next iteration when it finishes this one). The
    memory limit (units: one microbatch of a rank's activations; default: 1F1B's,
    the pipeline size) is a hard filter. `costs` may be a function of the schedule's
    name: costs measured under one placement, re-placed for each candidate's stages
    (`balance.retimed`). `op_overhead` (cost units, >= 0): the runtime's host work per op,
    added to every op of each candidate (`with_op_overhead`)."""
    if not op_overhead >= 0.0:
        raise ScheduleError(f"the op overhead must be >= 0, got {op_overhead!r}")
    limit = float(pp) if memory_limit is None else memory_limit
    rows = []
    for name in candidates or names():
        entry = info(name)
        if entry.needs_extra == "ilp":
            continue  # exact solver: for small studies, not for choosing at run time
        try:
            own = costs(name) if callable(costs) else costs
            if op_overhead:
                own = with_op_overhead(own, op_overhead, pp, resolve_chunks(entry, None), entry.placement)
            sched = generate(name, pp, microbatches, costs=own, memory_limit=limit if entry.cost_driven else None,
                             post_validation=post_validation)
            result = simulate(sched, own)
        except ScheduleError as exc:
            rows.append(Candidate(name, entry.chunks, entry.placement, None, None, None, str(exc)))
            continue
        peak = max(result.peak_memory)
        iteration = max(result.span) if post_validation else result.makespan
        bubble = result.bubble_async if post_validation else result.bubble_sync
        note = "" if peak <= limit + 1e-9 else f"needs {peak:.2f} > limit {limit:g}"
        rows.append(Candidate(name, entry.chunks, entry.placement, iteration, bubble, peak, note))
    fitting = [c for c in rows if c.iteration is not None and not c.note]
    if not fitting:
        raise ScheduleError(f"no registered schedule fits the memory limit {limit:g} for pp={pp} and "
                            f"{microbatches} microbatches")
    best = min(fitting, key=lambda c: (c.iteration, c.peak))
    return best.name, rows


def table(rows: Sequence[Candidate], best: str) -> str:
    """The comparison `auto` logs: one line per candidate."""
    lines = [f"{'schedule':18s} {'chunks':>6s} {'iteration':>10s} {'bubble':>7s} {'peak mem':>8s}  note"]
    for c in sorted(rows, key=lambda c: (c.iteration is None, c.iteration or 0)):
        mark = "  <- chosen" if c.name == best else ""
        if c.iteration is None:
            lines.append(f"{c.name:18s} {c.chunks:6d} {'-':>10s} {'-':>7s} {'-':>8s}  {c.note}")
        else:
            lines.append(f"{c.name:18s} {c.chunks:6d} {c.iteration:10.4g} {c.bubble:7.4f} {c.peak:8.2f}  "
                         f"{c.note}{mark}")
    return "\n".join(lines)
