"""Run a function on several local gloo ranks on CPU, each a process of its own.

What `primus-pipeline emulate`, the tests and the benchmarks use to run a real pipeline
without GPUs:
every rank enables the CPU mode (`compat.cpu`), runs one thread (one OpenMP
thread, one intra-op and one inter-op torch thread), joins a gloo process group
whose collectives time out after `case.get("gloo_timeout", 60)` seconds (megatron's
parallel groups likewise, rounded up to whole minutes), sets up megatron-core's
parallel state for `case["pp"]` (and `case.get("tp", 1)`), then runs
`body(rank, case)`. Every run ends: `timeout_s` bounds the whole run, and a
worker exception kills every rank (after up to REPORT_GRACE_S, 10 s, for the others to report)
and raises here with the ranks that failed or did not finish. A rank whose
process dies without a word (a signal, the out-of-memory killer) counts as
failed, named with its exit status and the Python stack faulthandler wrote at its death
(each rank's fault file, read back into the error: on stderr it would be lost in a test's
captured output). What native code writes before such a death (gloo's enforce message, the C
library's) goes to the rank's standard error, the fork server's: with STDERR_DIR_ENV set, each
rank's goes to a file of its own there instead (`rank<r>-<pid>.err`), for chasing a rare crash.

`sys_path` puts directories first on the ranks' import path before they import anything
(a test's TransformerEngine stand-in, whose presence megatron-core decides at import):
such ranks are not forked from the fork server, whose imports were made without those
directories, but from one of their own in a launcher process started with them first
(`path_launcher`; spawned fresh when that launcher is busy with another thread's launch).
"""
from __future__ import annotations

import datetime
import faulthandler
import io
import math
import os
import queue
import signal
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable, Sequence

from . import path_launcher


def rendezvous_store(world: int = 1):
    """A TCP store hosted by this process on a port the kernel picks, held for as long as the
    caller keeps it (torchrun's agent hosts its store the same way): its `port` goes to the ranks,
    which connect as clients (`TCPStore(..., is_master=False)`; under env:// with
    TORCHELASTIC_USE_AGENT_STORE=True and TORCHELASTIC_RESTART_COUNT set; or as a c10d rendezvous
    endpoint with `is_host=false`). A port picked, closed and handed on could be taken by another
    process before a rank binds it: no launcher of ours does that."""
    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", 0, world, is_master=True, wait_for_workers=False)


AGENT_STORE_ENV = {"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0"}


def _context(fresh: bool = False):
    """Ranks forked from multiprocessing's fork server, which imports `rank_preload` (torch,
    megatron-core, our runtime) once for the launching process's lifetime, so a launch
    costs no imports; spawned where there is no fork server, or when `fresh`."""
    import multiprocessing as mp

    if fresh or "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["primus_megatron.runtime.rank_preload"])  # no effect once the server runs
    return ctx


def start_fork_server(first_on_path: Sequence[str] = ()) -> None:
    """Start the fork server (`_context`) if it is not running, with `first_on_path` first on its
    import path when it imports rank_preload, and one OpenMP thread (read when torch loads).
    multiprocessing hands the server this process's sys.path, which Python 3.11 and 3.12 ignore
    (forkserver.main leaves its sys_path unused): the directories go by PYTHONPATH, for the
    server's start only."""
    from multiprocessing import forkserver

    _context()  # the preload
    with _ENV_LOCK:
        saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "OMP_NUM_THREADS")}
        os.environ["PYTHONPATH"] = os.pathsep.join([*first_on_path, *filter(None, [saved["PYTHONPATH"]])])
        os.environ["OMP_NUM_THREADS"] = "1"
        try:
            forkserver.ensure_running()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _worker(rank: int, world: int, port: int, payload: bytes, out, pin: bool, env: dict,
            fault_path: str, sys_path: tuple) -> None:
    """One rank. `payload`: the pickled (body, case), unpickled once the import path is set (body's
    module may be in a `sys_path` directory, or import what must find one there first)."""
    fault = None
    try:
        sys.path[:0] = [p for p in sys_path if p not in sys.path]
        os.environ.clear()
        os.environ.update(env)
        import pickle
        import warnings

        # a crash in native code (gloo, a kernel) still names its Python frames, every thread's
        fault = open(fault_path, "w")
        faulthandler.enable(file=fault, all_threads=True)
        _stderr_to_own_file(rank)
        warnings.filterwarnings("ignore")
        if pin:  # rank r on the r-th core this process may use
            cores = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(0, {cores[rank % len(cores)]})
        import torch
        import torch.distributed as dist
        from megatron.core import parallel_state

        from primus_megatron.compat import cpu

        body, case = pickle.loads(payload)
        cpu.enable()
        torch.set_num_threads(1)
        torch.set_num_interop_threads(1)
        gloo_s = case.get("gloo_timeout", 60)
        timeout = datetime.timedelta(seconds=gloo_s)
        # the launcher hosts the rendezvous store (`run_ranks`); every rank is its client
        store = dist.TCPStore("127.0.0.1", port, world, is_master=False, timeout=timeout)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
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
        if fault is not None:
            faulthandler.disable()
            fault.close()
        os._exit(0)


STDERR_DIR_ENV = "PRIMUS_RANK_STDERR_DIR"


def _stderr_to_own_file(rank: int) -> None:
    """With STDERR_DIR_ENV set (off by default: tests read ranks' output where it goes now), the rank's
    file descriptor 2 goes to a file of its own there, kept after the rank dies (module doc)."""
    directory = os.environ.get(STDERR_DIR_ENV)
    if directory:
        os.makedirs(directory, exist_ok=True)
        fd = os.open(os.path.join(directory, f"rank{rank}-{os.getpid()}.err"), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                     0o644)
        os.dup2(fd, 2)
        os.close(fd)


def run_ranks(body: Callable[[int, dict], Any], case: dict, world: int, *, timeout_s: float,
              pin: bool = False, sys_path: Sequence[str] = ()) -> list:
    """`body(rank, case)` on `world` gloo ranks (module doc); results indexed by rank.

    `body` must be importable by name (a module-level function): ranks are new processes
    (forked from the fork server, `_context`) that take this process's environment.
    `pin`: one core per rank, for timing. `sys_path`: directories first on the ranks' import
    path (module doc)."""
    import pickle

    import torch

    payload = pickle.dumps((body, case))
    sys_path = tuple(sys_path)
    raw = path_launcher.launch(sys_path, payload, world, timeout_s, pin) if sys_path else None
    if raw is None:  # no directories first, or their launcher is busy with another thread's launch
        raw = run_payload(payload, world, timeout_s=timeout_s, pin=pin, sys_path=sys_path,
                          ctx=_context(fresh=bool(sys_path)))
    return [torch.load(io.BytesIO(r), weights_only=False) for r in raw]


def run_payload(payload: bytes, world: int, *, timeout_s: float, pin: bool, sys_path: tuple = (), ctx=None) -> list:
    """`run_ranks` for a pickled (body, case), its ranks started by `ctx` (default: forked from the
    fork server): each rank's result as the bytes torch.save wrote, read back by the caller (a
    launcher need not import what they hold)."""
    ctx = ctx or _context()
    out = ctx.Queue()
    procs: list = []
    # The rendezvous store, hosted here on a port the kernel picks and held until the ranks are
    # done, as torchrun's agent hosts it: a port picked, closed and handed on could be taken by
    # another process before rank 0 binds it.
    store = rendezvous_store(world)
    with tempfile.TemporaryDirectory(prefix="primus-ranks-") as faults:
        try:
            procs = _start(ctx, world, store.port, payload, out, pin, faults, sys_path)
            results, errors = _collect(procs, out, world, timeout_s, faults)
        finally:
            _ask_for_reports(procs)
            for p in procs:
                if p.is_alive():
                    p.kill()
            for p in procs:
                p.join(5)
    if errors:
        raise RuntimeError("\n".join(f"rank {rank} failed:\n{value}" for rank, value in sorted(errors)))
    return [results[r] for r in range(world)]


def _ask_for_reports(procs: list, wait_s: float = 5.0) -> None:
    """Ranks still running when the run ends early: with $PRIMUS_HANG_REPORT_DIR set, each is asked for
    its postmortem report (SIGUSR1, health/flight.py), as a user would before taking a stuck job down."""
    from ..health.flight import REPORT_DIR_ENV

    folder = os.environ.get(REPORT_DIR_ENV)
    alive = [(r, p) for r, p in enumerate(procs) if p.is_alive()]
    if not folder or not alive:
        return
    asked = time.time()
    for _, p in alive:
        os.kill(p.pid, signal.SIGUSR1)

    def answered(rank: int, proc) -> bool:
        try:
            return os.path.getmtime(os.path.join(folder, f"postmortem-rank{rank}.json")) >= asked - 1.0
        except OSError:
            return not proc.is_alive()

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not all(answered(r, p) for r, p in alive):
        time.sleep(0.05)


REPORT_GRACE_S = 10.0  # once a rank failed: how long the others get to report their side before they are killed
_ENV_LOCK = threading.Lock()  # launches from several threads: one at a time sets the ranks' environment


def _start(ctx, world: int, port: int, payload: bytes, out, pin: bool, faults: str, sys_path: tuple) -> list:
    """The rank processes, started. They take this environment (not the fork server's, started at
    the first launch) with one OpenMP thread; spawned ones (`sys_path`) also this interpreter's
    import path at the moment they start, with `sys_path` first: they import this module's package
    (torch, megatron-core) while unpickling their arguments, before their own code runs."""
    with _ENV_LOCK:
        saved_omp, saved_path = os.environ.get("OMP_NUM_THREADS"), list(sys.path)
        os.environ["OMP_NUM_THREADS"] = "1"  # read by OpenMP when torch loads (in the fork server, first launch)
        sys.path[:0] = [p for p in sys_path if p not in sys.path]
        started: list = []
        try:
            env = dict(os.environ)
            for r in range(world):  # not daemonic: megatron's checkpoint writer starts processes of its own
                p = ctx.Process(target=_worker, args=(r, world, port, payload, out, pin, env,
                                                      os.path.join(faults, f"rank{r}.fault"), sys_path))
                p.start()
                started.append(p)
            return started
        except BaseException:
            for p in started:
                p.kill()
            raise
        finally:
            sys.path[:] = saved_path
            if saved_omp is None:
                del os.environ["OMP_NUM_THREADS"]
            else:
                os.environ["OMP_NUM_THREADS"] = saved_omp


def _collect(procs: list, out, world: int, timeout_s: float, faults: str) -> tuple[dict, list]:
    """({rank: result}, [(rank, error text)]): every rank's report, a rank that died without one
    named with its exit status and fault file, until all reported, one failed (REPORT_GRACE_S more for
    the others) or `timeout_s` (TimeoutError naming the ranks that did not finish)."""
    results, errors = {}, []
    deadline = time.monotonic() + timeout_s
    while len(results) + len(errors) < world:
        try:
            rank, status, value = out.get(timeout=min(1.0, max(0.05, deadline - time.monotonic())))
        except queue.Empty:
            reported = set(results) | {r for r, _ in errors}
            for rank in _silent_deaths(procs, reported, out, results, errors):
                errors.append((rank, _death(procs[rank].exitcode, os.path.join(faults, f"rank{rank}.fault"))))
                deadline = min(deadline, time.monotonic() + REPORT_GRACE_S)
            if time.monotonic() < deadline:
                continue
            if errors:
                break
            raise TimeoutError(f"ranks {sorted(set(range(world)) - set(results))} did not finish in "
                               f"{timeout_s:g} s") from None
        if status == "ok":
            results[rank] = value
        else:
            errors.append((rank, value))
            deadline = min(deadline, time.monotonic() + REPORT_GRACE_S)  # let the other ranks report their side
    return results, errors


def _silent_deaths(procs: list, reported: set, out, results: dict, errors: list) -> list:
    """Ranks whose process has ended without reporting. What such a process posted just
    before it ended is read first (its queue is flushed before it exits), so a rank that
    finished is never counted as dead."""
    ended = [r for r, p in enumerate(procs) if r not in reported and p.exitcode is not None]
    if not ended:
        return []
    while True:
        try:
            rank, status, value = out.get(timeout=0.5)
        except queue.Empty:
            break
        if status == "ok":
            results[rank] = value
        else:
            errors.append((rank, value))
    return [r for r in ended if r not in results and all(r != e for e, _ in errors)]


def _death(code: int, fault_path: str = "") -> str:
    """A process's exit status in words, with the stack faulthandler wrote when it died."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "an unknown signal"
        hint = " (the out-of-memory killer sends this)" if -code == signal.SIGKILL else ""
        return (f"its process was killed by signal {-code} ({name}){hint} before it reported a result or an "
                f"error{_fault_stack(fault_path)}")
    return f"its process exited with code {code} before it reported a result or an error{_fault_stack(fault_path)}"


def _fault_stack(path: str, limit: int = 4000) -> str:
    """What faulthandler wrote in the rank's fault file (empty when nothing: a SIGKILL leaves no trace):
    the error and the crashing thread first, less its list of loaded extension modules."""
    try:
        with open(path) as f:
            lines = [line for line in f.read().strip().splitlines() if not line.startswith("Extension modules:")]
    except OSError:
        return ""
    text = "\n".join(lines)
    return f"; faulthandler wrote:\n{text[:limit]}" if text else ""
