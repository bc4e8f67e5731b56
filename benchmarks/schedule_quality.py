"""Schedule quality benchmark: our schedules vs torch.distributed.pipelining's orders.

    python benchmarks/schedule_quality.py            # full grid, writes docs/benchmarks/schedule-quality.md
    python benchmarks/schedule_quality.py --quick    # smaller grid

Grid: pp in {4, 8, 16} x microbatches in {2p, 3p, 4p, 8p} x comm in {0, 0.1},
equal costs f = b = w = 1. Every registered schedule except zb-optimal (an ILP,
small cases only) is scored by our simulator: makespan, sync and async bubble,
max peak activation memory. torch's own orders (from
`_schedule_visualizer.get_schedule_ops`, 2 stages per rank) are converted to
our IR and scored by the same simulator under the same costs:

- ScheduleInterleavedZeroBubble: loop placement (stage s on rank s % pp);
- ScheduleZBVZeroBubble and ScheduleDualPipeV: V placement; DualPipeV's
  OVERLAP_F_B actions are expanded into their sub-actions, in order.

Each torch order is paired with our schedules of the same family; ours is
"no worse" when one of them has a sync bubble <= theirs + 1e-9 at a peak
memory <= theirs. Exit status 1 if any pairing or reference check fails.
"""
from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402  (puts the repository first on the import path)

from primus_megatron.schedules import (  # noqa: E402
    B, BW, F, LOOP, V, W, Costs, Op, Schedule, ScheduleError, generate, names, owner_of, simulate, validate,
)

SECTION = "## Schedule quality (simulated)"
EXCLUDED = ("zb-optimal",)
EPS = 1e-9
TORCH_KINDS = {"F": F, "I": B, "W": W, "B": BW}
# torch class name -> (placement, our schedules of the same family and memory class)
TORCH_ORDERS = {
    "ScheduleInterleavedZeroBubble": (LOOP, ("interleaved-zb", "zb-h1", "zb-auto", "interleaved-1f1b")),
    "ScheduleZBVZeroBubble": (V, ("zbv",)),
    "ScheduleDualPipeV": (V, ("zbv",)),
}


@dataclass
class Score:
    name: str
    makespan: float = float("nan")
    sync: float = float("nan")
    asyn: float = float("nan")
    peak: float = float("nan")
    error: Optional[str] = None
    note: str = ""

    def cell(self) -> str:
        if self.error:
            return f"n/a ({self.error})"
        return f"{self.sync:.4f} / {self.asyn:.4f} ({_num(self.peak)})" + (f" {self.note}" if self.note else "")


def _num(x: float) -> str:
    return f"{x:.4f}".rstrip("0").rstrip(".")


def _score(name: str, schedule: Schedule, costs: Costs, note: str = "") -> Score:
    r = simulate(schedule, costs)
    return Score(name, r.makespan, r.bubble_sync, r.bubble_async, r.max_peak_memory, note=note)


def ours(name: str, pp: int, m: int, costs: Costs) -> Score:
    try:
        return _score(name, generate(name, pp, m, costs=costs), costs)
    except ScheduleError as exc:
        return Score(name, error=str(exc))


def torch_schedule(cls_name: str, pp: int, m: int) -> Schedule:
    """torch's order for `cls_name` as our IR (raises ValueError if it cannot be converted)."""
    from torch.distributed.pipelining import schedules as tsched
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    placement = TORCH_ORDERS[cls_name][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        actions = get_schedule_ops(getattr(tsched, cls_name), pp, m, num_stages_per_rank=2)
    ranks = []
    for rank, row in enumerate(actions):
        ops = []
        for action in row:
            if action is None:
                continue
            for sub in (action.sub_actions or (action,)):  # OVERLAP_F_B -> its F and B, in order
                kind = TORCH_KINDS.get(sub.computation_type.value)
                if kind is None or sub.microbatch_index is None:
                    raise ValueError(f"rank {rank} has action {sub!r}, which is not a compute op")
                owner, chunk = owner_of(placement, pp, sub.stage_index)
                if owner != rank:
                    raise ValueError(f"rank {rank} runs stage {sub.stage_index}, which {placement} placement puts on rank {owner}")
                ops.append(Op(kind, sub.microbatch_index, chunk))
        ranks.append(tuple(ops))
    return Schedule(cls_name.removeprefix("Schedule"), pp, m, 2, placement, tuple(ranks))


def theirs(cls_name: str, pp: int, m: int, costs: Costs) -> Score:
    label = cls_name.removeprefix("Schedule")
    try:
        schedule = torch_schedule(cls_name, pp, m)
    except Exception as exc:  # report why it could not be converted, in the table
        return Score(label, error=f"not converted: {type(exc).__name__}: {exc}")
    note = ""
    try:
        validate(schedule, costs=costs)
    except ScheduleError as exc:
        note = f"[fails our validator: {exc}]"
    try:
        return _score(label, schedule, costs, note)
    except ScheduleError as exc:
        return Score(label, error=str(exc))


@dataclass
class Pairing:
    pp: int
    m: int
    comm: float
    torch: Score
    candidates: list[Score]
    best: Optional[Score]
    ok: bool


def pair(pp: int, m: int, comm: float, torch_score: Score, ours_by_name: dict[str, Score], family: tuple[str, ...]) -> Pairing:
    cands = [ours_by_name[n] for n in family if n in ours_by_name and not ours_by_name[n].error]
    if torch_score.error:
        return Pairing(pp, m, comm, torch_score, cands, None, False)
    fitting = [c for c in cands if c.peak <= torch_score.peak + EPS]
    pool = fitting or cands
    best = min(pool, key=lambda c: (c.sync, c.peak)) if pool else None
    ok = bool(fitting) and best is not None and best.sync <= torch_score.sync + EPS
    return Pairing(pp, m, comm, torch_score, cands, best, ok)


# ---------------------------------------------------------------- references (pp=8, m=24, comm 0)

Check = Callable[[Score], bool]
REFERENCES: list[tuple[str, str, Check]] = [
    ("1F1B bubble 0.2258", "1f1b", lambda s: round(s.sync, 4) == 0.2258),
    ("ZB-H1 bubble 0.0886", "zb-h1", lambda s: round(s.sync, 4) == 0.0886),
    ("ZB-V sync 0.0464 and async 0 at peak <= 8", "zbv",
     lambda s: round(s.sync, 4) == 0.0464 and s.asyn <= EPS and s.peak <= 8 + EPS),
    ("ZB-H2 async 0", "zb-h2", lambda s: s.asyn <= EPS),
    ("V-Half peak <= 5 with bubble <= 0.106", "v-half", lambda s: s.peak <= 5 + EPS and s.sync <= 0.106 + EPS),
    ("V-Min peak <= 4 with bubble <= 0.158", "v-min", lambda s: s.peak <= 4 + EPS and s.sync <= 0.158 + EPS),
]


def run(grid: list[tuple[int, int, float]]) -> tuple[str, str, bool]:
    """(markdown body, summary line, all passed)."""
    import torch

    schedules = [n for n in names() if n not in EXCLUDED]
    score_rows, pairings = [], []
    ref_scores: dict[str, Score] = {}
    for pp, m, comm in grid:
        costs = Costs(comm=comm)
        mine = {n: ours(n, pp, m, costs) for n in schedules}
        torch_scores = {cls: theirs(cls, pp, m, costs) for cls in TORCH_ORDERS}
        score_rows.append([str(pp), str(m), _num(comm)] + [mine[n].cell() for n in schedules]
                          + [torch_scores[c].cell() for c in TORCH_ORDERS])
        for cls, (_, family) in TORCH_ORDERS.items():
            pairings.append(pair(pp, m, comm, torch_scores[cls], mine, family))
        if (pp, m, comm) == (8, 24, 0.0):
            ref_scores = mine
    if not ref_scores:  # the reference cell is always computed, even when the grid skips it
        ref_scores = {n: ours(n, 8, 24, Costs()) for n in {r[1] for r in REFERENCES}}

    parts = []
    parts.append("### Bubble rates and memory\n\nEach cell: `sync bubble / async bubble (max peak memory)`. "
                 "Ours first, then torch's orders (prefixed `torch:`).\n")
    headers = ["pp", "m", "comm"] + schedules + [f"torch: {c.removeprefix('Schedule')}" for c in TORCH_ORDERS]
    parts.append(C.table(headers, score_rows))

    pair_rows = []
    for p in pairings:
        t = p.torch
        theirs_cell = t.cell() if not t.error else f"n/a ({t.error})"
        if p.best is None:
            ours_cell = "none built"
        else:
            ours_cell = f"{p.best.name}: {p.best.cell()}"
        others = ", ".join(f"{c.name} {c.sync:.4f} ({_num(c.peak)})" for c in p.candidates if c is not p.best)
        pair_rows.append([str(p.pp), str(p.m), _num(p.comm), t.name, theirs_cell, ours_cell, others or "-",
                          "ok" if p.ok else "**WORSE**"])
    parts.append("\n### Pairings with torch.distributed.pipelining\n\n"
                 "Ours is *ok* when one of our schedules of the same family reaches a sync bubble <= torch's "
                 "(+1e-9) at a max peak memory <= torch's; the best such schedule is shown (or, if none fits "
                 "torch's memory, our lowest bubble).\n")
    parts.append(C.table(["pp", "m", "comm", "torch order", "torch: sync / async (peak)", "best of ours",
                           "our other candidates: sync (peak)", "verdict"], pair_rows))

    ref_rows, ref_ok = [], 0
    for label, name, check in REFERENCES:
        s = ref_scores.get(name) or Score(name, error="not registered")
        passed = not s.error and check(s)
        ref_ok += passed
        got = s.cell() if not s.error else f"n/a ({s.error})"
        ref_rows.append([label, name, got, "pass" if passed else "**FAIL**"])
    parts.append("\n### Reference points (pp=8, m=24, comm 0)\n")
    parts.append(C.table(["reference", "schedule", "ours: sync / async (peak)", "result"], ref_rows))

    worse = [p for p in pairings if not p.ok]
    by_order: dict[str, list[Pairing]] = {}
    for p in pairings:
        by_order.setdefault(p.torch.name, []).append(p)
    per_order = "; ".join(f"{name} {sum(p.ok for p in ps)}/{len(ps)} ok" for name, ps in by_order.items())
    summary = (f"SUMMARY: pairings {len(pairings) - len(worse)}/{len(pairings)} ok ({per_order}); "
               f"references {ref_ok}/{len(REFERENCES)} pass; torch {torch.__version__}")
    parts.append(f"\n{summary}\n")
    return "\n".join(parts), summary, not worse and ref_ok == len(REFERENCES)


def main(argv: Optional[list[str]] = None) -> int:
    parser = C.parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller grid: pp in {4, 8}, microbatches in {2p, 3p}")
    args = parser.parse_args(argv)

    pps, factors = ((4, 8), (2, 3)) if args.quick else ((4, 8, 16), (2, 3, 4, 8))
    grid = [(pp, f * pp, comm) for pp in pps for f in factors for comm in (0.0, 0.1)]
    t0 = time.time()
    body, summary, ok = run(grid)
    elapsed = time.time() - t0
    text = C.section(
        C.command_line("benchmarks/schedule_quality.py", argv),
        f"Equal costs f = b = w = 1 per rank and microbatch (a 2-chunk op costs 1/2), comm = p2p latency per "
        "message; memory in units of one microbatch's activations on one rank (1F1B peaks at pp). "
        "sync bubble = 1 - busy / (pp x makespan); async bubble uses the longest per-rank span instead "
        f"(post-validation, no end-of-step barrier). Grid of {len(grid)} cells, {elapsed:.0f} s on this machine.",
        body)
    C.publish(args, SECTION, text, "schedule_quality")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
