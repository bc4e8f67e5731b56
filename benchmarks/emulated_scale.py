"""The real runtime at pp 8-32 on emulated devices, against our simulator and the Zero Bubble paper.

    nice -n 10 python benchmarks/emulated_scale.py                 # the quick set; writes docs/benchmarks/emulated.md's section
    nice -n 10 python benchmarks/emulated_scale.py --settings all  # every Table 5 and Table 8 setting
    python benchmarks/emulated_scale.py --no-markdown --only t5-1.5B-p8-m32
    python benchmarks/emulated_scale.py --estimate --settings all  # planned emulated time of a run, no ranks
    python benchmarks/emulated_scale.py --post-validation          # iteration time with/without post-validation

Per setting of the paper's Table 5 (one chunk per rank) and Table 8 (ZB-V, per-chunk costs), P forked
gloo ranks run emulated chunks (`emulation/chunks.py`: F, B and W wait the paper's profiled ms times
`--scale`, activations of `--activation-kib` go through our p2p, p2p latency T_comm is emulated) under
our runtime (strict NCCL-order p2p unless `--p2p-mode`), megatron-core's own 1F1B and interleaved
1F1B, and torch.distributed.pipelining's ScheduleInterleavedZeroBubble / ScheduleZBVZeroBubble /
ScheduleDualPipeV (`emulation/torch_stages.py`, two stages per rank, plain gloo p2p as torch posts
it), all in the same processes. Every plan is made for post-validation (no optimizer barrier), as the
paper's bubble tables are, and on the paper's costs alone (zb-auto's and the V rows' orders are the
paper's plans), but `auto`, which chooses and plans its pick with the measured host work per op
charged to every op (`emulation.planning_costs`); each cell is the measured bubble rate, the paper's definition (cost -
m(F+B+W)) / cost with cost the longest rank's span of the step, then our simulator's, then the
paper's where it has the column. A/A: zb-h1 run a second time at the end of the same launch (the
noise floor). overhead/op: an op's wall time beyond its emulated time (megatron's forward_step /
backward_step, the executor, the wake-up), median over the step's ops; cpu/op: every rank's CPU time
in the step (all threads) per emulated op. load: this machine's 1-minute load average when the
setting started (2 cores).
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

SECTION = "## Emulated devices, all 21 settings: ours, megatron's and torch's schedules (strict p2p)"
PV_SECTION = "## Emulated devices: iteration time with and without post-validation (pp 8-32)"
PV_SETTINGS = ("t5-1.5B-p8-m24", "t5-14.6B-p16-m48", "t5-28.3B-p32-m96")
INTERLEAVED_LAYERS = {"1.5B": 24, "6.2B": 32, "14.6B": 48, "28.3B": 64}  # the paper's script's layer counts
QUICK = ("t5-1.5B-p8-m24", "t5-1.5B-p8-m32", "t5-1.5B-p8-m64", "t5-14.6B-p16-m48", "t5-28.3B-p32-m96",
         "t8-6.2B-p16-m48", "t8-28.3B-p32-m96")
PAPER_COLUMN = {"1f1b": "1F1B", "interleaved-1f1b": "1F1B-I", "zb-h1": "ZB-H1", "zb-h2": "ZB-H2",
                "zb-auto 1x": "ZB-1p", "zb-auto 2x": "ZB-2p", "zbv": "ZB-V"}
COLUMNS = ("1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-auto 1x", "zb-auto 2x", "zbv", "v-half", "v-min",
           "auto", "megatron-1f1b", "megatron-interleaved", "torch-interleaved-zb", "torch-zbv", "torch-dualpipev",
           "zb-h1 (A/A)")
OURS_ZB = ("zb-h1", "zb-h2", "zb-auto 1x", "zb-auto 2x", "zbv", "v-half", "v-min")


def settings() -> dict:
    from primus_megatron.schedules import paper_settings as P

    out = {}
    for table, rows, chunked in (("t5", P.TABLE5_SETTINGS, False), ("t8", P.TABLE8_SETTINGS, True)):
        for s in rows:
            out[f"{table}-{s.model}-p{s.pp}-m{s.microbatches}"] = (s, chunked)
    return out


def variants(setting, chunked: bool, scale: float, op_overhead_s: float = 0.0) -> list:
    """Every variant of one setting, planned for post-validation (module doc); `auto` chooses with
    `op_overhead_s` of host work charged to every op."""
    from primus_megatron import emulation as E
    from primus_megatron import schedules as S
    from primus_megatron.schedules.auto import choose

    p, m = setting.pp, setting.microbatches
    costs = setting.costs(share=2.0 if chunked else 1.0)  # a rank's share
    chunks = INTERLEAVED_LAYERS[setting.model] // p

    def ours(label, name, plan_costs=costs, **kw):
        sched = S.generate(name, p, m, costs=plan_costs, post_validation=True, **kw)
        return E.make_variant(label, sched, costs, scale=scale)

    out = [ours("1f1b", "1f1b"), ours("interleaved-1f1b", "interleaved-1f1b", chunks=chunks),
           ours("zb-h1", "zb-h1"), ours("zb-h2", "zb-h2"), ours("zb-auto 1x", "zb-auto", memory_limit=p),
           ours("zb-auto 2x", "zb-auto", memory_limit=2 * p), ours("zbv", "zbv"), ours("v-half", "v-half"),
           ours("v-min", "v-min")]
    best, _ = choose(p, m, costs, post_validation=True, op_overhead=op_overhead_s / scale,
                     candidates=[n for n in S.names() if n not in ("zb-optimal", "interleaved-zb")])
    # auto's pick is planned as auto compared it: a cost-driven order with the host work per op charged
    plan_costs = E.planning_costs(best, p, costs, op_overhead_s / scale)
    auto = next((v for v in out if v.label.split()[0] == best and " 2x" not in v.label), None)
    out.append(ours(f"auto={best}", best, plan_costs) if auto is None or plan_costs is not costs else
               E.make_variant(f"auto={best}", auto.schedule, costs, scale=scale,  # the same plan is not run twice
                              skipped=f"the plan of the {auto.label} row"))
    out.append(E.make_variant("megatron-1f1b", S.generate("1f1b", p, m), costs, scale=scale, megatron=True))
    inter = S.generate("interleaved-1f1b", p, m, chunks=chunks)
    skip = None if m % p == 0 else f"m={m} is not a multiple of pp={p}"
    out.append(E.make_variant("megatron-interleaved", inter, costs, scale=scale, megatron=True, skipped=skip))
    out += [E.torch_variant(label, p, m, costs, scale=scale) for label in E.TORCH_BASELINES]
    out.append(E.make_variant("zb-h1 (A/A)", out[2].schedule, costs, scale=scale))
    return out


def run_setting(name: str, setting, chunked: bool, args) -> dict:
    """One setting's launch; a failed launch (a named hang, a timeout) is recorded, not raised."""
    from primus_megatron import emulation as E

    scale = args.scale / 1000.0
    keep = args.schedules.split(",") if args.schedules else None
    t0, load = time.perf_counter(), C.load()
    overhead = None if args.op_overhead is None else args.op_overhead / 1000.0
    try:
        if overhead is None and (keep is None or "auto" in keep):  # auto chooses on this machine's host work per op
            costs = setting.costs(share=2.0 if chunked else 1.0)
            overhead = E.measure_op_overhead(setting.pp, costs, scale=scale, elements=int(args.activation_kib * 256),
                                             p2p_mode=args.p2p_mode, p2p_timeout_s=args.p2p_timeout)
        vs = variants(setting, chunked, scale, overhead or 0.0)
        if keep:
            vs = [v for v in vs if v.label in keep or v.label.split("=")[0] in keep]
        # A forked rank copies the fork server's pages as it first touches them (reference counts), which
        # slowed the first variants of a pp=32 launch to 3-5x the host work per op of the later ones: the
        # launch starts with the first plan at a tenth of the scale, not reported.
        first = next(v for v in vs if not v.skipped)
        warm = E.make_variant("warm-up", first.schedule, first.costs, scale=scale / 10, megatron=first.megatron)
        results, memory = E.run([warm, *vs], setting.pp, setting.microbatches, elements=int(args.activation_kib * 256),
                                steps=args.steps, warmup=1, p2p_mode=args.p2p_mode, p2p_timeout_s=args.p2p_timeout)
        results = results[1:]
    except (RuntimeError, TimeoutError) as exc:
        return {"variants": [], "results": None, "memory": None, "seconds": time.perf_counter() - t0,
                "load": load, "error": E.first_failure(str(exc))}
    return {"variants": vs, "results": results, "memory": memory, "seconds": time.perf_counter() - t0, "load": load,
            "auto_overhead": overhead, "host": E.launch_costs(vs, results), "scale": scale}


def _own_host(r) -> str:
    """The variant's own measured host costs (`emulation.host_costs`), where ours ran it."""
    from primus_megatron import emulation as E

    per_op, message = E.host_costs(r)
    return "" if per_op is None else f"{1e3 * per_op:.2f} / {1e3 * (message or 0.0):.2f}"


def _with_host(run, v) -> float:
    """The variant's simulated async bubble with the launch's measured host costs (`emulation.host_costs`)."""
    from primus_megatron import emulation as E

    per_op, message = run["host"]
    return E.with_host_work(v, per_op, run["scale"], message or 0.0)["bubble_rate_async"]


def estimate(names: list, table: dict, scale: float) -> str:
    """The planned emulated time of a run (warm-up + steps, every variant), per setting: no ranks."""
    rows, total = [], 0.0
    for name in names:
        setting, chunked = table[name]
        vs = variants(setting, chunked, scale / 1000.0)
        step = sum(v.simulated.get("makespan", 0.0) for v in vs if not v.skipped)
        rows.append([name, str(len(vs)), f"{step:.1f}"])
        total += step
    return C.table(["setting", "variants", "one step of every variant, s"], rows) + f"\n\ntotal per step: {total:.0f} s"


def paper_value(key: tuple, label: str, chunked: bool):
    from primus_megatron.schedules import paper_settings as P

    col = PAPER_COLUMN.get(label)
    if label.startswith("megatron-"):
        col = {"megatron-1f1b": "1F1B", "megatron-interleaved": "1F1B-I"}[label]
    table, columns = (P.TABLE8, P.TABLE8_COLUMNS) if chunked else (P.TABLE5, P.TABLE5_COLUMNS)
    if col is None or col not in columns:
        return None
    return table[key][columns.index(col)]


def _bubble(r) -> float:
    return r["bubble_rate_async"]


def report(runs: dict, args, elapsed: float, argv) -> str:
    rows, mem, failed = [], [], []
    for name, (setting, chunked, run) in runs.items():
        key = (setting.model, setting.pp, setting.microbatches)
        if run["results"] is None:
            failed.append(f"{name}: {run['error']}")
            continue
        mem.append((name, setting.pp, max(run["memory"]["private_kib"]), sum(run["memory"]["private_kib"]),
                    max(run["memory"]["rss_kib"])))
        for v, r in zip(run["variants"], run["results"]):
            paper = paper_value(key, v.label, chunked)
            if r is None:
                rows.append([name, f"{run['load']:.1f}", v.label, "not run", "", "", "", "", "", "", v.skipped, ""])
                continue
            ovh = r["overhead_per_op"]
            meas, sim = _bubble(r), v.simulated["bubble_rate_async"]
            host = _with_host(run, v) if run.get("host", (None,))[0] is not None else None
            rows.append([name, f"{run['load']:.1f}", v.label, f"{meas:.4f}", f"{sim:.4f}",
                         "-" if host is None else f"{host:.4f}",
                         "-" if paper is None else f"{paper:.4f}", f"{meas - sim:+.4f}",
                         "-" if host is None else f"{meas - host:+.4f}",
                         "" if ovh is None else f"{1e3 * ovh:.2f} / {1e3 * r['mean_op_time']:.1f}",
                         f"{1e3 * r['cpu_per_op']:.2f}", _own_host(r)])
    parts = [C.method(__doc__),
             f"Scale: {args.scale:g} ms of emulated time per paper ms; activations {args.activation_kib:g} KiB; "
             f"p2p {args.p2p_mode} (ours); {args.steps} measured step(s) after one warm-up; {elapsed / 60:.1f} min "
             f"on this machine (2 cores shared with other work; load average at the end {C.load():.1f}), taken "
             f"{C.taken()}.",
             C.table(["setting", "load", "schedule", "measured", "simulated", "sim+host", "paper", "meas - sim",
                      "meas - sim+host", "overhead/op ms / mean op ms", "cpu/op ms",
                      "own host/op ms / message ms"], rows),
             "sim+host: the simulator charged the launch's measured host costs (`emulation.host_costs`, medians over "
             "our schedules in that launch: every op costs its overhead plus the executor's work before the next op "
             "more, every message between ranks at least its measured time): "
             + "; ".join(f"{n} {1e3 * r[2]['host'][0]:.2f} / {1e3 * (r[2]['host'][1] or 0):.2f} ms"
                         for n, r in runs.items() if r[2].get("host") and r[2]["host"][0] is not None)
             + ". What is left between it and the measured value is neither. auto chose with the host work per op "
             "measured first by a short zb-h1 launch: "
             + "; ".join(f"{n} {1e3 * r[2]['auto_overhead']:.2f} ms" for n, r in runs.items()
                         if r[2].get("auto_overhead") is not None) + "."]
    if failed:
        parts.append("Settings whose launch failed: " + "; ".join(failed))
    parts.append("Memory per rank (KiB of a rank's own pages, max and all ranks together / resident with the fork "
                 "server's shared pages, max): " + "; ".join(f"{n} (pp={p}): {a} max, {t / 1024:.0f} MiB all / {b}"
                                                             for n, p, a, t, b in mem))
    return C.section(C.command_line("benchmarks/emulated_scale.py", argv), *parts, targets(runs),
                     interleaved_wins(runs))


def _results(run) -> dict:
    return {v.label.split("=")[0]: (v, r) for v, r in zip(run["variants"], run["results"] or []) if r is not None}


def targets(runs: dict) -> str:
    """Issue 30's targets per setting, measured: each cell says met / missed and by how much."""
    from primus_megatron.schedules import paper_settings as P

    rows = []
    for name, (setting, chunked, run) in runs.items():
        got = _results(run)
        if not got:
            continue
        aa = abs(_bubble(got["zb-h1"][1]) - _bubble(got["zb-h1 (A/A)"][1])) if "zb-h1 (A/A)" in got and "zb-h1" in got else None
        cells = [name, "-" if aa is None else f"{aa:.4f}"]
        if "1f1b" in got and "megatron-1f1b" in got:
            d = _bubble(got["1f1b"][1]) - _bubble(got["megatron-1f1b"][1])
            cells.append(f"{d:+.4f} {'met' if abs(d) <= 0.01 else 'missed'}")
        else:
            cells.append("-")
        if (setting.pp, setting.microbatches) in ((8, 32), (8, 64)) and not chunked and "zb-auto 2x" in got:
            b = _bubble(got["zb-auto 2x"][1])
            cells.append(f"{b:.4f} {'met' if b <= 0.01 else 'missed'}")
        else:
            cells.append("-")
        if chunked and "zbv" in got:
            paper = P.TABLE8[(setting.model, setting.pp, setting.microbatches)][P.TABLE8_COLUMNS.index("ZB-V")]
            b = _bubble(got["zbv"][1])
            cells.append(f"{b:.4f} vs {paper:.4f} {'met' if b <= paper + 0.01 else 'missed'}")
        else:
            cells.append("-")
        if "megatron-1f1b" in got:
            ref = got["megatron-1f1b"][1]["makespan"]
            slower = [lbl for lbl in OURS_ZB if lbl in got and got[lbl][1]["makespan"] >= ref]
            cells.append("met" if not slower else "missed: " + ", ".join(slower))
        else:
            cells.append("-")
        within = [lbl for lbl in OURS_ZB + ("1f1b", "interleaved-1f1b") if lbl in got
                  and got[lbl][1]["overhead_per_op"] is not None
                  and got[lbl][1]["overhead_per_op"] < 0.01 * got[lbl][1]["mean_op_time"]]
        cells.append(", ".join(f"{lbl} {_bubble(got[lbl][1]) - got[lbl][0].simulated['bubble_rate_async']:+.4f}"
                               for lbl in within) or "none (overhead/op >= 1% of the op everywhere)")
        ours = [lbl for lbl in OURS_ZB + ("1f1b", "interleaved-1f1b") if lbl in got]
        if run.get("host", (None,))[0] is not None and ours:
            gaps = {lbl: _bubble(got[lbl][1]) - _with_host(run, got[lbl][0]) for lbl in ours}
            worst = max(gaps, key=lambda k: abs(gaps[k]))
            cells.append(f"{sum(abs(g) <= 0.01 for g in gaps.values())}/{len(gaps)}; worst {worst} {gaps[worst]:+.4f}")
        else:
            cells.append("-")
        rows.append(cells)
    head = ("### Targets, measured\n\nA/A: |zb-h1 - its repeat| (the noise floor). Targets: our 1f1b within 0.01 of "
            "megatron's 1F1B; zb-auto 2x <= 0.01 at pp=8, m=32/64; zbv <= the paper's ZB-V + 0.01 (Table 8); every "
            "zero-bubble schedule of ours faster than megatron's 1F1B (makespan of the step); measured within 0.01 "
            "of simulated where overhead/op < 1% of the op (those cells, meas - sim); and, every cell of ours, measured "
            "within 0.01 of sim+host (the simulator charged the launch's host work per op).\n\n")
    return head + C.table(["setting", "A/A", "1f1b - megatron 1F1B", "zb-auto 2x <= 0.01", "zbv <= paper + 0.01",
                           "ZB faster than megatron 1F1B", "cells with overhead/op < 1%",
                           "ours within 0.01 of sim+host"], rows)


def interleaved_wins(runs: dict) -> str:
    """Where megatron's interleaved 1F1B beats each of our schedules, measured, beyond the A/A noise."""
    rows = []
    for name, (setting, chunked, run) in runs.items():
        got = _results(run)
        if "megatron-interleaved" not in got:
            continue
        mv, mr = got["megatron-interleaved"]
        noise = abs(_bubble(got["zb-h1"][1]) - _bubble(got["zb-h1 (A/A)"][1])) if "zb-h1 (A/A)" in got else 0.0
        beaten = []
        for lbl in ("1f1b", "interleaved-1f1b") + OURS_ZB + ("auto",):
            if lbl not in got:
                continue
            v, r = got[lbl]
            margin = _bubble(r) - _bubble(mr)
            if margin > noise:
                beaten.append(f"{v.label} by {margin:.3f} (mem {v.simulated['peak_memory']:.1f})")
        rows.append([name, str(setting.pp), str(setting.microbatches), f"{setting.comm:.3f}",
                     f"{mv.chunks}", f"{mv.simulated['peak_memory']:.1f}", f"{_bubble(mr):.4f}", f"{noise:.4f}",
                     "; ".join(beaten) or "none"])
    head = ("### Where megatron's interleaved 1F1B wins (measured)\n\nA schedule of ours is beaten when its measured "
            "bubble exceeds megatron's interleaved 1F1B's by more than the setting's A/A difference. mem: simulated "
            "peak activation memory per rank (units of one microbatch's share of a rank, 1F1B = pp).\n\n")
    return head + C.table(["setting", "pp", "m", "comm ms", "chunks", "its mem", "its bubble", "A/A",
                           "ours beaten (margin, our mem)"], rows)


def main(argv=None) -> int:
    parser = C.parser(__doc__)
    parser.add_argument("--settings", choices=("quick", "all"), default="quick")
    parser.add_argument("--only", default=None, help="comma-separated setting names (t5-MODEL-pP-mM, t8-...)")
    parser.add_argument("--scale", type=float, default=1.0, help="ms of emulated time per paper ms (default 1)")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--activation-kib", type=float, default=64.0)
    parser.add_argument("--schedules", default=None, help="comma-separated column labels to run (default: all)")
    parser.add_argument("--p2p-mode", choices=("strict", "strict-lazy", "plain"), default="strict")
    parser.add_argument("--estimate", action="store_true", help="print the planned emulated time only")
    parser.add_argument("--post-validation", action="store_true",
                        help="the post-validation table instead (iteration time with and without it, pp 8-32)")
    parser.add_argument("--optimizer-ms", type=float, default=20.0,
                        help="with --post-validation: the emulated optimizer step, paper ms (default 20)")
    parser.add_argument("--straggler-factor", type=float, default=2.0,
                        help="with --post-validation: the last rank's optimizer step is this many times longer "
                             "in the straggler rows (default 2; 1: no straggler rows)")
    parser.add_argument("--pv-steps", type=int, default=3, help="with --post-validation: measured steps (default 3)")
    parser.add_argument("--op-overhead", type=float, default=None,
                        help="host work per op (ms) auto charges every op (default: measured per setting first)")
    parser.add_argument("--p2p-timeout", type=float, default=None,
                        help="seconds a rank may wait for another before the launch fails, named (default: 60 + "
                             "twice the longest planned step + 1 per rank)")
    args = parser.parse_args(argv)
    table = settings()
    if args.post_validation:
        from emulated_post_validation import run_table

        names = args.only.split(",") if args.only else list(PV_SETTINGS)
        t0 = time.perf_counter()
        text = run_table(names, table, args)
        C.publish(args, PV_SECTION, C.section(C.command_line("benchmarks/emulated_scale.py", argv), text,
                                              f"{(time.perf_counter() - t0) / 60:.1f} min."), "emulated_scale")
        return 0
    names = args.only.split(",") if args.only else list(QUICK)
    if args.settings == "all" and not args.only:  # the quick set first: a run cut short still has it
        names += [n for n in table if n not in QUICK]
    if args.estimate:
        print(estimate(names, table, args.scale))
        return 0
    t0 = time.perf_counter()
    runs = {}
    for name in names:
        setting, chunked = table[name]
        run = run_setting(name, setting, chunked, args)
        runs[name] = (setting, chunked, run)
        print(f"{name}: {run['seconds']:.0f} s, load {run['load']:.1f}" + (f", failed: {run['error']}"
              if run.get("error") else ""), file=sys.stderr, flush=True)
        if not args.no_markdown:  # each setting as it ends: a run cut short keeps what it measured
            C.write_section(args.markdown, SECTION, report(runs, args, time.perf_counter() - t0, argv))
    C.publish(args, SECTION, report(runs, args, time.perf_counter() - t0, argv), "emulated_scale")
    return 0


if __name__ == "__main__":
    sys.exit(main())
