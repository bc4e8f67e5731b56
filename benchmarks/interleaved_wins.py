"""Where interleaved 1F1B beats each of our schedules: the Zero Bubble paper's 21 settings, simulated
with the runtime's host work per op charged on every op (what `auto.choose(op_overhead=...)` does).

    python benchmarks/interleaved_wins.py                  # host work 0 and 1 ms per op
    python benchmarks/interleaved_wins.py --overheads 0,0.5,1,2 --no-markdown

Per setting (its T_F, T_B, T_W, T_comm in ms and the paper's memory model), interleaved 1F1B with
the chunk count megatron gets from the paper's layer count (`emulated_scale.INTERLEAVED_LAYERS`;
megatron-core's interleaved order, which ours reproduces) against each of our schedules. Interleaved
1F1B's iteration is its makespan (megatron's step synchronises before the optimizer); ours is the
makespan too ("synchronous": without post-validation), or the longest rank's span of a plan made for
post-validation ("post-validated": `--optimizer-post-validation`, no synchronisation). A cell lists
our schedules interleaved 1F1B beats, by how much of their iteration, with their peak activation
memory next to interleaved's (units: one microbatch's share of a rank; 1F1B's is pp).
Host work per op: measured by `primus-pipeline emulate` (`main_cpu_per_op`, about 0.3-1 ms here);
on a GPU it overlaps with the device except where the device waits for the host.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

SECTION = "## Where interleaved 1F1B beats our schedules (simulated with host work per op)"
OURS = (("1f1b", "1f1b", {}), ("zb-h1", "zb-h1", {}), ("zb-h2", "zb-h2", {}), ("zb-auto 1x", "zb-auto", {"limit": 1}),
        ("zb-auto 2x", "zb-auto", {"limit": 2}), ("zbv", "zbv", {}), ("v-half", "v-half", {}),
        ("v-min", "v-min", {}))


def cell(setting, chunked: bool, overhead: float) -> tuple:
    from emulated_scale import INTERLEAVED_LAYERS

    from primus_megatron import schedules as S
    from primus_megatron.schedules.auto import with_op_overhead
    from primus_megatron.schedules.registry import resolve_chunks

    p, m = setting.pp, setting.microbatches
    base = setting.costs(share=2.0 if chunked else 1.0)

    def run(name: str, chunks=None, limit=None, post_validation=False):
        entry = S.info(name)
        costs = with_op_overhead(base, overhead, p, resolve_chunks(entry, chunks), entry.placement)
        sched = S.generate(name, p, m, costs=costs, chunks=chunks, memory_limit=None if limit is None else limit * p,
                           post_validation=post_validation)
        res = S.simulate(sched, costs)
        return (max(res.span) if post_validation else res.makespan), max(res.peak_memory)

    inter = run("interleaved-1f1b", chunks=INTERLEAVED_LAYERS[setting.model] // p)
    beaten = {False: [], True: []}
    for pv in (False, True):
        for label, name, kw in OURS:
            t, mem = run(name, limit=kw.get("limit"), post_validation=pv)
            if inter[0] < t - 1e-9:
                beaten[pv].append(f"{label} {1 - inter[0] / t:.1%} ({mem:.1f})")
    return inter, beaten


def main(argv=None) -> int:
    from emulated_scale import settings

    parser = C.parser(__doc__)
    parser.add_argument("--overheads", default="0,1", help="host work per op, ms (comma-separated; default 0,1)")
    args = parser.parse_args(argv)
    overheads = [float(x) for x in args.overheads.split(",")]
    t0 = time.process_time()
    rows = []
    for name, (setting, chunked) in settings().items():
        for o in overheads:
            inter, beaten = cell(setting, chunked, o)
            rows.append([name, str(setting.pp), str(setting.microbatches), f"{setting.comm:.3f}", f"{o:g}",
                         f"{inter[1]:.1f}", "; ".join(beaten[False]) or "none", "; ".join(beaten[True]) or "none"])
        print(name, file=sys.stderr, flush=True)
    text = C.section(C.command_line("benchmarks/interleaved_wins.py", argv), C.method(__doc__),
                     C.table(["setting", "pp", "m", "comm ms", "host ms/op", "interleaved's mem",
                              "ours it beats, synchronous: by (our mem)", "ours it beats, post-validated"], rows),
                     f"{(time.process_time() - t0) / 60:.1f} min of CPU.")
    C.publish(args, SECTION, text, "interleaved_wins")
    return 0


if __name__ == "__main__":
    sys.exit(main())
