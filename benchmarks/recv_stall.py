"""ROCm's pending-receive stall: each receive policy's bubble with and without it (issue 60 item 3).

    python benchmarks/recv_stall.py                # simulated, pp 8 and 16; writes docs/benchmarks/recv-stall.md
    python benchmarks/recv_stall.py --emulated     # also zb-h1 and zbv at pp 8 on emulated devices (minutes)

On ROCm a posted receive that has not completed slows its rank's compute (PyTorch #172668). The queue
model's stall option (`rendezvous.run_p2p(..., recv_stall=)`, the CLI's `--rocm-recv-stall`): an op
that starts while a receive posted earlier on its rank is pending takes FACTOR times its duration. The
factor here is 1.3, the CLI's default: a guess, not a measurement (no AMD run yet). For zb-h1, zbv,
dualpipev, interleaved-1f1b (2 chunks) and 1F1B (the order of megatron's 1F1B; megatron's own code
waits on its receives before computing, so no receive of it is pending during an op: its
just-in-time row is what megatron itself posts) at pp 8 and 16 with m = 2p, costs f = b = w = 1 and
comm = 0.05 per message, each lowered under the early and the just-in-time policy and run on
NCCL/RCCL's queue model (eager init) without and with the stall. Bubble = 1 - work / (pp x makespan),
work the stall-free op time: time lost to a stall counts as bubble, as it does on the GPU.

Emulated (`--emulated`): the same cases at pp 8 for zb-h1 and zbv, one launch per (policy, stall),
8 gloo ranks whose ops sleep their time at UNIT_MS ms per unit (emulation/chunks.py), strict p2p (the
queue that knows which receives are pending); the stall charged as the simulator's. Makespan the median
over STEPS steps after a warm-up, bubble against the same stall-free work; the last column counts the
ops charged the stall in that step (all ranks; early / just-in-time), which no host delay blurs.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402  (puts the repository first on the import path)

from primus_megatron.schedules import Costs, generate, simulate, validate  # noqa: E402
from primus_megatron.schedules.lowering import EARLY, JUST_IN_TIME  # noqa: E402
from primus_megatron.schedules.rendezvous import run_p2p  # noqa: E402

TITLE = "## Receive policies under ROCm's pending-receive stall"
SCHEDULES = (("zb-h1", "zb-h1"), ("zbv", "zbv"), ("dualpipev", "dualpipev"),
             ("interleaved-1f1b", "interleaved-1f1b"), ("1f1b", "megatron's 1F1B order (1f1b)"))
COSTS = Costs(f=1.0, b=1.0, w=1.0, comm=0.05)
STALL = 1.3
EMULATED = ("zb-h1", "zbv")
UNIT_MS, STEPS, ELEMENTS = 20.0, 2, 1024


def simulated(name: str, pp: int) -> list[float]:
    """Bubbles of (early, early + stall, just-in-time, just-in-time + stall)."""
    sched = generate(name, pp, 2 * pp, costs=COSTS)
    sc = COSTS.resolve(pp, sched.chunks_per_rank, sched.placement, sched.microbatches)
    work = sum(simulate(sched, COSTS).busy)
    out = []
    for policy in (EARLY, JUST_IN_TIME):
        lowered = validate(sched, costs=COSTS, recv_policy=policy)
        for stall in (1.0, STALL):
            out.append(1.0 - work / (pp * run_p2p(lowered, sc, recv_stall=stall).makespan))
    return out


def emulated(name: str, pp: int) -> tuple[list[float], str]:
    """`simulated`'s four bubbles, measured on emulated ranks (module doc), and the ops stalled."""
    from primus_megatron import emulation as E
    from primus_megatron.emulation import launch

    sched = generate(name, pp, 2 * pp, costs=COSTS)
    scale = UNIT_MS / 1000.0
    work = sum(simulate(sched, COSTS).busy) * scale
    out, stalled = [], []
    for policy in (EARLY, JUST_IN_TIME):
        for stall in (1.0, STALL):
            v = E.make_variant(name, sched, COSTS, scale=scale)
            results, _ = launch.run([v], pp, 2 * pp, elements=ELEMENTS, steps=STEPS, p2p_mode="strict",
                                    recv_policy=policy, recv_stall=stall)
            out.append(1.0 - work / (pp * results[0]["makespan"]))
            if stall != 1.0:
                stalled.append(results[0]["stalled_ops"])
            print(f"  emulated {name} pp={pp} {policy} stall {stall}: bubble {out[-1]:.3f}, "
                  f"{results[0]['stalled_ops']} ops stalled", flush=True)
    return out, f"{stalled[0]} / {stalled[1]} of {3 * 2 * pp * pp * sched.chunks_per_rank}"


def _row(label: str, pp: int, how: str, b: list[float], stalled: str = "-") -> list:
    return [label, pp, how, *(f"{x:.3f}" for x in b), f"{b[1] - b[0]:+.3f}", f"{b[3] - b[2]:+.3f}", stalled]


def main(argv=None) -> int:
    parser = C.parser(__doc__)
    parser.add_argument("--emulated", action="store_true", help="also zb-h1 and zbv at pp 8 on emulated devices")
    args = parser.parse_args(argv)
    started = time.monotonic()
    rows = []
    for name, label in SCHEDULES:
        for pp in (8, 16):
            b = simulated(name, pp)
            rows.append(_row(label, pp, "simulated", b))
            print(f"  {name} pp={pp}: " + " ".join(f"{x:.3f}" for x in b), flush=True)
    if args.emulated:
        for name in EMULATED:
            rows.append(_row(name, 8, f"emulated ({UNIT_MS:g} ms/unit)", *emulated(name, 8)))
    header = ["schedule", "pp", "how", "early", f"early, stall x{STALL:g}", "just-in-time",
              f"just-in-time, stall x{STALL:g}", "stall cost, early", "stall cost, just-in-time",
              "ops stalled (early / just-in-time)"]
    body = C.section(C.command_line("benchmarks/recv_stall.py", argv),
                     f"Run {C.taken()}, load average {C.load():.1f} on this machine's 2 shared cores.", C.method(__doc__),
                     C.table(header, rows), f"{time.monotonic() - started:.0f} s in all.")
    C.publish(args, TITLE, body, "recv_stall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
