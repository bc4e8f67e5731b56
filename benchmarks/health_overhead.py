"""In-flight pipeline health's cost per step on emulated pp 8 (issue 61 item 5), and a picture of a
straggler's effect on the timeline.

    python benchmarks/health_overhead.py                 # writes docs/benchmarks/health.md's section and picture
    python benchmarks/health_overhead.py --no-markdown --steps 6

One launch of 8 gloo ranks whose ops sleep their emulated time (emulation/chunks.py): zb-h1, 16
microbatches, F = B = W = 5 ms, the same chunks running in turn (each leads in turn, `in_turn`) with
health off (`--pipeline-health-interval 0`), at the default interval (100: within a run this short,
only the per-step bookkeeping) and gathering every step (interval 1: the all_gather, the reduction and
the assessment every step, 100 times what the default pays). Per row: the step time (first op to
last op over the ranks; median over the measured steps of every repetition, in brackets the least and
the most) and the time spent in the health code per step on a rank (`HealthGather.spent_s` and
`spent_cpu_s`: the most over ranks of the mean over steps). Its wall time includes waiting at the
gather for the pipeline's last rank to end its step (a synchronising optimizer step waits for it
anyway; post-validation does not); its CPU time (all the process's threads) is what it takes from the
machine. With 8 ranks time-sharing 2 cores, a collective waits until every rank has had a core, so the
every-step row's wall time measures this machine's load more than the code.
A second pair of launches runs zb-h1 at pp 8, 8 microbatches, 20 ms ops, without and with pipeline rank
3 slowed 2x (`--straggler 3:2`); the picture draws the shortest measured step of each, and the section quotes
what each run's health record said at its last step.
"""
from __future__ import annotations

import dataclasses
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common as C  # noqa: E402

TITLE = "## In-flight health: its cost per step (emulated pp 8)"
PP, MICROBATCHES, OP_MS, ELEMENTS = 8, 16, 5.0, 4096
PICTURE_MICROBATCHES, PICTURE_OP_MS, SLOW_RANK, SLOW_FACTOR = 8, 20.0, 3, 2.0  # longer ops: the effect shows
ROWS = (("health off", 0), ("every 100 steps (default)", 100), ("every step", 1))
PICTURE = "health-straggler.png"


def _variants(plan):
    return [dataclasses.replace(plan, label=label, health={"health_interval": n}) for label, n in ROWS]


def overhead(args) -> list:
    """Rows of the table: per health setting, step times and the health code's own time."""
    from primus_megatron import emulation as E
    from primus_megatron import schedules as S

    costs = S.Costs(f=OP_MS, b=OP_MS, w=OP_MS)
    plan = E.plan("zb-h1", PP, MICROBATCHES, costs, scale=1e-3)[0]
    variants = _variants(plan)
    steps: dict = {label: [] for label, _ in ROWS}
    spent: dict = {label: [] for label, _ in ROWS}
    cpu: dict = {label: [] for label, _ in ROWS}
    for rep in range(args.reps):
        order = C.in_turn(variants, rep)
        results, _ = E.run(order, PP, MICROBATCHES, elements=ELEMENTS, steps=args.steps, warmup=1, p2p_timeout_s=120)
        for v, r in zip(order, results):
            steps[v.label] += _step_times(r)
            spent[v.label].append(max(statistics.mean(s["health_s"][0] for s in rank["steps"]) for rank in r["records"]))
            cpu[v.label].append(max(statistics.mean(s["health_s"][1] for s in rank["steps"]) for rank in r["records"]))
    base = statistics.median(steps[ROWS[0][0]])
    return [[label, _ms(steps[label]), f"{1e3 * max(spent[label]):.3f}", f"{1e3 * max(cpu[label]):.3f}",
             f"{100 * max(cpu[label]) / base:.3f}%"] for label, _ in ROWS]


def _step_times(result) -> list:
    """Each measured step's makespan (first op start to last op end over the ranks), seconds."""
    out = []
    for s in range(result["steps"]):
        spans = [sp for rank in result["records"] for c in rank["steps"][s]["chunks"] for sp in c["spans"]]
        out.append(max(sp[2] for sp in spans) - min(sp[1] for sp in spans))
    return out


def _ms(values) -> str:
    return f"{1e3 * statistics.median(values):.1f} ({1e3 * min(values):.1f}-{1e3 * max(values):.1f})"


def straggler_picture(path: str, steps: int) -> str:
    """One measured step without and with a rank slowed, drawn one above the other; what the
    straggler run's health record said, in words."""
    import json
    import tempfile

    from primus_megatron import emulation as E
    from primus_megatron import schedules as S
    from primus_megatron.schedules.plot import plot_timeline

    costs = S.Costs(f=PICTURE_OP_MS, b=PICTURE_OP_MS, w=PICTURE_OP_MS)
    m = PICTURE_MICROBATCHES
    plan = E.plan("zb-h1", PP, m, costs, scale=1e-3)[0]
    panels, said = {}, ""
    slowed = f"pipeline rank {SLOW_RANK} slowed {SLOW_FACTOR:g}x"
    for label, slow in (("no straggler", None), (slowed, {"rank": SLOW_RANK, "factor": SLOW_FACTOR})):
        with tempfile.TemporaryDirectory() as tmp:
            path_json = os.path.join(tmp, "health.jsonl")
            v = dataclasses.replace(plan, label=label, health={"health_interval": steps + 1, "health_json": path_json})
            (result,), _ = E.run([v], PP, m, elements=ELEMENTS, steps=steps, warmup=1,
                                 p2p_timeout_s=120, straggler=slow)
            with open(path_json, encoding="utf-8") as f:
                rec = json.loads(f.read().splitlines()[-1])["pipeline_health"]
        s = rec["slowest"]
        said += (f"* {label}: step {1e3 * rec['step_s']:.0f} ms, bubble {100 * rec['bubble']:.1f}% (plan "
                 f"{100 * rec['bubble_plan']:.1f}%); slowest pipeline rank {s['pipeline_rank']} (global rank "
                 f"{s['global_rank']}): {s['ratio']:.2f}x its plan, +{1e3 * s['excess_s']:.1f} ms per step; over the "
                 f"threshold: {rec['over'] or 'none'}\n")
        panels[f"{label}: measured step (seconds)"] = _spans(result)
    plot_timeline(panels, path, title=f"zb-h1, pp {PP}, {m} microbatches, ops {PICTURE_OP_MS:g} ms (emulated)")
    return said


def _spans(result) -> list:
    """The least disturbed (shortest) measured step's executed ops per rank as plot spans, seconds from
    its first op: on a shared machine a longer step shows another process's time slice, not the plan."""
    from primus_megatron import schedules as S
    from primus_megatron.schedules.simulation import Span

    times = _step_times(result)
    mid = min(range(len(times)), key=times.__getitem__)
    rows = [rank["steps"][mid]["timeline"] for rank in result["records"]]
    origin = min(t[4] for row in rows for t in row)
    return [[Span(r, S.Op(k, mb, c), st, a - origin, b - origin) for k, mb, c, st, a, b in row]
            for r, row in enumerate(rows)]


def main(argv=None) -> int:
    parser = C.parser(__doc__)
    parser.add_argument("--steps", type=int, default=12, help="measured steps per row and repetition (default 12)")
    parser.add_argument("--reps", type=int, default=2, help="repetitions, the rows in turn (default 2)")
    parser.add_argument("--picture", default=None, help="where the straggler picture goes (default: next to the page)")
    args = parser.parse_args(argv)
    start_load = C.load()
    rows = overhead(args)
    page_dir = os.path.dirname(args.markdown) if args.markdown else HERE
    picture = args.picture or os.path.join(page_dir, "img", PICTURE)
    health_lines = straggler_picture(picture, max(2, args.steps // 2))
    table = C.table(["health", "step ms: median (least-most)", "in health code, wall ms per step",
                     "in health code, CPU ms per step", "CPU ms / step ms"], rows)
    text = C.section(C.command_line("benchmarks/health_overhead.py", argv), C.method(__doc__),
                     f"Taken {C.taken()}, load {start_load:.1f} at the start (2 shared cores).", table,
                     f"![a straggler's effect](img/{PICTURE})",
                     "What the health record said at each run's last step:\n\n" + health_lines)
    C.publish(args, TITLE, text, "health_overhead.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
