"""In-flight pipeline health: each pipeline rank's measured op times against the plan's, the
measured bubble against the plan's, the slowest rank by its excess, and a warning when a rank
stays slower than a threshold for several intervals in a row (docs/health.md).

Pure Python, no torch: `runtime/health.py` reduces each rank's recorded ops to a `RankSample`,
gathers them over the pipeline group in one collective (`to_vector` / `from_vector`) and hands
them to a `Monitor` here. Everything below is arithmetic on those numbers, so it is tested on
hand-made timings (tests/test_health_inflight.py).

The plan's costs are relative (units of the schedule's cost model, seconds only when measured), so
they are put on the measured time axis by one scale: the lower median over ranks of measured busy
time per planned unit. A rank's ratio is then how much slower than its plan it runs compared with
the other ranks (a straggler slowed 2x reads 2.0 from pp 2 up); a job-wide slowdown moves the scale,
not the ratios, and shows in the step time instead.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional, Sequence

KINDS = ("F", "B", "W", "BW", "pair")
HOST_BYTES = 48  # a host name travels as this many byte values in the gathered vector
_HEAD = 2 * len(KINDS) + 4  # per kind (seconds, count); busy, period, steps, global rank


@dataclass
class RankSample:
    """One pipeline rank's ops over the sampled steps of an interval: per kind (seconds in all, op
    count; a pair run as two ops counts half per half), busy seconds, the steps' summed periods
    (step start to step end on this rank: its own ops and its idle time) and how many steps."""

    kinds: dict = field(default_factory=lambda: {k: [0.0, 0.0] for k in KINDS})
    busy: float = 0.0
    period: float = 0.0
    steps: int = 0
    global_rank: int = 0
    host: str = ""

    def add_op(self, kind: str, seconds: float, count: float = 1.0) -> None:
        entry = self.kinds[kind]
        entry[0] += seconds
        entry[1] += count
        self.busy += seconds

    @property
    def idle(self) -> float:
        """Idle seconds per step (the period less the ops)."""
        return max(0.0, self.period - self.busy) / max(1, self.steps)

    def to_vector(self) -> list:
        """Floats for the one gather: fixed length whatever the host name (cut to HOST_BYTES)."""
        head = [x for k in KINDS for x in self.kinds[k]] + [self.busy, self.period, float(self.steps),
                                                             float(self.global_rank)]
        name = self.host.encode("utf-8")[:HOST_BYTES]
        return head + [float(b) for b in name] + [0.0] * (HOST_BYTES - len(name))

    @classmethod
    def from_vector(cls, values: Sequence[float]) -> "RankSample":
        kinds = {k: [float(values[2 * i]), float(values[2 * i + 1])] for i, k in enumerate(KINDS)}
        busy, period, steps, rank = (float(v) for v in values[2 * len(KINDS):_HEAD])
        name = bytes(int(v) for v in values[_HEAD:_HEAD + HOST_BYTES]).rstrip(b"\0")
        return cls(kinds, busy, period, int(steps), int(rank), name.decode("utf-8", "replace"))


VECTOR_LENGTH = _HEAD + HOST_BYTES


@dataclass(frozen=True)
class Plan:
    """What the plan says one step takes: per rank, per kind (planned units in all, op count);
    and its bubble rate with a global optimizer barrier (`SimResult.bubble_sync`)."""

    kinds: tuple  # per rank a dict kind -> (units, count)
    bubble: float

    def busy(self, rank: int) -> float:
        return sum(units for units, _ in self.kinds[rank].values())


def plan_of(schedule, costs=None) -> Plan:
    """The plan's per-rank op times from the schedule and its cost model (`schedules.Costs`, unit
    costs when None): each op's own duration, a pair's as `StageCosts.pair_duration`."""
    from ..schedules import Costs, simulate

    costs = costs or Costs()
    sc = costs.resolve(schedule.pp, schedule.chunks_per_rank, schedule.placement)
    per_rank = []
    for rank, ops in enumerate(schedule.ranks):
        kinds = {k: [0.0, 0.0] for k in KINDS}
        paired = schedule.paired(rank)
        skip = False
        for p, op in enumerate(ops):
            if skip:
                skip = False
                continue
            if p in paired:  # the F at p and the B/BW at p + 1 run as one op
                b = ops[p + 1]
                units = sc.pair_duration(schedule.stage(rank, op), b.kind, schedule.stage(rank, b), op.mb, b.mb)
                kind, skip = "pair", True
            else:
                units, kind = sc.duration(op.kind, schedule.stage(rank, op), op.mb), op.kind
            kinds[kind][0] += units
            kinds[kind][1] += 1
        per_rank.append({k: tuple(v) for k, v in kinds.items() if v[1]})
    return Plan(tuple(per_rank), simulate(schedule, costs).bubble_sync)


def lower_median(values: Sequence[float]) -> float:
    """The lower middle value: with one straggler among two ranks, the other rank's."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


@dataclass(frozen=True)
class RankHealth:
    pipeline_rank: int
    global_rank: int
    host: str
    ratio: float  # measured busy / the plan's busy on the measured axis
    excess_s: float  # seconds per step over its plan
    idle_s: float  # idle seconds per step
    kinds: dict  # kind -> (measured seconds per op, planned seconds per op)

    def name(self) -> str:
        return f"pipeline rank {self.pipeline_rank} (global rank {self.global_rank}, host {self.host or '?'})"


@dataclass(frozen=True)
class Interval:
    """One gathered interval, assessed: what the log line, the JSON line and the scalars say."""

    step: int
    steps: int  # steps sampled on each rank
    bubble: float
    bubble_plan: float
    scale_s: float  # seconds per planned unit
    step_s: float  # the longest rank's period per step
    ranks: tuple
    slowest: RankHealth
    over: tuple  # pipeline ranks whose ratio exceeds the threshold
    warnings: tuple = ()


def assess(samples: Sequence[RankSample], plan: Plan, *, step: int, threshold: float) -> Interval:
    """Measured against planned, rank by rank (module doc for the scale)."""
    steps = [max(1, s.steps) for s in samples]
    busy = [s.busy / n for s, n in zip(samples, steps)]
    raw = [b / plan.busy(r) if plan.busy(r) > 0 else 1.0 for r, b in enumerate(busy)]
    scale = lower_median(raw) or 1.0
    step_s = max(s.period / n for s, n in zip(samples, steps))
    ranks = []
    for r, (s, n) in enumerate(zip(samples, steps)):
        kinds = {k: (s.kinds[k][0] / s.kinds[k][1], scale * units / count)
                 for k, (units, count) in plan.kinds[r].items() if s.kinds[k][1] > 0}
        ranks.append(RankHealth(r, s.global_rank, s.host, raw[r] / scale, busy[r] - scale * plan.busy(r),
                                s.idle, kinds))
    slowest = max(ranks, key=lambda h: (h.excess_s, h.ratio))
    bubble = 1.0 - sum(busy) / (len(samples) * step_s) if step_s > 0 else 0.0
    return Interval(step, min(steps), bubble, plan.bubble, scale, step_s, tuple(ranks), slowest,
                    tuple(h.pipeline_rank for h in ranks if h.ratio > threshold))


class Monitor:
    """Intervals in a row: a rank over `threshold` for `patience` consecutive intervals is warned
    about (again every `patience` intervals while it stays over); one interval over is only named."""

    def __init__(self, threshold: float = 1.15, patience: int = 3) -> None:
        self.threshold, self.patience = threshold, patience
        self.streak: dict = {}

    def update(self, samples: Sequence[RankSample], plan: Plan, step: int) -> Interval:
        got = assess(samples, plan, step=step, threshold=self.threshold)
        self.streak = {r: self.streak.get(r, 0) + 1 for r in got.over}
        warnings = tuple(_warning(got.ranks[r], n, self.threshold) for r, n in sorted(self.streak.items())
                         if n % self.patience == 0)
        return Interval(**{**got.__dict__, "warnings": warnings})


def _warning(h: RankHealth, intervals: int, threshold: float) -> str:
    return (f"pipeline health: {h.name()} has run slower than {threshold:g}x its plan for {intervals} intervals in "
            f"a row (now {h.ratio:.2f}x, +{1e3 * h.excess_s:.1f} ms per step): a slow GPU, host or link slows "
            f"every rank of its pipeline")


def line(got: Interval) -> str:
    """The one log line of an interval."""
    ms = lambda x: f"{1e3 * x:.2f}"  # noqa: E731
    stages = "; ".join(f"{h.pipeline_rank}: " + " ".join(f"{k} {ms(m)}/{ms(p)}" for k, (m, p) in h.kinds.items())
                       for h in got.ranks)
    s = got.slowest
    share = s.excess_s / got.step_s if got.step_s > 0 else 0.0
    over = (f"; over the threshold: pipeline rank(s) {', '.join(map(str, got.over))}" if got.over else "")
    return (f"pipeline health at step {got.step} ({got.steps} steps sampled): step {ms(got.step_s)} ms, bubble "
            f"{100 * got.bubble:.1f}% (plan {100 * got.bubble_plan:.1f}%); op ms measured/plan by pipeline rank: "
            f"{stages}; slowest {s.name()}: {s.ratio:.2f}x its plan, +{ms(s.excess_s)} ms per step "
            f"({100 * share:.0f}% of the step){over}")


def record(got: Interval) -> dict:
    """The JSON line's fields (for other collectors)."""
    r6 = lambda x: round(x, 6)  # noqa: E731
    return {"step": got.step, "steps_sampled": got.steps, "step_s": r6(got.step_s), "bubble": r6(got.bubble),
            "bubble_plan": r6(got.bubble_plan), "plan_unit_s": r6(got.scale_s),
            "ranks": [{"pipeline_rank": h.pipeline_rank, "global_rank": h.global_rank, "host": h.host,
                       "ratio": r6(h.ratio), "excess_s": r6(h.excess_s), "idle_s": r6(h.idle_s),
                       "ops": {k: {"s": r6(m), "plan_s": r6(p)} for k, (m, p) in h.kinds.items()}}
                      for h in got.ranks],
            "slowest": {"pipeline_rank": got.slowest.pipeline_rank, "global_rank": got.slowest.global_rank,
                        "host": got.slowest.host, "ratio": r6(got.slowest.ratio), "excess_s": r6(got.slowest.excess_s)},
            "over": list(got.over), "warnings": list(got.warnings)}


def scalars(got: Interval) -> dict:
    """TensorBoard / W&B scalars: tag -> value."""
    out = {"pipeline-health/bubble": got.bubble, "pipeline-health/bubble-plan": got.bubble_plan,
           "pipeline-health/step-ms": 1e3 * got.step_s, "pipeline-health/slowest-rank": got.slowest.pipeline_rank,
           "pipeline-health/slowest-ratio": got.slowest.ratio,
           "pipeline-health/slowest-excess-ms": 1e3 * got.slowest.excess_s}
    for h in got.ranks:
        out[f"pipeline-health/rank{h.pipeline_rank}-ratio"] = h.ratio
    return out


def check(interval: Optional[int], threshold: Optional[float], patience: Optional[int],
          json_path: Optional[str] = None) -> Optional[str]:
    """One sentence naming the option that is wrong, or None."""
    if interval is not None and (not isinstance(interval, int) or interval < 0):
        return f"--pipeline-health-interval must be a whole number of steps >= 0 (0: off), got {interval!r}"
    if threshold is not None and not (threshold > 1.0 and threshold < float("inf")):
        return f"--pipeline-health-threshold must be a factor > 1 (e.g. 1.15), got {threshold!r}"
    if patience is not None and (not isinstance(patience, int) or patience < 1):
        return f"--pipeline-health-patience must be a whole number of intervals >= 1, got {patience!r}"
    if json_path:
        folder = os.path.dirname(os.path.abspath(json_path))
        if os.path.isdir(json_path) or not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            return f"--pipeline-health-json must name a file in an existing, writable folder, got {json_path!r}"
    return None


def drifted(monitor: "Monitor") -> bool:
    """A rank has stayed over the threshold for `patience` intervals in a row: a drift, not noise."""
    return any(n >= monitor.patience for n in monitor.streak.values())


def measured_costs(samples: Sequence[RankSample], plan: Plan, scale_s: float, chunks: int, base=None):
    """Per-rank costs (`schedules.Costs`, seconds) from one interval's samples, for a re-plan: each
    rank's median F, B, W (and BW) op time; a kind a rank ran only inside overlapped pairs (or not at
    all) keeps its planned time on the measured axis (`scale_s` per unit). Per-rank lists are per op
    of one chunk, so they are given x chunks (`Costs.resolve` divides a rank's share among its chunks).
    What is not timed here (p2p, memory, all-to-all, per-microbatch factors) stays `base`'s."""
    import dataclasses

    from ..schedules import Costs

    base = base or Costs()

    def per_rank(kind: str) -> tuple:
        out = []
        for r, s in enumerate(samples):
            seconds, count = s.kinds[kind]
            units, planned = plan.kinds[r].get(kind, (0.0, 0))
            out.append(chunks * (seconds / count if count else scale_s * units / planned if planned else 0.0))
        return tuple(out)

    f, b, w = per_rank("F"), per_rank("B"), per_rank("W")
    bw = per_rank("BW") if any(s.kinds["BW"][1] for s in samples) else base.bw
    if not any(w):  # a schedule without W ops: B carries the whole backward
        w = tuple(0.0 for _ in w)
    return dataclasses.replace(base, f=f, b=b, w=w, bw=bw)
