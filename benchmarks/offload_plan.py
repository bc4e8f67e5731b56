"""Activation offload in the planner: iteration time against resident activation memory (simulated).

    python benchmarks/offload_plan.py            # prints the table and writes its section of docs/benchmarks/offload.md
    python benchmarks/offload_plan.py --no-write

Every schedule at pp=4, 16 microbatches, the Zero Bubble paper's memory model (B frees all but the
weight gradient's share: --mem-b -0.63, --mem-w -0.37) and costs F=1, B=1, W=1 (as the paper's
equal-cost tables), with offload off, all and auto (no memory limit: the fastest plan, and among
equally fast ones the least memory) at copy-lane bandwidths of 4, 1 and 0.5 activation units per
time unit (a rank's activations of a microbatch copied in a quarter, one, two F times). Makespan
and max resident peak memory are the simulator's (schedules/offload.py); measured resident
memory is not part of this table (see the issue-32 report).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

from primus_megatron.schedules import Costs, generate, names  # noqa: E402
from primus_megatron.schedules import offload  # noqa: E402

SECTION = "## Activation offload: time against resident memory (simulated, pp=4)"
PP, M = 4, 16
BANDWIDTHS = (4.0, 1.0, 0.5)


def rows() -> list:
    costs = Costs(mem_b=-0.63, mem_w=-0.37)
    out = []
    for name in names():
        if name == "zb-optimal":  # an ILP per call; its order is zb-h1-like at these costs
            continue
        schedule = generate(name, PP, M, costs=costs)
        off = offload.choose(schedule, "off", costs=costs)
        row = [name, f"{off.makespan:g}", f"{off.max_peak_memory:.2f}"]
        for bandwidth in BANDWIDTHS:
            for mode in ("all", "auto"):
                r = offload.choose(schedule, mode, bandwidth=bandwidth, costs=costs)
                row.append(f"{r.makespan:g} / {r.max_peak_memory:.2f}")
        out.append(row)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    head = ["schedule", "makespan (off)", "peak (off)"] + [f"{mode} @ {bw:g}" for bw in BANDWIDTHS
                                                           for mode in ("all", "auto")]
    body = ("`python benchmarks/offload_plan.py` (pp=4, 16 microbatches, F=B=W=1, mem-b -0.63 / mem-w -0.37). "
            "Cells: makespan / max resident peak memory (activation units: one rank's activations of one "
            "microbatch). `all` offloads every F and every W share (what B keeps for W); `auto` with no limit is "
            "the fastest plan, then the least "
            "memory.\n\n" + C.table(head, rows()))
    print(body)
    if not args.no_write:
        C.write_section(C.default_page(), SECTION, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
