"""The real runtime at pp 8-32 on emulated devices, against our simulator and the Zero Bubble paper.

    nice -n 10 python benchmarks/emulated_scale.py                 # the quick set; writes BENCHMARKS.md's section
    nice -n 10 python benchmarks/emulated_scale.py --settings all  # every Table 5 and Table 8 setting
    python benchmarks/emulated_scale.py --no-markdown --only t5-1.5B-p8-m32

Per setting of the paper's Table 5 (one chunk per rank) and Table 8 (ZB-V, per-chunk costs), P forked
gloo ranks run emulated chunks (`runtime/emulated.py`: F, B and W wait the paper's profiled ms times
`--scale`, activations of `--activation-kib` go through our p2p, p2p latency T_comm is emulated) under
our runtime (strict NCCL-order p2p unless `--p2p-mode`), megatron-core's own 1F1B and interleaved
1F1B, all in the same processes. Every plan is made for post-validation (no optimizer barrier), as the
paper's bubble tables are; each cell is the measured bubble rate, the paper's definition (cost -
m(F+B+W)) / cost with cost the longest rank's span of the step, then our simulator's, then the
paper's where it has the column. A/A: zb-h1 run a second time at the end of the same launch (the
noise floor). overhead/op: an op's wall time beyond its emulated time (megatron's forward_step /
backward_step, the executor, the wake-up), median over our variants.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

SECTION = "## Emulated devices: the runtime at pp 8-32 against the plan and the paper"
INTERLEAVED_LAYERS = {"1.5B": 24, "6.2B": 32, "14.6B": 48, "28.3B": 64}  # the paper's script's layer counts
QUICK = ("t5-1.5B-p8-m24", "t5-1.5B-p8-m32", "t5-1.5B-p8-m64", "t5-14.6B-p16-m48", "t5-28.3B-p32-m96",
         "t8-6.2B-p16-m48", "t8-28.3B-p32-m96")
PAPER_COLUMN = {"1f1b": "1F1B", "interleaved-1f1b": "1F1B-I", "zb-h1": "ZB-H1", "zb-h2": "ZB-H2",
                "zb-auto 1x": "ZB-1p", "zb-auto 2x": "ZB-2p", "zbv": "ZB-V"}
COLUMNS = ("1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-auto 1x", "zb-auto 2x", "zbv", "v-half", "v-min",
           "auto", "megatron-1f1b", "megatron-interleaved", "zb-h1 (A/A)")


def settings() -> dict:
    from primus_megatron.schedules import paper_settings as P

    out = {}
    for table, rows, chunked in (("t5", P.TABLE5_SETTINGS, False), ("t8", P.TABLE8_SETTINGS, True)):
        for s in rows:
            out[f"{table}-{s.model}-p{s.pp}-m{s.microbatches}"] = (s, chunked)
    return out


def variants(setting, chunked: bool, scale: float) -> list:
    """Every variant of one setting, planned for post-validation (module doc)."""
    from primus_megatron import schedules as S
    from primus_megatron.schedules.auto import choose
    from primus_megatron.train import emulate as E

    p, m = setting.pp, setting.microbatches
    costs = setting.costs(share=2.0 if chunked else 1.0)  # a rank's share
    chunks = INTERLEAVED_LAYERS[setting.model] // p

    def ours(label, name, **kw):
        sched = S.generate(name, p, m, costs=costs, post_validation=True, **kw)
        return E.make_variant(label, sched, costs, scale=scale)

    out = [ours("1f1b", "1f1b"), ours("interleaved-1f1b", "interleaved-1f1b", chunks=chunks),
           ours("zb-h1", "zb-h1"), ours("zb-h2", "zb-h2"), ours("zb-auto 1x", "zb-auto", memory_limit=p),
           ours("zb-auto 2x", "zb-auto", memory_limit=2 * p), ours("zbv", "zbv"), ours("v-half", "v-half"),
           ours("v-min", "v-min")]
    best, _ = choose(p, m, costs, post_validation=True,
                     candidates=[n for n in S.names() if n not in ("zb-optimal", "interleaved-zb")])
    auto = next((v for v in out if v.label.split()[0] == best and " 2x" not in v.label), None)
    out.append(ours(f"auto={best}", best) if auto is None else
               E.make_variant(f"auto={best}", auto.schedule, costs, scale=scale))
    out.append(E.make_variant("megatron-1f1b", S.generate("1f1b", p, m), costs, scale=scale, megatron=True))
    inter = S.generate("interleaved-1f1b", p, m, chunks=chunks)
    skip = None if m % p == 0 else f"m={m} is not a multiple of pp={p}"
    out.append(E.make_variant("megatron-interleaved", inter, costs, scale=scale, megatron=True, skipped=skip))
    out.append(E.make_variant("zb-h1 (A/A)", out[2].schedule, costs, scale=scale))
    return out


def run_setting(name: str, setting, chunked: bool, args) -> dict:
    from primus_megatron.train import emulate as E

    vs = variants(setting, chunked, args.scale / 1000.0)
    if args.schedules:
        keep = args.schedules.split(",")
        vs = [v for v in vs if v.label in keep or v.label.split("=")[0] in keep]
    t0 = time.perf_counter()
    results, memory = E.run(vs, setting.pp, setting.microbatches, elements=int(args.activation_kib * 256),
                            steps=args.steps, warmup=1, p2p_mode=args.p2p_mode, p2p_timeout_s=120)
    return {"variants": vs, "results": results, "memory": memory, "seconds": time.perf_counter() - t0}


def paper_value(key: tuple, label: str, chunked: bool):
    from primus_megatron.schedules import paper_settings as P

    col = PAPER_COLUMN.get(label)
    if label.startswith("megatron-"):
        col = {"megatron-1f1b": "1F1B", "megatron-interleaved": "1F1B-I"}[label]
    table, columns = (P.TABLE8, P.TABLE8_COLUMNS) if chunked else (P.TABLE5, P.TABLE5_COLUMNS)
    if col is None or col not in columns:
        return None
    return table[key][columns.index(col)]


def report(runs: dict, args, elapsed: float, argv) -> str:
    rows, overheads, mem = [], [], []
    for name, (setting, chunked, run) in runs.items():
        key = (setting.model, setting.pp, setting.microbatches)
        mem.append((setting.pp, max(run["memory"]["private_kib"]), max(run["memory"]["rss_kib"])))
        for v, r in zip(run["variants"], run["results"]):
            paper = paper_value(key, v.label, chunked)
            if r is None:
                rows.append([name, v.label, "not run", f"{v.simulated.get('bubble_rate_async', 0):.4f}", "", "",
                             v.skipped])
                continue
            ovh = r["overhead_per_op"]
            if ovh is not None and not v.megatron:
                overheads.append((ovh, r["mean_op_time"]))
            meas, sim = r["bubble_rate_async"], v.simulated["bubble_rate_async"]
            rows.append([name, v.label, f"{meas:.4f}", f"{sim:.4f}", "-" if paper is None else f"{paper:.4f}",
                         f"{meas - sim:+.4f}",
                         "" if ovh is None else f"{1e3 * ovh:.2f} / {1e3 * r['mean_op_time']:.1f}"])
    lines = [C.command_block(C.command_line("benchmarks/emulated_scale.py", argv)), __doc__.split("\n\n", 2)[2].strip(),
             "", f"Scale: {args.scale:g} ms of emulated time per paper ms; activations {args.activation_kib:g} KiB; "
                 f"p2p {args.p2p_mode}; {args.steps} measured step(s) after one warm-up; {elapsed / 60:.1f} min on "
                 f"this machine (2 cores shared with other work; load average when the report was written "
                 f"{os.getloadavg()[0]:.1f}), taken {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
             C.table(["setting", "schedule", "measured", "simulated", "paper", "meas - sim",
                      "overhead/op ms / mean op ms"], rows), ""]
    lines.append("Memory per rank (KiB of its own / resident with the fork server's shared pages, max over ranks): "
                 + "; ".join(f"pp={p}: {a} / {b}" for p, a, b in mem))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", choices=("quick", "all"), default="quick")
    parser.add_argument("--only", default=None, help="comma-separated setting names (t5-MODEL-pP-mM, t8-...)")
    parser.add_argument("--scale", type=float, default=1.0, help="ms of emulated time per paper ms (default 1)")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--activation-kib", type=float, default=64.0)
    parser.add_argument("--schedules", default=None, help="comma-separated column labels to run (default: all)")
    parser.add_argument("--p2p-mode", choices=("strict", "strict-lazy", "plain"), default="strict")
    C.add_markdown_options(parser)
    args = parser.parse_args(argv)
    table = settings()
    names = args.only.split(",") if args.only else (list(table) if args.settings == "all" else list(QUICK))
    t0 = time.perf_counter()
    runs = {}
    for name in names:
        setting, chunked = table[name]
        run = run_setting(name, setting, chunked, args)
        runs[name] = (setting, chunked, run)
        print(f"{name}: {run['seconds']:.0f} s", file=sys.stderr, flush=True)
    C.publish(args, SECTION, report(runs, args, time.perf_counter() - t0, argv), "emulated_scale")
    return 0


if __name__ == "__main__":
    sys.exit(main())
