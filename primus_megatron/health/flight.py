"""The flight recorder of one rank: what it is doing now and its last steps' ops, written as a
report when the rank stops (docs/health.md).

The runtime tells it, at the cost of a few attribute writes per op, which op runs (`op_started`)
and which peer a host wait is for (`waiting_on`); it keeps references to the last steps'
timelines (`step_started`), converted to seconds only when a report is written. A report,
$PRIMUS_HANG_REPORT_DIR/postmortem-rank<global rank>.json, is written (only when that variable
is set) on a p2p timeout (`p2p.py`, the GPU watchdog), on SIGTERM (a launcher stopping the job:
written, then the default action), and on SIGUSR1 (`kill -USR1 PID`: written, the rank goes on).
A fatal signal (SIGSEGV, SIGABRT, ...) leaves the stacks faulthandler writes in crash-rank<G>.txt
where faulthandler is not already enabled elsewhere. `primus-pipeline postmortem DIR` reads them.
"""
from __future__ import annotations

import collections
import faulthandler
import json
import os
import signal
import socket
import sys
import threading
import time
from typing import Any, Optional

REPORT_DIR_ENV = "PRIMUS_HANG_REPORT_DIR"
STEPS_KEPT = 2  # the step that stopped and the one before it
STACK_FRAMES = 6  # innermost frames of the main thread kept in a report


class _State:
    def __init__(self) -> None:
        self.rank: Optional[int] = None  # global
        self.pipeline_rank: Optional[int] = None
        self.pipeline_size: Optional[int] = None
        self.op: Optional[tuple] = None  # (lowering.OpIO, since: time.monotonic())
        self.waiting: Optional[tuple] = None  # (peer, peer global, what, send, op label, since)
        self.steps: collections.deque = collections.deque(maxlen=STEPS_KEPT)  # live timeline lists
        self.installed = False
        self.stopped = False  # a timeout or hang report was written: what a later signal sees is its aftermath
        self.lock = threading.Lock()


STATE = _State()


def identify(pipeline_rank: int, pipeline_size: int, global_rank: int) -> None:
    """Who this rank is (the executor, once per step); installs the signal handlers once."""
    STATE.pipeline_rank, STATE.pipeline_size, STATE.rank = pipeline_rank, pipeline_size, global_rank
    if not STATE.installed and os.environ.get(REPORT_DIR_ENV):
        _install()


def step_started(timeline: list) -> None:
    """The step's timeline list (filled by the executor as ops end): kept by reference."""
    STATE.steps.append(timeline)
    STATE.op = STATE.waiting = None


def op_started(io: Any) -> None:
    """`io`: the op's lowering.OpIO (its label is built only if a report is written)."""
    STATE.op = (io, time.monotonic())


def op_ended() -> None:
    STATE.op = None


def waiting_on(peer: int, peer_global: int, what: str, send: bool, op: str) -> None:
    STATE.waiting = (peer, peer_global, what, send, op, time.monotonic())


def wait_ended() -> None:
    STATE.waiting = None


def write_report(kind: str, message: str = "", *, waiting: Optional[tuple] = None) -> Optional[str]:
    """Write this rank's report (module doc) when $PRIMUS_HANG_REPORT_DIR is set; its path, or None.
    `waiting` overrides the recorded host wait (the GPU watchdog knows the pending work, the host does not)."""
    folder = os.environ.get(REPORT_DIR_ENV)
    if not folder or STATE.stopped:
        return None
    STATE.stopped = kind in ("timeout", "hang")
    with STATE.lock:
        report = snapshot(kind, message, waiting=waiting)
        try:
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, f"postmortem-rank{report['rank']}.json")
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(report, f)
            os.replace(path + ".tmp", path)  # a reader never sees half a report
            return path
        except OSError:
            return None


def snapshot(kind: str, message: str = "", *, waiting: Optional[tuple] = None) -> dict:
    """This rank's report as a dict: times in wall-clock seconds (comparable across hosts)."""
    mono, wall = time.monotonic(), time.time()
    shift = wall - mono
    w = waiting or STATE.waiting
    op = STATE.op
    rank = STATE.rank if STATE.rank is not None else _global_rank()
    return {"version": 1, "rank": rank, "pipeline_rank": STATE.pipeline_rank, "pipeline_size": STATE.pipeline_size,
            "host": socket.gethostname(), "pid": os.getpid(), "kind": kind, "time": wall, "message": message,
            "waiting": None if w is None else {"peer": w[0], "peer_global": w[1], "what": w[2], "send": w[3],
                                                "op": w[4], "since": w[5] + shift},
            "op": None if op is None else {"label": op[0].label(), "kind": op[0].op.kind, "mb": op[0].op.mb,
                                            "chunk": op[0].op.chunk, "stage": op[0].stage, "since": op[1] + shift},
            "stack": stack_head(), "steps": [_spans(t, shift) for t in list(STATE.steps)]}


def _spans(timeline: list, shift: float) -> list:
    out = []
    for r in list(timeline):
        try:  # on a GPU the marks are events: one that never completed has no time
            start, end = float(r.start), float(r.end)
        except Exception:
            continue
        out.append({"kind": r.op.kind, "mb": r.op.mb, "chunk": r.op.chunk, "stage": r.stage,
                    "start": start + shift, "end": end + shift})
    return out


def stack_head(frames: int = STACK_FRAMES) -> list:
    """The main thread's innermost frames, innermost first, less this module's own."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    out = []
    while frame is not None and len(out) < frames:
        code = frame.f_code
        if code.co_filename != __file__:
            out.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        frame = frame.f_back
    return out


def _global_rank() -> int:
    try:
        import torch.distributed as dist

        return dist.get_rank() if dist.is_initialized() else os.getpid()
    except Exception:
        return os.getpid()


def _install() -> None:
    """SIGUSR1 and SIGTERM handlers, and faulthandler's crash file; from the main thread only
    (Python's rule for signal handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return
    STATE.installed = True
    # SIGUSR1 also dumps every thread's stack at once (faulthandler, in C: a rank blocked in native
    # code answers too), then reaches the report handler. A faulthandler registration made before
    # ours (benchmarks/gpu_check.py's hang diagnosis) would be replaced by signal.signal, so it is
    # taken down first and put back on top, chained to ours.
    faulthandler.unregister(signal.SIGUSR1)
    signal.signal(signal.SIGUSR1, _on_request)
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=True)
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):  # a handler of the user's own stays
        signal.signal(signal.SIGTERM, _on_terminate)
    if not faulthandler.is_enabled():
        folder = os.environ[REPORT_DIR_ENV]
        try:
            os.makedirs(folder, exist_ok=True)
            crash = open(os.path.join(folder, f"crash-rank{STATE.rank}.txt"), "w")
            faulthandler.enable(file=crash, all_threads=True)
        except OSError:
            pass


def _on_request(signum: int, frame: Any) -> None:
    # run between two bytecodes of the main thread: a rank in a sleep or a Python op answers at once
    write_report("request", "asked for a report (SIGUSR1); the rank went on")


def _on_terminate(signum: int, frame: Any) -> None:
    write_report("terminated", "stopped by SIGTERM (a launcher taking the job down, or a user)")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
