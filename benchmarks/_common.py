"""Shared helpers of the CPU benchmarks (not a benchmark itself).

* `run_ranks(body, case, world)`: `world` gloo processes (spawned), each
  optionally pinned to one core (rank r -> the r-th core this process may use,
  modulo their number), OMP_NUM_THREADS=1 and torch.set_num_threads(1),
  megatron-core's parallel_state set up for pipeline size `case["pp"]`; runs
  `body(rank, case)` and returns the per-rank results. Every run ends: a worker
  exception or the timeout kills every rank and raises here.
* `write_section(path, title, body)`: replace (or append) one `## ` section of
  BENCHMARKS.md, leaving every other section as it is.
* small statistics helpers (median, spread) for interleaved repetitions.
"""
from __future__ import annotations

import datetime
import io
import os
import queue
import socket
import statistics
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, body, case, out, pin):
    try:
        import warnings

        warnings.filterwarnings("ignore")
        if pin:
            cores = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(0, {cores[rank % len(cores)]})
        import torch
        import torch.distributed as dist
        from megatron.core import parallel_state

        from primus_megatron.compat import cpu

        cpu.enable()
        torch.set_num_threads(1)
        torch.set_num_interop_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=case.get("gloo_timeout", 300)))
        parallel_state.initialize_model_parallel(1, case["pp"], distributed_timeout_minutes=5)
        result = body(rank, case)
        buf = io.BytesIO()
        torch.save(result, buf)
        out.put((rank, "ok", buf.getvalue()))
    except BaseException as exc:  # report every failure to the parent, then exit
        out.put((rank, "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        out.close()
        out.join_thread()
        os._exit(0)


def run_ranks(body, case: dict, world: int, *, timeout_s: float, pin: bool = True) -> list:
    """Run body(rank, case) on `world` gloo ranks; results indexed by rank."""
    import torch
    import torch.multiprocessing as mp

    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the spawned ranks before they import torch
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, body, case, out, pin)) for r in range(world)]
    for p in procs:
        p.start()
    results, errors = {}, []
    deadline = time.monotonic() + timeout_s
    try:
        while len(results) + len(errors) < world:
            try:
                rank, status, value = out.get(timeout=max(1.0, deadline - time.monotonic()))
            except queue.Empty:
                if errors:
                    break
                raise TimeoutError(f"ranks {sorted(set(range(world)) - set(results))} did not finish in "
                                   f"{timeout_s:g} s") from None
            if status == "ok":
                results[rank] = torch.load(io.BytesIO(value), weights_only=False)
            else:
                errors.append((rank, value))
                deadline = min(deadline, time.monotonic() + 10)  # let the other ranks report their side
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(5)
    if errors:
        raise RuntimeError("\n".join(f"rank {rank} failed:\n{value}" for rank, value in sorted(errors)))
    return [results[r] for r in range(world)]


def write_section(path: str, title: str, body: str) -> None:
    """Replace (or append) the section `title` (a '## ' line) of `path`; nothing else changes."""
    from primus_megatron.schedules.trace import atomic_write

    old = open(path, encoding="utf-8").read() if os.path.exists(path) else "# Benchmarks\n"
    section = f"{title}\n\n{body.strip()}\n"
    lines = old.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == title), None)
    if start is None:
        new = old.rstrip("\n") + "\n\n" + section
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        tail = "".join(lines[end:])
        new = "".join(lines[:start]) + section + ("\n" + tail if tail else "")
    atomic_write(path, new)


def median(values) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def quartiles(values) -> tuple[float, float]:
    """(25th, 75th) percentile, linear interpolation; (x, x) for one value."""
    xs = sorted(v for v in values if v == v)
    if not xs:
        return float("nan"), float("nan")

    def pct(p: float) -> float:
        k = (len(xs) - 1) * p
        lo = int(k)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

    return pct(0.25), pct(0.75)


def ratio_cell(values, digits: int = 3) -> str:
    """'median [q1-q3]' of a list of ratios."""
    q1, q3 = quartiles(values)
    return f"{median(values):.{digits}f} [{q1:.{digits}f}-{q3:.{digits}f}]"


def ms_cell(seconds, digits: int = 0) -> str:
    """'median (min-max)' in milliseconds."""
    xs = [1e3 * s for s in seconds if s == s]
    if not xs:
        return "n/a"
    return f"{median(xs):.{digits}f} ({min(xs):.{digits}f}-{max(xs):.{digits}f})"


def command_line(script: str, argv) -> str:
    import shlex

    return "python " + shlex.join([script, *(sys.argv[1:] if argv is None else argv)])
