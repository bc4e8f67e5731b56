"""The two pictures of BENCHMARKS.md's front page (an experiment script, not part of the package).

    python benchmarks/figures.py                 # writes docs/benchmarks/img/{speedup,bubble}.png
    python benchmarks/figures.py --out DIR       # somewhere else

1. speedup.png: projected step-time speed-up of our schedules against megatron's 1F1B and its
   interleaved 1F1B, Llama-3-8B-like and Qwen3-30B-A3B-like blocks, pp 8/16/32 at m = 2pp and 4pp.
   The numbers are gpu_projection.py's (`project_cell` on the H200 report's profiles, 4 layers per
   rank, even split): the same as `make gpu-projection` prints, drawn, not re-derived.
2. bubble.png: sync bubble rate against microbatches at pp=8, equal costs (f = b = w = 1, no
   communication cost), every registered schedule but zb-optimal (an integer program, small cases
   only); second panel: each schedule's peak activation memory at pp=8, m=32 (units of one
   microbatch's activations on one rank; 1F1B holds pp).
"""
from __future__ import annotations

import argparse
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for path in (ROOT, HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

REPORT = os.path.join(HERE, "gpu_reports", "h200-2026-11-27-run2.json")
OURS = ("zb-h1", "zb-h2", "zbv", "v-half", "v-min")
CELLS = ((8, 16), (8, 32), (16, 32), (16, 64), (32, 64), (32, 128))
MODEL_TITLES = {"dense": "Llama-3-8B-like (dense)", "moe": "Qwen3-30B-A3B-like (MoE)"}
PP, MICROBATCHES, MEMORY_AT = 8, (8, 16, 24, 32, 40, 48, 56, 64), 32


def projected_speedups(report: str) -> dict:
    """{block: {(pp, m): {schedule: (vs megatron 1F1B, vs megatron interleaved)}}} from gpu_projection."""
    import tempfile

    import gpu_projection as G

    names = list(G.BASELINES) + list(OURS)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        blocks, _ = G.load_blocks(types.SimpleNamespace(report=report, profile=[]), tmp)
        for block in blocks:
            out[block.name] = {}
            for pp, m in CELLS:
                rows = G.project_cell(block.model, pp, m, names)["schedules"]
                out[block.name][(pp, m)] = {n: (rows[n]["vs_megatron_1f1b"], rows[n]["vs_megatron_interleaved"])
                                            for n in OURS}
    return out


def bubbles_and_memory() -> tuple[dict, dict]:
    """Sync bubble per schedule and m at pp=8, and peak memory at m=32, under equal costs."""
    from primus_megatron.schedules import Costs, generate, names, simulate

    costs = Costs(f=1.0, b=1.0, w=1.0, comm=0.0)
    bubble, memory = {}, {}
    for name in names():
        if name == "zb-optimal":  # an integer program: minutes per case at these sizes
            continue
        bubble[name] = []
        for m in MICROBATCHES:
            result = simulate(generate(name, PP, m, costs=costs, validate=False), costs)
            bubble[name].append(result.bubble_sync)
            if m == MEMORY_AT:
                memory[name] = max(result.peak_memory)
    return bubble, memory


def draw_speedup(data: dict, path: str) -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 8), sharey=True)
    width = 0.8 / len(OURS)
    for row, block in enumerate(sorted(data)):
        for col, baseline in enumerate(("megatron 1F1B", "megatron interleaved 1F1B (2 chunks)")):
            ax = axes[row][col]
            for i, name in enumerate(OURS):
                xs = [c + (i - (len(OURS) - 1) / 2) * width for c in range(len(CELLS))]
                ax.bar(xs, [data[block][cell][name][col] for cell in CELLS], width, label=name)
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_xticks(range(len(CELLS)))
            ax.set_xticklabels([f"pp={pp}\nm={m}" for pp, m in CELLS])
            ax.set_ylim(0.75, 1.4)
            ax.set_title(f"{MODEL_TITLES.get(block, block)}: vs {baseline}", fontsize=10)
            ax.grid(axis="y", alpha=0.3)
        axes[row][0].set_ylabel("projected speed-up (> 1: faster)")
    axes[0][0].legend(ncol=len(OURS), fontsize=8, loc="upper left")
    fig.suptitle("Projected step-time speed-up from one H200's measured costs (4 layers per rank, even split)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_bubble(bubble: dict, memory: dict, path: str) -> None:
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 2]})
    styles = ("-", "--", ":", "-.")  # equal-bubble schedules overlap: style and marker tell them apart
    for i, (name, values) in enumerate(bubble.items()):
        left.plot(MICROBATCHES, values, linestyle=styles[i % 4], marker="os^vDx+*Ph"[i % 10], markersize=5,
                  fillstyle="none", label=name)
    left.set_xlabel(f"microbatches m (pp={PP})")
    left.set_ylabel("sync bubble rate")
    left.set_title("Bubble rate, equal costs f = b = w = 1, no comm cost", fontsize=10)
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    names = list(memory)
    right.barh(names, [memory[n] for n in names], color="tab:gray")
    for i, n in enumerate(names):
        right.text(memory[n] + 0.1, i, f"{memory[n]:g}", va="center", fontsize=8)
    right.invert_yaxis()
    right.set_xlabel(f"peak activation memory per rank (microbatches; pp={PP}, m={MEMORY_AT})")
    right.set_title("Peak activation memory (1F1B holds pp)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks", "img"),
                        help="folder the two PNGs go to (default: docs/benchmarks/img)")
    parser.add_argument("--report", default=REPORT, help="gpu_bench.py report with the profiles (default: run 2)")
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import gpu_projection as G

    try:
        speedups = projected_speedups(args.report)
    except G.UsageError as exc:  # a missing or unreadable report: one sentence, no traceback
        print(f"figures: error: {exc}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    draw_speedup(speedups, os.path.join(args.out, "speedup.png"))
    bubble, memory = bubbles_and_memory()
    draw_bubble(bubble, memory, os.path.join(args.out, "bubble.png"))
    for name, values in bubble.items():
        print(f"{name:18s} bubble " + " ".join(f"{v:.4f}" for v in values) + f"   peak@m={MEMORY_AT} {memory[name]:g}")
    print(f"figures: wrote speedup.png and bubble.png in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
