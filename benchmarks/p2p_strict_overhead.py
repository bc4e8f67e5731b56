"""What the strict p2p mode costs on CPU: one message round trip (ping-pong between 2 gloo
ranks, each pinned to a core) through runtime.p2p.P2P in `plain` mode (posted to gloo as it
is) and `strict` mode (runtime/strict_p2p.py: the process group's ordered queue, served by a
thread, hands each op to gloo when it reaches the head), for activation-sized messages.

    python benchmarks/p2p_strict_overhead.py            # writes docs/benchmarks/runtime-cpu.md's section
    python benchmarks/p2p_strict_overhead.py --quick --no-markdown

Strict mode needs no acknowledgement message (a gloo send completes only once the receive is
posted); an op submitted while the queue is idle is posted from the caller's thread, others when the
queue's thread reaches them. The modes alternate within a repetition.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

SECTION = "## Strict p2p mode: cost per message (CPU, 2 ranks, one core each)"
SIZES = {"4 KiB": 1024, "256 KiB": 64 * 1024, "4 MiB": 1024 * 1024}  # float32 elements


def pingpong_body(rank: int, case: dict) -> dict:
    import torch
    import torch.distributed as dist

    from primus_megatron.runtime.p2p import P2P

    out = {}
    links = {mode: P2P(dist.new_group([0, 1]), rank, 60.0, mode) for mode in ("plain", "strict")}
    for label, n in SIZES.items():
        buf = torch.ones(n)
        for rep in range(case["reps"]):
            for mode in C.in_turn(["plain", "strict"], rep):
                link = links[mode]
                dist.barrier()
                start = time.perf_counter()
                for _ in range(case["trips"]):
                    if rank == 0:
                        link.finish_send(link.post_send(buf, peer=1, what="ping"), op="bench")
                        link.wait(link.post_recv([n], torch.float32, "cpu", peer=1, what="pong"), op="bench")
                    else:
                        got = link.wait(link.post_recv([n], torch.float32, "cpu", peer=0, what="ping"), op="bench")
                        link.finish_send(link.post_send(got, peer=0, what="pong"), op="bench")
                out.setdefault((label, mode), []).append((time.perf_counter() - start) / case["trips"] / 2)
    return out


def main(argv=None) -> int:
    parser = C.parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args(argv)
    case = {"pp": 2, "reps": 4 if args.quick else 10, "trips": 50 if args.quick else 200}
    res = C.run_ranks(pingpong_body, case, 2, timeout_s=900)[0]
    rows = []
    for label in SIZES:
        plain, strict = (C.median(res[(label, m)]) for m in ("plain", "strict"))
        ratios = [s / p for p, s in zip(res[(label, "plain")], res[(label, "strict")])]
        rows.append([label, f"{1e6 * plain:.0f}", f"{1e6 * strict:.0f}", f"{1e6 * (strict - plain):+.0f}",
                     C.ratio_cell(ratios)])
    text = C.section(
        C.command_line("benchmarks/p2p_strict_overhead.py", argv),
        C.table(["message", "plain gloo, µs one way", "strict, µs one way", "difference, µs",
                 "strict / plain (median [25th-75th])"], rows),
        f"One way = half a round trip, median of {case['reps']} repetitions of {case['trips']} round trips "
              f"(modes alternating); difference = strict - plain, per message. Load average while it ran: "
              f"{C.load():.1f} on {os.cpu_count()} cores. A pipeline step posts about 2 messages per "
              f"microbatch and stage boundary, so a CPU step changes by about that difference per message; on "
              f"the GPU the strict mode is not used (NCCL/RCCL order the ops themselves).")
    C.publish(args, SECTION, text, "p2p_strict_overhead")
    return 0


if __name__ == "__main__":
    sys.exit(main())
