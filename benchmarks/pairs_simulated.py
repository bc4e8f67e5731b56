"""Overlapped F&B pairs against an expert-parallel all-to-all, simulated (issue 39; measured on emulated
devices: benchmarks/pairs_emulated.py).

    python benchmarks/pairs_simulated.py     # prints the section and replaces it in docs/benchmarks/moe-and-pairs.md

The MoE layers of benchmarks/moe_layers.py (FLOP-derived F/B/W, experts' weight gradients in W) with
an all-to-all of x times F's compute added to each F and each B (dispatch and combine, forward and
backward; x = 0.5 and 1.0, what DeepSeek reports at large expert parallelism), at pp 8 and 16 with
m = 4p. Each schedule is planned from those costs and simulated: ops one at a time (`zbv` planned
without the all-to-all, so without pairs; `interleaved-1f1b`, megatron's), and with overlapped pairs
(`zbv` and `interleaved-1f1b` with their F-then-B neighbours paired, `schedules.pairing`; `dualpipev`;
`megatron-combined-1f1b`, megatron's combined 1F1B, `--overlap-moe-expert-parallel-comm`: interleaved
1F1B with one warm-up forward more and every steady-state F&B step combined,
`schedules.builtin.interleaved.combined_1f1b`, the reference). A pair costs both computations plus what
of each all-to-all the other's compute cannot hide (`schedules.costs`). (Before megatron's own order was
written down, the reference was interleaved 1F1B with its neighbours paired: without the extra warm-up
forward many of its pairs would wait on themselves, so it is 12-20% slower than megatron's.)
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import moe_layers as L  # noqa: E402
import _common as C  # noqa: E402

TITLE = "## Overlapped F&B pairs against the expert all-to-all (simulated, pp 8 and 16)"
COMBINED = "megatron-combined-1f1b"
AT_MEGATRONS = "yes, at megatron's memory"  # planned with megatron's combined 1F1B's peak as memory limit
ROWS = (("zbv", "no"), ("zbv", "yes"), ("dualpipev", "yes"), ("dualpipev", AT_MEGATRONS), ("interleaved-1f1b", "no"),
        ("interleaved-1f1b", "yes"), (COMBINED, "yes"))


def with_a2a(costs, x: float):
    """`costs` (F = 1) with an all-to-all of x F's compute added to each F and each B."""
    from primus_megatron import schedules as S

    return S.Costs(f=costs.f + x, b=costs.b + x, w=costs.w, mem_f=costs.mem_f, mem_b=costs.mem_b,
                   mem_w=costs.mem_w, a2a=x)


def planned(name: str, pairs: str, pp: int, m: int, costs):
    """The schedule as the row names it: planned without the all-to-all (no pairs) or with it (and with
    megatron's combined 1F1B's peak memory as its limit)."""
    from primus_megatron import schedules as S
    from primus_megatron.schedules.builtin.interleaved import combined_1f1b
    from primus_megatron.schedules.ir import flatten_pairs
    from primus_megatron.schedules.pairing import with_pairs

    if name == COMBINED:
        return combined_1f1b(pp, m)
    if pairs == "no":
        return S.generate(name, pp, m, costs=S.Costs(**{**costs.__dict__, "a2a": 0.0}))
    if pairs == AT_MEGATRONS:
        limit = S.simulate(combined_1f1b(pp, m), costs).max_peak_memory
        return S.generate(name, pp, m, costs=costs, memory_limit=limit)
    sched = S.generate(name, pp, m, costs=costs)
    if sched.has_pairs or name == "dualpipev":
        return sched
    sc = costs.resolve(pp, sched.chunks_per_rank, sched.placement)
    flat = [flatten_pairs(r) for r in with_pairs([list(ops) for ops in sched.ranks], sched, sc)]
    paired = sched.with_ranks([ops for ops, _ in flat], tuple(p for _, p in flat))
    S.validate(paired, costs=costs)
    return paired


def rows() -> list:
    from primus_megatron import schedules as S

    out = []
    for layer in L.LAYERS:
        base = L.costs_for(layer, experts_in_w=True)
        for pp in (8, 16):
            for x in (0.5, 1.0):
                costs, m = with_a2a(base, x), 4 * pp
                results = {row: S.simulate(planned(*row, pp, m, costs), costs) for row in ROWS}
                ref = results[(COMBINED, "yes")]
                for (name, pairs), res in results.items():
                    out.append([layer.name, pp, x, name, pairs, f"{res.makespan:.1f}",
                                f"{res.makespan / ref.makespan:.3f}", f"{res.max_peak_memory:.2f}",
                                res.max_peak_memory / ref.max_peak_memory])
    return out


def _range(values: list) -> str:
    return f"{min(values):.3f}-{max(values):.3f}"


def reading(found: list) -> str:
    """What the rows show, from their numbers (`rows`)."""
    def of(pairs: str, col: int) -> list:
        return [float(r[col]) for r in found if r[3] == "dualpipev" and r[4] == pairs]

    return (
        "What it shows: an all-to-all the ops must wait for makes every schedule without pairs pay it in full; "
        "pairs hide it under the other half's compute. megatron's combined 1F1B, whose extra warm-up forward lets "
        "every steady-state F pair with a whole backward, and DualPipeV, whose steady state does the same on a V, "
        "hide the most. DualPipeV planned from the costs (its pairs' backward split, F&B, and W placed around them "
        f"by `w_fill`) runs at {_range(of('yes', 6))} of megatron's combined 1F1B's time at {_range(of('yes', 8))} "
        f"of its peak activation memory, and at {_range(of(AT_MEGATRONS, 6))} given megatron's peak as its limit "
        f"(`--pipeline-memory-limit`; {_range(of(AT_MEGATRONS, 8))} of it): the gain is the bubble W fills, "
        "small at an all-to-all of 1x, where the unpaired warm-up and cool-down ops, as many as megatron's, set the "
        "time. zbv's own pairs (its V's last stage runs F and B of one microbatch back to back, which cannot pair) "
        "hide less, and interleaved 1F1B with its neighbours paired, without megatron's extra forward, less still. "
        "Runs: our runtime runs a pair through megatron-core's combined F&B step where the model builds a schedule "
        "plan (`--overlap-moe-expert-parallel-comm`), else as F then B; on emulated devices its two halves take the "
        "pair's time (section \"Overlapped F&B pairs (emulated)\").")


def main(argv=None) -> int:
    args = C.parser(__doc__).parse_args(argv)
    found = rows()
    text = C.section(
        C.command_line("benchmarks/pairs_simulated.py", argv),
        "Simulated (no runtime): makespan in F-compute units; `vs combined 1F1B`: against megatron's combined "
        "1F1B (`megatron-combined-1f1b`: its order, one warm-up forward more than interleaved 1F1B's, with every "
        "steady-state F&B step as one pair); `interleaved-1f1b` with pairs: its F-then-B neighbours paired "
        "(`schedules/pairing.py`), what stood for megatron's before its order was written down; peak activation "
        "memory per rank in microbatches of a rank's layers. m = 4p. Measured on emulated devices: section "
        "\"Overlapped F&B pairs (emulated)\".",
        C.table(["layer", "pp", "all-to-all / F compute", "schedule", "pairs", "makespan", "vs combined 1F1B",
                 "peak memory"], [r[:-1] for r in found]),
        reading(found))
    C.publish(args, TITLE, text, "pairs_simulated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
