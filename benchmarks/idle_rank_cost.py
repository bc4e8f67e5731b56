"""What an idle emulated rank costs the machine: threads, wake-ups and CPU while it waits.

    python benchmarks/idle_rank_cost.py                  # pp 2, 4, 8, 16; writes docs/benchmarks/emulated.md's section
    python benchmarks/idle_rank_cost.py --pp 4,32 --no-markdown

Each rank is started as `primus-pipeline emulate` starts its ranks (`runtime.local_ranks`: a gloo
process group, then megatron-core's parallel state), then sleeps `--seconds` without doing
anything. Per rank: its threads, the voluntary context switches of all of them per second (each
is a thread waking up) and its CPU time per second (every thread). A rank that waits in an
emulated op costs this much for as long as it waits, so on a machine whose cores are shared by
every rank it grows with the op times and with pp, unlike the host work per op.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

TITLE = "## What an idle emulated rank costs (threads, wake-ups, CPU)"
HEADERS = ["pp", "threads per rank (max)", "of them gloo event loops", "wake-ups/s per rank (median)",
           "CPU ms/s per rank (median)", "cores busy, all ranks idle"]


def _switches() -> int:
    total = 0
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/status") as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches"):
                    total += int(line.split()[1])
    return total


def _threads_named() -> dict:
    names: dict = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as f:
            name = f.read().strip()
        names[name] = names.get(name, 0) + 1
    return names


def idle_body(rank: int, case: dict) -> dict:
    import torch.distributed as dist

    dist.barrier()
    switches, cpu, wall = _switches(), time.process_time(), time.monotonic()
    time.sleep(case["seconds"])
    wall = time.monotonic() - wall
    out = {"threads": len(os.listdir("/proc/self/task")), "names": _threads_named(),
           "wakeups": (_switches() - switches) / wall, "cpu_ms": 1e3 * (time.process_time() - cpu) / wall}
    dist.barrier()
    return out


def main(argv=None) -> int:
    from primus_megatron.runtime import local_ranks

    parser = C.parser(__doc__)
    parser.add_argument("--pp", default="2,4,8,16", help="rank counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=3.0, help="how long each rank sleeps")
    args = parser.parse_args(argv)
    rows = []
    for pp in (int(x) for x in args.pp.split(",")):
        ranks = local_ranks.run_ranks(idle_body, {"pp": pp, "seconds": args.seconds}, pp, timeout_s=300)
        loops = max(r["names"].get("gloo_tcp_loop", 0) for r in ranks)
        rows.append([pp, max(r["threads"] for r in ranks), loops, f"{C.median([r['wakeups'] for r in ranks]):.0f}",
                     f"{C.median([r['cpu_ms'] for r in ranks]):.1f}",
                     f"{sum(r['cpu_ms'] for r in ranks) / 1e3:.3f}"])
        print(C.table(HEADERS, rows), flush=True)
    text = C.section(C.command_line("benchmarks/idle_rank_cost.py", argv),
                     f"Taken {C.taken()} (2 cores; load average {C.load():.1f} when written); every rank asleep for "
                     f"{args.seconds:g} s.",
                     C.table(HEADERS, rows))
    C.publish(args, TITLE, text, "idle_rank_cost")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
