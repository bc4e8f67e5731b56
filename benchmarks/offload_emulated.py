"""Activation offload on emulated devices at the Zero Bubble paper's settings: measured time and memory.

    python benchmarks/offload_emulated.py                       # pp=8 (1.5B, 24 microbatches), 25 and 50 GB/s
    python benchmarks/offload_emulated.py --settings 1.5B:8:24,6.2B:16:48 --no-markdown

P forked gloo ranks run emulated chunks (`emulation/chunks.py`: F, B and W wait the paper's
profiled ms, activations go through our p2p) under our runtime, each of zb-h1, zbv, v-half and
v-min without offload and with `--pipeline-offload auto` under a memory limit of V-Min's peak
without offload, the `auto` plan chosen once here and handed to every rank (the plan each rank
would choose; `offload=<OffloadPlan>`). With offload the copies take the time the host link says on one lane per
direction (`runtime.offload.emulate_lanes`: a rank's activations of one microbatch are M_B =
sb(34h + 5as) per layer x layers/pp bytes, s = 1024, b = 1). Measured: the iteration (the step's
makespan across ranks, after a barrier) and each rank's peak of resident activations, counted in
the planner's units along the step's measured op and copy times (an F adds its activations at
its end, its copy out removes them at its end, a copy back adds them at its start, B and W free
as the paper's memory model says) and shown in GB. Simulated: `schedules.offload` for the same
plan. One warm-up step, one measured step per variant.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402
import offload_paper as OP  # noqa: E402

from primus_megatron import schedules as S  # noqa: E402
from primus_megatron.schedules import offload as O  # noqa: E402
from primus_megatron.schedules import paper_settings as P  # noqa: E402

TITLE = "## Activation offload on emulated devices (measured, the paper's settings)"
HEADERS = ["setting", "GB/s", "variant", "ms measured", "ms simulated", "GB measured", "GB simulated",
           "F ops offloaded"]


def _setting(text: str):
    """(setting, cost share, table tag) of model:pp:microbatches[:t5|:t8]. 28.3B:32:96 is in both
    tables with different profiles; without a tag the one benchmarks/offload_paper.py simulates
    (Table 5 at pp=8, Table 8 from pp=16), so that the two sections compare."""
    parts = text.split(":")
    try:
        model, pp, m = parts[0], int(parts[1]), int(parts[2])
        tag = parts[3] if len(parts) == 4 else None
        if len(parts) not in (3, 4) or tag not in (None, "t5", "t8"):
            raise ValueError
    except (ValueError, IndexError):
        raise SystemExit(f"--settings: {text!r} is not model:pp:microbatches[:t5|:t8]") from None
    tables = {"t5": (P.TABLE5_SETTINGS, 1.0), "t8": (P.TABLE8_SETTINGS, 2.0)}
    if tag is None:
        found = [(s, share) for s, share in OP.SETTINGS if (s.model, s.pp, s.microbatches) == (model, pp, m)]
        if found:
            return (*found[0], "t5" if found[0][0] in P.TABLE5_SETTINGS else "t8")
    for name, (table, share) in tables.items():
        if tag in (None, name):
            for s in table:
                if (s.model, s.pp, s.microbatches) == (model, pp, m):
                    return s, share, name
    raise SystemExit(f"--settings: no paper setting {text!r} (model:pp:microbatches of Table 5 or 8)")


def variants(setting, share: float, link: float, scale: float = 1e-3):
    """`scale`: seconds of emulated time per time unit (the paper's costs are ms)."""
    from primus_megatron import emulation as E

    costs = setting.costs(share)
    unit = OP.unit_bytes(P.MODELS[setting.model], setting.pp)
    bw = OP.bandwidth(link, unit)
    plans = {n: S.generate(n, setting.pp, setting.microbatches, costs=costs) for n in OP.SCHEDULES}
    limit = O.choose(plans["v-min"], "off", costs=costs).max_peak_memory
    out, sims = [], []
    for n, sched in plans.items():
        for mode in ("off", "auto"):
            v = E.make_variant(f"{n} {mode}", sched, costs, scale=scale)
            if mode == "auto":
                sim = O.choose(sched, "auto", bandwidth=bw, costs=costs, memory_limit=limit)
                # chosen once here and handed to every rank: at pp=32 a rank's own choice costs 10 s of
                # CPU, which 32 ranks on this machine's 2 cores would pay in turn
                v.offload = {"plan": sim.plan, "costs": costs, "scale": scale}
            else:
                sim = O.choose(sched, "off", costs=costs)
            out.append(v)
            sims.append(sim)
    return out, sims, costs, unit


def measured_peak(summary: dict, sched, costs) -> float:
    """The largest rank's peak of resident activation units along the median step's measured times."""
    sc = costs.resolve(sched.pp, sched.chunks_per_rank, sched.placement)
    records = summary["records"]
    mid = len(records[0]["steps"]) // 2
    peak = 0.0
    for rank, r in enumerate(records):
        step = r["steps"][mid]
        events = [(end, sc.memory(kind, stage)) for kind, mb, chunk, stage, start, end in step.get("timeline", ())]
        for direction, key, start, end in step.get("copies", ()):
            size = sc.memory("F", sched.stage_table[rank][key[1]])
            events.append((end, -size) if direction == "D2H" else (start, size))
        live = 0.0
        for _, delta in sorted(events, key=lambda e: e[0]):
            live += delta
            peak = max(peak, live)
    return peak


def main(argv=None) -> int:
    from primus_megatron import emulation as E

    parser = C.parser(__doc__)
    parser.add_argument("--settings", default="1.5B:8:24", help="model:pp:microbatches, comma-separated")
    parser.add_argument("--links", default="25,50", help="host link GB/s per direction, comma-separated")
    parser.add_argument("--elements", type=int, default=1024, help="fp32 elements of an emulated activation")
    parser.add_argument("--variants", default=None,
                        help="only these variants (comma-separated labels, e.g. 'zbv off,zbv auto'), each in a "
                             "launch of its own")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="ms of emulated time per paper ms (default 1); times are reported in emulated ms")
    args = parser.parse_args(argv)
    rows = []
    began = time.time()
    for text in args.settings.split(","):
        setting, share, tag = _setting(text)
        for link in (float(x) for x in args.links.split(",")):
            vs, sims, costs, unit = variants(setting, share, link, args.scale / 1000.0)
            if args.variants:
                wanted = args.variants.split(",")
                unknown = sorted(set(wanted) - {v.label for v in vs})
                if unknown:
                    raise SystemExit(f"--variants takes {', '.join(v.label for v in vs)}; got {', '.join(unknown)}")
                keep = [i for i, v in enumerate(vs) if v.label in wanted]
                vs, sims = [vs[i] for i in keep], [sims[i] for i in keep]
                results = [E.run([v], setting.pp, setting.microbatches, elements=args.elements, steps=1,
                                 warmup=1)[0][0] for v in vs]
            else:
                results, _ = E.run(vs, setting.pp, setting.microbatches, elements=args.elements, steps=1, warmup=1)
            for v, sim, res in zip(vs, sims, results):
                gb = lambda units: f"{units * unit / 1e9:.1f}"  # noqa: E731
                rows.append([f"{tag}-{setting.model} pp={setting.pp} m={setting.microbatches}", f"{link:g}", v.label,
                             f"{1e3 * res['makespan']:.0f}", f"{sim.makespan * args.scale:.0f}",
                             gb(measured_peak(res, v.schedule, costs)), gb(sim.max_peak_memory),
                             sim.plan.count])
            print(C.table(HEADERS, rows), flush=True)
    # the command with its defaults spelled out: the section names the settings and links it measured
    text = C.section(
        f"python benchmarks/offload_emulated.py --settings {args.settings} --links {args.links}"
        + (f" --scale {args.scale:g}" if args.scale != 1.0 else "")
        + (f" --variants '{args.variants}'" if args.variants else ""),
        f"Measured on emulated devices at {args.scale:g} ms per paper ms ({time.time() - began:.0f} s on this "
        f"machine, 2 cores shared with other work, load average {C.load():.0f} when written, taken {C.taken()}); "
        "`auto` under a memory limit of V-Min's simulated peak without offload. Memory: the largest rank's peak of "
        "resident activations along the measured op and copy times (module doc).",
        C.table(HEADERS, rows))
    C.publish(args, TITLE, text, "offload_emulated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
