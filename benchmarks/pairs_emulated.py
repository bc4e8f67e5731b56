"""Overlapped F&B pairs on emulated devices, measured against the simulator (issue 39 item 6).

    python benchmarks/pairs_emulated.py     # prints the section and replaces it in docs/benchmarks/moe-and-pairs.md

The MoE costs of benchmarks/pairs_simulated.py (moe_layers.py's Qwen3-30B-A3B-like layer, FLOP-derived
F/B/W with the experts' weight gradients in W, F = 1) with an all-to-all of x = 0.5 and 1.0 times F's
compute added to each F and each B (`Costs.a2a`), at pp 8 with m = 4p = 32 and at pp 16 with m = 2p = 32:
16 ranks on this machine's 2 shared cores are too heavy at m = 64 (host work 30-46% of an op, over 2.5
minutes a launch), so pp 16 runs fewer microbatches. Per (pp, x), `ROUNDS` launches of pp gloo ranks whose
ops sleep their emulated time (emulation/chunks.py), each row's number the least over the launches. A pair
run by our runtime takes the pair's time (F half: its compute; B half: the rest of
`StageCosts.pair_duration`), an op outside a pair its whole time, all-to-all included. Rows, all in the
same processes on the same chunks:

* `dualpipev`, `zbv` with pairs (planned on the costs with the all-to-all) and `zbv` without (planned
  without it, so without pairs; its ops still pay the all-to-all): our schedules, our runtime;
* `megatron-combined-1f1b`: megatron's combined 1F1B (`--overlap-moe-expert-parallel-comm`) emulated as
  our IR: its order and its pairs (`schedules.builtin.interleaved.combined_1f1b`, citing megatron-core
  0.16.1) run by our runtime, as megatron's combined step cannot run on emulated chunks;
* `megatron-interleaved`: megatron-core's own interleaved 1F1B (its forward_backward_func), no pairs;
* `torch-dualpipev`: torch 2.13's ScheduleDualPipeV on its own stages; it runs each OVERLAP_F_B as the F
  then the full backward (no function registered for it), so nothing overlaps.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import moe_layers as L  # noqa: E402
import _common as C  # noqa: E402
from pairs_simulated import with_a2a  # noqa: E402

TITLE = "## Overlapped F&B pairs (emulated)"
UNIT_MS, ROUNDS, WARMUP, ELEMENTS = 20.0, 2, 1, 4096
# the long-op check: dualpipev and megatron's combined 1F1B alone at pp 8, x = 0.5, ops 15x longer, so that
# host work is about 1% of an op (one launch; about 3 minutes)
LONG = {"pp": 8, "m": 32, "x": 0.5, "unit_ms": 300.0, "labels": ("dualpipev", "megatron-combined-1f1b")}
SETTINGS = ((8, 32), (16, 32))  # (pp, m): m = 4p at pp 8; at pp 16, 2p (module doc)
LAYER = L.QWEN3_30B_A3B
REF = "megatron-combined-1f1b"
ZBV_PLAIN = "zbv (no pairs)"


def variants(pp: int, m: int, costs, scale: float) -> list:
    """The rows' variants (module doc), ours first."""
    from primus_megatron import emulation as E
    from primus_megatron import schedules as S
    from primus_megatron.emulation.baselines import baseline_variant

    plain = dataclasses.replace(costs, a2a=0.0)
    ours = [E.make_variant("dualpipev", S.generate("dualpipev", pp, m, costs=costs), costs, scale=scale),
            E.make_variant("zbv", S.generate("zbv", pp, m, costs=costs), costs, scale=scale),
            E.make_variant(ZBV_PLAIN, S.generate("zbv", pp, m, costs=plain), costs, scale=scale)]
    anchor = ours[0].schedule
    return ours + [baseline_variant(b, anchor, pp, m, costs, chunks=2, scale=scale)
                   for b in (E.MEGATRON_COMBINED, E.MEGATRON_INTERLEAVED, "torch-dualpipev")]


def launch(pp: int, m: int, x: float, unit_ms: float, rounds: int, labels: tuple = ()) -> dict:
    """`rounds` emulated launches of every row (or of `labels`) at (pp, x), one measured step each after a
    warm-up: per label its numbers, each the least over the launches (other jobs on the machine only ever add
    time)."""
    from primus_megatron import emulation as E

    scale = unit_ms / 1000.0
    costs = with_a2a(L.costs_for(LAYER, experts_in_w=True), x)
    vs = [v for v in variants(pp, m, costs, scale) if not labels or v.label in labels]
    t0, found, costs_found = time.monotonic(), {v.label: [] for v in vs}, []
    for _ in range(rounds):
        results, _ = E.run(vs, pp, m, elements=ELEMENTS, steps=1, warmup=WARMUP)
        costs_found.append(E.launch_costs(vs, results))
        for v, r in zip(vs, results):
            found[v.label].append((r["makespan"], E.host_costs(r)[0], r["mean_op_time"]))
    overhead = min((o for o, _ in costs_found if o is not None), default=0.0)
    hop = min((h for _, h in costs_found if h is not None), default=0.0)
    rows = {}
    for v in vs:
        hosts = [h for _, h, _ in found[v.label] if h is not None]
        rows[v.label] = {"measured": min(t for t, _, _ in found[v.label]), "simulated": v.simulated["makespan"],
                         "sim_host": E.with_host_work(v, overhead, scale, hop)["makespan"],
                         "memory": v.simulated["peak_memory"], "pairs": v.schedule.has_pairs,
                         "mean_op": found[v.label][0][2], "host": min(hosts) if hosts else None}
    mean_op = sum(r["mean_op"] for r in rows.values()) / len(rows)
    spread = max(max(t for t, _, _ in runs) / min(t for t, _, _ in runs) for runs in found.values())
    return {"rows": rows, "host_per_op": overhead, "message": hop, "mean_op": mean_op, "spread": spread,
            "wall": time.monotonic() - t0, "load": C.load()}


def table_rows(runs: dict) -> list:
    out = []
    for (pp, m, x), run in runs.items():
        ref = run["rows"][REF]
        for label, r in run["rows"].items():
            name = f"{label} (emulated as our IR)" if label == REF else label
            out.append([pp, m, x, name, "yes" if r["pairs"] else "no", f"{1e3 * r['measured']:.0f}",
                        f"{1e3 * r['simulated']:.0f}", f"{r['measured'] / r['simulated']:.3f}",
                        f"{r['measured'] / r['sim_host']:.3f}",
                        "-" if r["host"] is None else f"{1e3 * r['host']:.1f}", f"{r['memory']:.2f}",
                        f"{r['measured'] / ref['measured']:.3f}", f"{r['simulated'] / ref['simulated']:.3f}"])
    return out


def reading(runs: dict) -> list:
    """The section's reading lines, from the numbers."""
    measured, simulated, ratios, host, memory, worst, highest, gains = [], [], [], [], {}, [], [], []
    for (pp, m, x), run in runs.items():
        rows, ref = run["rows"], run["rows"][REF]
        best = min(("dualpipev", "zbv"), key=lambda k: rows[k]["measured"])
        measured.append((pp, x, best, rows[best]["measured"] / ref["measured"],
                         rows[best]["memory"] <= ref["memory"]))
        memory[pp] = f"pp {pp}: {rows[best]['memory']:g} against {ref['memory']:g}"
        simulated.append(rows["dualpipev"]["simulated"] / ref["simulated"])
        ratios += [(r["measured"] / r["simulated"], r["measured"] / r["sim_host"]) for r in rows.values()]
        worst.append(max(rows, key=lambda k: rows[k]["measured"] / rows[k]["simulated"]) == REF)
        ours = [k for k, r in rows.items() if r["host"] is not None]
        highest.append(max(ours, key=lambda k: rows[k]["host"]) == REF)
        gains.append((rows["zbv"]["measured"] < rows[ZBV_PLAIN]["measured"] if rows["zbv"]["pairs"] else None,
                      ref["measured"] < rows["megatron-interleaved"]["measured"]))
        host.append(f"pp {pp} x {x}: {1e3 * (run['host_per_op'] or 0):.2f} ms "
                    f"({100 * (run['host_per_op'] or 0) / run['mean_op']:.0f}%, load {run['load']:.1f})")
    held = all(b < 1.0 and less for *_, b, less in measured)
    cells = ", ".join(f"pp {pp} x {x}: {name} {b:.3f}" for pp, x, name, b, _ in measured)
    lead = (f"megatron's combined 1F1B has the largest measured / simulated of its launch in {sum(worst)} of "
            f"{len(worst)} launches and the highest host work per op of our runtime's rows in {sum(highest)}: each "
            "of its steady-state pairs waits on both neighbours, so a host delay reaches both")
    sim_held = max(simulated) < 1.0
    spread = max(run["spread"] for run in runs.values())
    why = (f" The measured lead is host work, not overlap ({lead}); with host work below 1% of an op expect the "
           "simulated numbers." if held and not sim_held else "")
    why += (f" One row's launches differ by up to {100 * (spread - 1):.0f}% (other jobs' load), more than the "
            "simulated differences between dualpipev and megatron's combined 1F1B.")
    return [
        f"* Target (ours with pairs faster than megatron's combined 1F1B at no more memory): measured, "
        f"{'it holds' if held else 'it does not hold'} ({cells}; peak activation memory "
        f"{'; '.join(memory.values())}). Simulated it {'holds' if sim_held else 'does not'}: dualpipev is at "
        f"{min(simulated):.3f}-{max(simulated):.3f} of megatron's combined 1F1B's time.{why}",
        f"* Measured / simulated: {min(r for r, _ in ratios):.3f}-{max(r for r, _ in ratios):.3f}; against the "
        f"simulation charged with the launch's measured host work (`meas/sim+host`): "
        f"{min(h for _, h in ratios):.3f}-{max(h for _, h in ratios):.3f}. Host work per op (the median of our "
        f"runtime's rows, `launch_costs`, least over the launches; in brackets its share of the mean emulated op "
        f"and the load average, other jobs on the machine included): {', '.join(host)}: above the 1% at which the "
        f"issue asks for 0.01 (the long-op check below makes the ops 15x longer for it).",
        f"* Overlap itself, measured: pairs make zbv faster than `zbv (no pairs)` in {sum(bool(z) for z, _ in gains)} "
        f"of the {sum(z is not None for z, _ in gains)} launches where zbv takes pairs (it keeps none where they would "
        f"not make it faster) and megatron's combined 1F1B faster than its plain interleaved 1F1B in "
        f"{sum(c for _, c in gains)} of {len(gains)}; torch's ScheduleDualPipeV overlaps nothing (its OVERLAP_F_B "
        "runs F then the full backward), so it pays every all-to-all.",
    ]


def long_reading(run: dict) -> str:
    """The long-op check's line: measured against simulated where host work is about 1% of an op."""
    rows, ref = run["rows"], run["rows"][REF]
    each = ", ".join(f"{k} {r['measured'] / r['simulated']:.3f}" for k, r in rows.items())
    ours, theirs = rows["dualpipev"], ref
    meas, sim = ours["measured"] / theirs["measured"], ours["simulated"] / theirs["simulated"]
    share = 100 * (run["host_per_op"] or 0) / run["mean_op"]
    close = all(abs(r["measured"] / r["simulated"] - 1) <= 0.01 for r in rows.values())
    return (f"* Long ops (pp {LONG['pp']}, m {LONG['m']}, x {LONG['x']}, 1 cost unit = {LONG['unit_ms']:g} ms, "
            f"one launch, these two rows only): host work {1e3 * (run['host_per_op'] or 0):.2f} ms per op, "
            f"{share:.1f}% of the mean op (load {run['load']:.1f}); measured / simulated {each} "
            f"({'within' if close else 'not within'} 0.01); dualpipev against megatron's combined 1F1B "
            f"{meas:.3f} measured, {sim:.3f} simulated, at {ours['memory']:g} against {theirs['memory']:g} "
            "peak activation memory.")


def main(argv=None) -> int:
    parser = C.parser(__doc__)
    parser.add_argument("--pp", default=",".join(str(pp) for pp, _ in SETTINGS),
                        help="pipeline sizes, comma-separated (default 8,16; m as in SETTINGS, else 4p)")
    parser.add_argument("--unit-ms", type=float, default=UNIT_MS, help=f"ms per cost unit (default {UNIT_MS:g})")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"launches per setting (default {ROUNDS})")
    parser.add_argument("--no-long", action="store_true", help="skip the long-op check (LONG)")
    args = parser.parse_args(argv)
    runs = {}
    for pp in (int(p) for p in args.pp.split(",")):
        m = dict(SETTINGS).get(pp, 4 * pp)
        for x in (0.5, 1.0):
            runs[(pp, m, x)] = run = launch(pp, m, x, args.unit_ms, args.rounds)
            print(f"pp {pp} x {x}: {run['wall']:.0f} s", file=sys.stderr, flush=True)
    long = None
    if not args.no_long:
        long = launch(LONG["pp"], LONG["m"], LONG["x"], LONG["unit_ms"], 1, LONG["labels"])
        print(f"long ops: {long['wall']:.0f} s", file=sys.stderr, flush=True)
    text = C.section(
        C.command_line("benchmarks/pairs_emulated.py", argv),
        f"Measured on emulated devices ({LAYER.name} MoE costs of `pairs_simulated.py`, experts' W in W, "
        f"all-to-all x F's compute added to F and B; 1 cost unit = {args.unit_ms:g} ms; pp 16 at m = 2p, as 16 "
        f"ranks at m = 4p are too heavy for this machine's 2 shared cores (host work 30-46% of an op); per (pp, x) "
        f"{args.rounds} launches of pp gloo ranks, every row in the same processes, each row one measured step "
        f"after {WARMUP} warm-up per launch: measured numbers are the least over the launches, as other jobs share "
        "this machine's 2 cores and only ever add time). Iteration times in ms (makespan); `meas/sim+host`: "
        "against the simulation with the least measured host work per op and message of our runtime's rows "
        "charged; `host ms/op`: the row's own (our runtime's rows; megatron's and torch's runtimes are not timed "
        "per op); peak activation memory simulated, in one rank's layers of one microbatch; `vs combined`: "
        "against megatron's combined 1F1B, measured and simulated.",
        C.table(["pp", "m", "all-to-all / F compute", "schedule", "pairs", "measured ms", "simulated ms", "meas/sim",
                 "meas/sim+host", "host ms/op", "peak memory", "vs combined (measured)", "vs combined (simulated)"],
                table_rows(runs)),
        "\n".join([*reading(runs), *([long_reading(long)] if long else [])]))
    C.publish(args, TITLE, text, "pairs_emulated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
