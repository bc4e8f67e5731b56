"""Run a function on several gloo ranks on CPU, each a spawned process.

What the tests and the benchmarks use to run a real pipeline without GPUs:
every rank enables the CPU mode (`compat.cpu`), runs one thread (one OpenMP
thread, one intra-op and one inter-op torch thread), joins a gloo process group
whose collectives time out after `case.get("gloo_timeout", 60)` seconds (megatron's
parallel groups likewise, rounded up to whole minutes), sets up megatron-core's
parallel state for `case["pp"]` (and `case.get("tp", 1)`), then runs
`body(rank, case)`. Every run ends: `timeout_s` bounds the whole run, and a
worker exception kills every rank (after up to 10 s for the others to report)
and raises here with the ranks that failed or did not finish.
"""
from __future__ import annotations

import datetime
import io
import math
import os
import queue
import socket
import time
import traceback
from typing import Any, Callable


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, body: Callable, case: dict, out, pin: bool) -> None:
    try:
        import warnings

        warnings.filterwarnings("ignore")
        if pin:  # rank r on the r-th core this process may use
            cores = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(0, {cores[rank % len(cores)]})
        import torch
        import torch.distributed as dist
        from megatron.core import parallel_state

        from primus_megatron.compat import cpu

        cpu.enable()
        torch.set_num_threads(1)
        torch.set_num_interop_threads(1)
        gloo_s = case.get("gloo_timeout", 60)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=gloo_s))
        parallel_state.initialize_model_parallel(case.get("tp", 1), case["pp"],
                                                 distributed_timeout_minutes=max(1, math.ceil(gloo_s / 60)))
        result = body(rank, case)
        buf = io.BytesIO()
        torch.save(result, buf)  # plain bytes: shared-memory tensors die with the process
        out.put((rank, "ok", buf.getvalue()))
    except BaseException as exc:  # report every failure to the parent, then exit
        out.put((rank, "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        out.close()
        out.join_thread()  # flush the result before the hard exit
        os._exit(0)


def run_ranks(body: Callable[[int, dict], Any], case: dict, world: int, *, timeout_s: float,
              pin: bool = False) -> list:
    """`body(rank, case)` on `world` gloo ranks (module doc); results indexed by rank.

    `body` must be importable by name (a module-level function): ranks are spawned.
    `pin`: one core per rank, for timing."""
    import torch
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    # Not daemonic: megatron's checkpoint writer starts processes of its own.
    procs = [ctx.Process(target=_worker, args=(r, world, port, body, case, out, pin)) for r in range(world)]
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # read by the ranks' OpenMP before torch starts
    try:
        for p in procs:
            p.start()
    finally:
        if saved is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = saved
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
