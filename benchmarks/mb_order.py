"""Microbatch order under packed variable-length data (issue 40 item 3), simulated.

    python benchmarks/mb_order.py     # prints the section and replaces it in docs/benchmarks/balanced-data.md

Each step packs a stream of sequences into m microbatches of T = 8192 tokens (a sequence that
does not fit is split, its rest opening the next microbatch). Sequence lengths are log-normal
(median 1024 tokens, sigma 1.2: a long tail, lengths capped at 32768). A piece of s tokens costs
a s^2 + b s (attention, the rest); the per-microbatch factor (`Costs.mb_scale`) is its cost over
the step's mean. S_eq is the length at which the two terms are equal (b = a S_eq): 4096 for a
small model or a long-context setting, 24576 (about 6 h for h = 4096) for a 7B-class model.
Unit F, B, W (1f1b: BW = B + W), no p2p latency, pp = 4, 24 steps (seeds) per row.
`schedules.mb_order.choose_order` (identity, heaviest first, lightest first, mountain, then up to
32 swaps) picks the order; the table gives its makespan against the data's own order.
"""
from __future__ import annotations

import os
import random
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common as C  # noqa: E402

TITLE = "## Microbatch order under packed variable-length data (simulated, pp 4)"
TOKENS, MEDIAN, SIGMA, CAP = 8192, 1024, 1.2, 32768
SEEDS = 24


def factors(m: int, s_eq: float, rng: random.Random) -> tuple[float, ...]:
    """Per-microbatch cost factors of one step (module doc), mean 1."""
    costs, room, cost = [], TOKENS, 0.0
    while len(costs) < m:
        length = min(CAP, max(1, int(rng.lognormvariate(0.0, SIGMA) * MEDIAN)))
        while length > 0 and len(costs) < m:
            piece = min(length, room)
            cost += piece * piece + s_eq * piece
            length, room = length - piece, room - piece
            if room == 0:
                costs.append(cost)
                room, cost = TOKENS, 0.0
    mean = statistics.fmean(costs)
    return tuple(c / mean for c in costs)


def rows() -> list:
    from primus_megatron import schedules as S
    from primus_megatron.schedules.mb_order import choose_order, iteration_time, seed_orders

    out = []
    for s_eq in (4096, 24576):
        for name in ("1f1b", "zb-h1", "zbv"):
            for m in (8, 12, 16):
                ratios, spreads, seeds = [], [], {}
                for seed in range(SEEDS):
                    f = factors(m, s_eq, random.Random(seed * 1000 + m))
                    costs = S.Costs(mb_scale=f)
                    order, tried = choose_order(name, 4, costs, budget=32)
                    by_label = {c.label: c.iteration for c in tried}
                    ident = by_label["identity"]
                    ratios.append(iteration_time(name, 4, costs, order) / ident)
                    spreads.append(max(f) / min(f))
                    for label, _ in seed_orders(f)[1:]:
                        seeds.setdefault(label, []).append(by_label[label] / ident)
                out.append([s_eq, name, m, f"{statistics.median(spreads):.2f}",
                            *(f"{statistics.fmean(seeds[k]):.3f}" for k in ("heaviest first", "lightest first",
                                                                           "mountain")),
                            f"{statistics.fmean(ratios):.3f}", f"{min(ratios):.3f}",
                            f"{sum(r < 1 - 1e-9 for r in ratios)}/{SEEDS}"])
    return out


def main(argv=None) -> int:
    args = C.parser(__doc__).parse_args(argv)
    text = C.section(
        C.command_line("benchmarks/mb_order.py", argv),
        "Simulated (no runtime). Per row, over 24 steps: the median spread of the factors (heaviest over "
        "lightest microbatch), the mean makespan of each fixed order and of the chosen one against the data's "
        "own order (identity), the chosen order's best step, and in how many steps it beat identity.",
        C.table(["S_eq", "schedule", "m", "factor spread", "heaviest first", "lightest first", "mountain",
               "chosen (mean)", "chosen (best)", "steps improved"], rows()),
        "What it shows: where the microbatches' costs differ, the order matters, most for 1F1B (its warm-up "
        "and cool-down carry one microbatch's F and backward across every stage, with nothing to overlap "
        "them) and least for zbv (its W fill the gaps the heavy ones leave). Sorting either way helps 1F1B "
        "(neighbours of similar cost stall it less) but heaviest first does not help the zero-bubble schedules; "
        "light microbatches at both ends with the heaviest in the middle (mountain) is the best fixed order "
        "everywhere, and the swaps add up to 0.7%. With attention a smaller part of the cost (S_eq 24576) the factors spread less "
        "and the gains shrink with them. The chosen order is never slower than the data's own (identity is "
        "a candidate and wins ties).")
    C.publish(args, TITLE, text, "mb_order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
