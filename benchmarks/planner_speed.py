"""Planner speed: time to generate and to validate every registered schedule.

    python benchmarks/planner_speed.py            # pp=32 x 256 microbatches (median of 3) + pp=64 x 1024 scale rows
    python benchmarks/planner_speed.py --quick    # pp=32 x 256, one run each, no scale rows

Plus, at pp=32 x 256, `zb-auto` under the zero-bubble paper's 28.3B costs and memory model
(`schedules/paper_settings.py`) at memory limits p and 2p, planned for a barrier (the makespan)
and for post-validation (the longest span): the cases where it searches the most.

For every registered schedule except zb-optimal (an integer program, small
cases only): `schedules.generate(name, pp, m, validate=False)` and then
`schedules.validate(schedule, costs=..., memory_limit=...)` (what `generate`
does by default: completeness, dependency order, memory, lowering to
batches of send/recv and the NCCL/RCCL hang check), CPU time of each, default costs
(unit) and default memory limit. Each (schedule, size) runs in a fresh
process with a time limit, so a pathological case cannot hang the benchmark;
one that runs out of time is reported as such. Exit status 0 unless a case
fails to run (an exception), whatever the times.
"""
from __future__ import annotations

import os
import queue
import sys
import time
import traceback
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

SECTION = "## Planner speed"
EXCLUDED = ("zb-optimal",)
SLOW_S = 1.0
WHERE_TIME_GOES = (
    "Where the time goes: every pass over the ops is Python, and validation makes three (a simulation under the "
    "schedule's costs, lowering, the hang check). Since issue #28 the hang check runs every rank's items under "
    "NCCL/RCCL's queue semantics as a plain loop (lazy communicator init; eager only where lazy fails) after "
    "checking each item, and the lowering orders all of a rank's communication in one global order and batches "
    "it: validation takes 1.5 to 2.5 times as long as the vectorised per-pair check it replaced (which modelled "
    "independent channels and missed the interleaved hang): CPU time (`time.process_time`, best of 3, side by "
    "side on 2026-11-25) at pp=32, m=256 zbv 0.28 -> 0.59 s, 1f1b 0.12 -> 0.24 s; at pp=64, m=1024 zbv "
    "2.5 -> 5.0 s, zb-h2 1.5 -> 2.3 s, 1f1b 1.1 -> 2.4 s. `zb-auto`, `v-half` and `v-min` also build several "
    "candidate orders and keep the best (`variants.best_of`): fixed orders are simulated to be scored, "
    "list-scheduled ones score themselves while they are built. `v-half` is the slowest because it tries "
    "three: the squeezed block, the compacted block and a list-scheduled order, the one chosen with equal "
    "costs (it packs the warm-up and cool-down better); that candidate alone (block compaction, then the list "
    "scheduler over every op) plus validation take about a second here. Building a shorter plan and repeating "
    "its steady state was tried and not adopted: with per-stage costs the cool-down the list scheduler picks "
    "depends on how far the ranks drift apart over all microbatches, so the repeated plan is not the one it "
    "would build (and validation would still take half a second). On this shared machine whole runs differ by up to "
    "1.5x (v-min at pp=32 measured 0.73 s and 1.15 s in total in two runs on 2026-11-22): compare rows "
    "within one run.")


YARDSTICK = "sum(range(10**6))"


def yardstick_ms() -> float:
    """This machine's single-core CPython speed, as `python -m timeit "sum(range(10**6))"` reports it
    (best of 5 loops of 10): every planner time scales with it."""
    import timeit

    return 1e3 * min(timeit.repeat(YARDSTICK, number=10, repeat=5)) / 10


# (label, schedule, options of generate): zb-auto where it searches the most (module doc)
PAPER_CASES = [(f"zb-auto, paper 28.3B costs, limit {k}p, {objective}", "zb-auto",
                {"memory_limit_per_pp": k, "post_validation": objective == "post-validation"})
               for k in (1, 2) for objective in ("barrier", "post-validation")]


def _options(options: Optional[dict], pp: int) -> dict:
    if not options:
        return {}
    from primus_megatron.schedules import paper_settings as P

    setting = P.TABLE5_SETTINGS[-1]  # 28.3B, p=32, m=256
    return {"costs": setting.costs(), "memory_limit": options["memory_limit_per_pp"] * pp,
            "post_validation": options["post_validation"]}


def _case(name: str, pp: int, m: int, runs: int, single_if_over: float, out, options: Optional[dict] = None) -> None:
    try:
        from primus_megatron import schedules as S

        gen, val, ops = [], [], 0
        extra = _options(options, pp)
        clock = time.process_time  # CPU time: the planner is single-threaded, so on an idle machine it is the
        # wall time, and on a shared one it leaves out the time other work takes the core
        for i in range(runs):
            t0 = clock()
            sched = S.generate(name, pp, m, validate=False, **extra)
            t1 = clock()
            S.validate(sched, costs=sched.meta.get("costs"), memory_limit=sched.meta.get("memory_limit"))
            t2 = clock()
            gen.append(t1 - t0)
            val.append(t2 - t1)
            ops = sum(len(r) for r in sched.ranks)
            if i == 0 and t2 - t0 > single_if_over:
                break  # slow: one run is enough
        out.put(("ok", {"gen": gen, "val": val, "ops": ops}))
    except BaseException as exc:
        out.put(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def measure(name: str, pp: int, m: int, runs: int, single_if_over: float, timeout_s: float,
            options: Optional[dict] = None) -> dict:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_case, args=(name, pp, m, runs, single_if_over, out, options))
    proc.start()
    try:
        status, value = out.get(timeout=timeout_s)
    except queue.Empty:
        return {"timeout": timeout_s}
    finally:
        if proc.is_alive():
            proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    if status != "ok":
        raise RuntimeError(f"{name} at pp={pp}, m={m} failed:\n{value}")
    return value


def cell(seconds: list) -> str:
    if len(seconds) == 1:
        return f"{seconds[0]:.3f} (1 run)"
    return f"{C.median(seconds):.3f} ({min(seconds):.3f}-{max(seconds):.3f})"


def table(rows: list, pp: int, m: int) -> tuple[str, list]:
    cells, slow = [], []
    for name, r in rows:
        if "timeout" in r:
            cells.append([f"`{name}`", "", f"> {r['timeout']:.0f} (time limit)", "", "", "yes"])
            slow.append(f"{name} (did not finish in {r['timeout']:.0f} s)")
            continue
        gen, val = C.median(r["gen"]), C.median(r["val"])
        over = [what for what, t in (("generate", gen), ("validate", val)) if t > SLOW_S]
        if gen + val > SLOW_S:
            slow.append(f"{name} ({', '.join(over) or 'generate + validate'}: {gen:.2f} + {val:.2f} s)")
        cells.append([f"`{name}`", r["ops"], cell(r["gen"]), cell(r["val"]), f"{gen + val:.3f}",
                      "; ".join(over) if over else ("total" if gen + val > SLOW_S else "no")])
    header = ["schedule", "ops", "generate (s)", "validate (s)", "total (s)", "over 1 s"]
    return f"pp={pp}, {m} microbatches:\n\n" + C.table(header, cells), slow


def main(argv=None) -> int:
    parser = C.parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="pp=32 x 256 only, one run per schedule")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per (schedule, size) (default 900; quick 300)")
    args = parser.parse_args(argv)

    from primus_megatron import schedules as S

    names = [n for n in S.names() if n not in EXCLUDED]
    timeout = args.timeout or (300.0 if args.quick else 900.0)
    sizes = [(32, 256, 1 if args.quick else 3, float("inf"))]
    if not args.quick:
        sizes.append((64, 1024, 3, 10.0))  # one run where the first takes over 10 s
    yardstick = yardstick_ms()
    counters = C.cpu_counters()
    started = time.monotonic()
    sections, all_slow = [], {}
    for pp, m, runs, single_if_over in sizes:
        rows = []
        extra = PAPER_CASES if (pp, m) == (32, 256) else []
        for label, name, options in [(n, n, None) for n in names] + extra:
            r = measure(name, pp, m, runs, single_if_over, timeout, options)
            rows.append((label, r))
            shown = "timeout" if "timeout" in r else f"generate {C.median(r['gen']):.3f} s, validate {C.median(r['val']):.3f} s"
            print(f"  pp={pp} m={m} {label}: {shown}", flush=True)
        text, slow = table(rows, pp, m)
        sections.append(text)
        all_slow[(pp, m)] = slow
    elapsed = time.monotonic() - started
    steal = C.steal_share(counters, C.cpu_counters())
    steal_note = "" if steal is None else f" (the hypervisor took {100 * steal:.0f}% of its CPU time meanwhile)"
    runs_note = ("one run each" if args.quick else
                 "median (min-max) of 3 runs; at pp=64 a case whose first run took over 10 s is run once")
    summary = []
    for (pp, m), slow in all_slow.items():
        summary.append(f"over {SLOW_S:g} s at pp={pp}, m={m}: " + ("; ".join(slow) if slow else "none"))
    body = C.section(
        C.command_line("benchmarks/planner_speed.py", argv),
        f"CPU time (`time.process_time`: the wall time on an idle machine, the planner being single-threaded) "
        f"of `schedules.generate(name, pp, m, validate=False)` and of `schedules.validate(schedule, "
        f"costs=..., memory_limit=...)` (completeness, dependency order, memory, lowering to batches of "
        f"send/recv, NCCL/RCCL hang check), every registered schedule but zb-optimal, default (unit) costs and "
        f"memory limit, and at pp=32 `zb-auto` under the paper's 28.3B costs and memory model at limits p and "
        f"2p, planned for a barrier and for post-validation; each case in a fresh process, {runs_note}; `ops` = "
        f"compute ops in the schedule. "
        f"{elapsed:.0f} s in all on a shared 2-core machine{steal_note}. The planner is "
        f"single-threaded pure Python, so its times scale with single-core CPython speed: here "
        f"`python -m timeit \"{YARDSTICK}\"` takes {yardstick:.1f} ms; run it on your machine to scale "
        f"the tables.",
        *sections, "\n".join(f"- {line}" for line in summary), WHERE_TIME_GOES)
    C.publish(args, SECTION, body, "planner_speed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
