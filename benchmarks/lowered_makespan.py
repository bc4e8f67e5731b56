"""Lowered makespan: what NCCL/RCCL's queue semantics cost a lowered schedule, simulated.

    python benchmarks/lowered_makespan.py            # pp 4 / 8 / 16, m = 2p, writes docs/benchmarks/schedule-quality.md
    python benchmarks/lowered_makespan.py --quick    # pp 4 and 8 only

For every registered schedule except zb-optimal (an integer program, small
cases only), at pp 4, 8 and 16 with m = 2p microbatches, under two cost models:

- unit-ish: f = b = w = 1, comm = 0.05 per message;
- paper: the Zero Bubble paper's profiled 1.5B costs (REFERENCE.md, p=8 m=24
  row: T_F 18.522, T_B 18.086, T_W 9.337, T_comm 0.601 ms; for the one-chunk
  schedules F/B/W per rank, split over the chunks of the others; BW = B + W).

Two makespans per case: the op-level simulation (`schedules.simulate`: a
message arrives `comm` after its op ends, communication never waits), and the
lowered schedule run under the queue semantics the hang check models
(`rendezvous.run_p2p`: each rank's postings run one after another on one
queue, a batch's operations together, a send/receive pair takes `comm` once
both ends are at the heads of their queues, an op waits for its receive's
posting to finish), eager communicator init. The lowering used is what
`validate` returns (its global message order from a run under the case's own
costs), and, in the last column, the same lowering ordered by a unit-cost run
instead (what it did first: it costs the interleaved and V schedules up to
16%, which is why the order now follows the costs).
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402  (puts the repository first on the import path)

from primus_megatron.schedules import UNIT, Costs, generate, info, lower, names, simulate, validate  # noqa: E402
from primus_megatron.schedules.rendezvous import run_p2p  # noqa: E402
from primus_megatron.schedules.simulation import end_times  # noqa: E402


SECTION = "## Lowered schedules under NCCL/RCCL queue semantics (simulated)"
EXCLUDED = ("zb-optimal",)
PAPER = dict(f=18.522, b=18.086, w=9.337, comm=0.601)


def cost_models(chunks: int) -> dict[str, Costs]:
    paper = Costs(f=PAPER["f"], b=PAPER["b"], w=PAPER["w"], comm=PAPER["comm"])
    return {"unit-ish": Costs(f=1.0, b=1.0, w=1.0, comm=0.05), "paper 1.5B": paper}


def case(name: str, pp: int, costs: Costs) -> tuple[float, float, float]:
    """(op-level makespan, lowered makespan, lowered makespan with the messages ordered by a unit-cost run)."""
    m = 2 * pp
    sched = generate(name, pp, m, costs=costs)
    ops = simulate(sched, costs).makespan
    sc = costs.resolve(pp, sched.chunks_per_rank, sched.placement)
    lowered = run_p2p(validate(sched, costs=costs), sc).makespan
    unit = UNIT.resolve(pp, sched.chunks_per_rank, sched.placement)
    unit_order = run_p2p(lower(sched, end_times(sched, unit)), sc).makespan
    return ops, lowered, unit_order


def main(argv=None) -> int:
    parser = C.parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="pp 4 and 8 only")
    args = parser.parse_args(argv)
    sizes = (4, 8) if args.quick else (4, 8, 16)
    started = time.monotonic()
    rows, worst = [], []
    for name in [n for n in names() if n not in EXCLUDED]:
        for cname, costs in cost_models(info(name).chunks).items():
            for pp in sizes:
                ops, low, unit_order = case(name, pp, costs)
                gap, gap_unit = (low - ops) / ops, (unit_order - ops) / ops
                worst.append((gap, name, pp, cname))
                rows.append([f"`{name}`", pp, 2 * pp, cname, f"{ops:.3f}", f"{low:.3f}", f"{100 * gap:+.2f}%",
                             f"{100 * gap_unit:+.2f}%"])
                print(f"  {name} pp={pp} {cname}: ops {ops:.3f} lowered {low:.3f} ({100 * gap:+.2f}%), "
                      f"unit-cost order {100 * gap_unit:+.2f}%", flush=True)
    worst.sort(reverse=True)
    top = "; ".join(f"{n} pp={p} {c} {100 * g:+.2f}%" for g, n, p, c in worst[:3])
    header = ["schedule", "pp", "m", "costs", "op-level makespan", "lowered makespan", "gap",
              "gap, order from unit costs"]
    body = C.section(C.command_line("benchmarks/lowered_makespan.py", argv), C.method(__doc__), C.table(header, rows),
                     f"Largest gaps: {top}. {time.monotonic() - started:.0f} s in all.")
    C.publish(args, SECTION, body, "lowered_makespan")
    return 0


if __name__ == "__main__":
    sys.exit(main())
