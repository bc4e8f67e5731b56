"""Hang detection for p2p whose waits do not block the host (NCCL/RCCL).

On the GPU a receive is waited on the device stream: `work.wait()` with no timeout
only makes the current stream wait for the NCCL stream and returns at once, so the
host goes on enqueuing. A timeout would undo that. PyTorch's
torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, `WorkNCCL::wait` (read in a recent
snapshot of PyTorch's main branch; the torch 2.13 CPU wheel here has no NCCL build to
check its exact lines against) first calls `synchronize()`, which blocks the current
stream on the work's end event (`ncclEndEvent_->block(currentStream)`), then, "in
case of blockingWait or a timeout value is specified by the user", loops
`while (!isCompleted())` on the host with a `kSynchronizeBusyWaitMillis` sleep. So
the wait carries no timeout, and this watchdog, a thread of its own off the hot
path, names a hang instead: every
`period_s` it looks at the oldest p2p work still pending (in eager NCCL that is the
head of the process group's queue, the one holding the rest), and once that has been
pending longer than the timeout it writes who waited for what (rank, op, peer,
microbatch) and every thread's Python stack to stderr (and to
$PRIMUS_HANG_REPORT_DIR/hang-rank<global rank>.txt when set), then ends the process
with HANG_EXIT_CODE: the launcher (torchrun, srun) then takes the other ranks down,
and their own watchdogs fire where they wait on this one.

Asking a work `is_completed()` from another thread is what ProcessGroupNCCL's own
watchdog thread does (a CUDA event query); it never blocks. If the host itself is
stuck holding the GIL in native code, this thread cannot run: ProcessGroupNCCL's
watchdog (its process-group timeout, TORCH_NCCL_ASYNC_ERROR_HANDLING) remains the
backstop there.
"""
from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

from ..health import flight

HANG_EXIT_CODE = 3
REPORT_DIR_ENV = "PRIMUS_HANG_REPORT_DIR"


@dataclass
class _Tracked:
    work: object
    label: str  # "receive of activation mb0 stage 0->1 from pipeline rank 0 (global 0)"
    op: str  # "F0 (microbatch 0, chunk 0, stage 1)"
    posted: float  # time.monotonic() at posting
    peer: Optional[tuple] = None  # (pipeline rank, global rank, message, send) of its first op


class Watchdog:
    """One per process: p2p works register when posted (a list append under a lock)."""

    def __init__(self, timeout_s: float, *, who: str, period_s: Optional[float] = None,
                 on_hang: Optional[Callable[[str], None]] = None) -> None:
        self.timeout_s = timeout_s
        self.who = who  # "pipeline rank 1 (global 5)"
        self.period_s = period_s if period_s is not None else min(5.0, max(0.05, timeout_s / 10))
        self.on_hang = on_hang or _end_process
        self._pending: list[_Tracked] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="primus-p2p-watchdog", daemon=True)
        self._thread.start()

    def track(self, work, label: str, op: str, peer: Optional[tuple] = None) -> None:
        with self._lock:
            self._pending.append(_Tracked(work, label, op, time.monotonic(), peer))

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def _run(self) -> None:
        while True:
            time.sleep(self.period_s)
            with self._lock:
                self._pending = [t for t in self._pending if not _completed(t.work)]
                oldest = min(self._pending, key=lambda t: t.posted, default=None)
                others = len(self._pending) - 1
            if oldest is None:
                continue
            age = time.monotonic() - oldest.posted
            if age > self.timeout_s:
                where = f" in op {oldest.op}" if oldest.op else ""
                message = (f"{self.who}: p2p watchdog: the {oldest.label}{where} has not completed {age:.3g} s "
                           f"after it was posted (limit {self.timeout_s:g} s; {others} more p2p op(s) pending "
                           f"behind it); that rank died, hangs, runs a different schedule, or the order of p2p ops "
                           f"hangs under NCCL")
                if oldest.peer is not None:  # the postmortem report (health/flight.py) names the peer
                    flight.write_report("hang", message, waiting=(*oldest.peer, oldest.op, oldest.posted))
                self.on_hang(message)
                return


def _completed(work) -> bool:
    try:
        return bool(work.is_completed())
    except Exception:  # a failed work is not pending any more: its own wait raises on the host
        return True


def _end_process(message: str) -> None:
    """Say who waited for what, dump every thread's stack, end the process non-zero."""
    sys.stderr.write(f"\n{message}\n")
    sys.stderr.flush()
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    folder = os.environ.get(REPORT_DIR_ENV)
    if folder:
        try:
            import torch.distributed as dist

            rank = dist.get_rank() if dist.is_initialized() else os.getpid()
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, f"hang-rank{rank}.txt"), "w") as f:
                f.write(message + "\n\n")
                f.flush()
                faulthandler.dump_traceback(file=f, all_threads=True)
        except OSError:
            pass
    sys.stderr.flush()
    os._exit(HANG_EXIT_CODE)


_WATCHDOG: Optional[Watchdog] = None
_WATCHDOG_LOCK = threading.Lock()


def get(timeout_s: float, *, who: str) -> Watchdog:
    """The process's watchdog (started on first use; the latest timeout applies)."""
    global _WATCHDOG
    with _WATCHDOG_LOCK:
        if _WATCHDOG is None:
            _WATCHDOG = Watchdog(timeout_s, who=who)
        _WATCHDOG.timeout_s = timeout_s
        _WATCHDOG.period_s = min(5.0, max(0.05, timeout_s / 10))
        _WATCHDOG.who = who
        return _WATCHDOG
