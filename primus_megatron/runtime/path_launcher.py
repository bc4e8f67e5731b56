"""Launches of local ranks with directories first on their import path (`local_ranks.run_ranks(...,
sys_path=...)`), from one launcher process per path, kept for the launching process's lifetime.

Such ranks cannot fork from local_ranks' fork server, whose imports were made without those
directories (a TransformerEngine stand-in must come first before megatron-core is imported). Spawned
fresh, each rank imported torch and megatron-core itself: 6-9 s of CPU per rank and launch. Instead
the first launch with a path spawns a launcher with that path first; it runs every launch of that
path with a fork server of its own, started with the path and importing `rank_preload` once, so
later ranks of the path fork with everything imported, as other ranks do. The launcher imports
neither the ranks' function nor their results: both travel pickled (`local_ranks.run_payload`).
Each launch takes the caller's environment and import path of the moment (a launch spawned fresh
did too). One launch at a time per launcher: a launch from another thread while it is busy has its
ranks spawned fresh (`launch` returns None), so launches never wait on each other.
"""
from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from typing import Optional

_LAUNCHERS: dict = {}  # sys_path -> _Launcher
_LOCK = threading.Lock()
MARGIN_S = 120.0  # past a launch's own time limit (the launcher enforces it): the launcher is stuck


class LauncherDied(RuntimeError):
    """The launcher process ended or stopped answering during a launch."""


class _Launcher:
    def __init__(self, sys_path: tuple):
        import multiprocessing as mp
        import multiprocessing.util  # noqa: F401  (its exit hook joins children: registered before ours)

        _register_exit_hook()
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.busy = threading.Lock()
        saved = list(sys.path)
        sys.path[:0] = [p for p in sys_path if p not in sys.path]  # the launcher's own path, and its server's
        try:  # not daemonic: it starts processes (ended at exit by `close_all`)
            self.proc = ctx.Process(target=_serve, args=(child,), name="primus-rank-launcher")
            self.proc.start()
        finally:
            sys.path[:] = saved
        child.close()

    def launch(self, request: tuple, timeout_s: float) -> tuple:
        """("ok", results) or ("error", the exception the launch raised)."""
        self.conn.send(request)
        if not self.conn.poll(timeout_s + MARGIN_S):
            raise LauncherDied(f"the rank launcher did not answer in {timeout_s + MARGIN_S:g} s (stopped)")
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(5)
            raise LauncherDied(f"the rank launcher ended during a launch (exit code {self.proc.exitcode})") from None

    def close(self) -> None:
        """End the launcher and what it started (its process group: its fork server and ranks)."""
        self.conn.close()
        self.proc.join(10)
        if self.proc.is_alive():
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.join(5)


def launch(sys_path: tuple, payload: bytes, world: int, timeout_s: float, pin: bool) -> Optional[list]:
    """The ranks' results (bytes, as `local_ranks.run_payload`) of a launch through `sys_path`'s
    launcher, or None when it is busy with a launch from another thread."""
    with _LOCK:
        launcher = _LAUNCHERS.get(sys_path)
        if launcher is None or not launcher.proc.is_alive():
            launcher = _LAUNCHERS[sys_path] = _Launcher(sys_path)
    if not launcher.busy.acquire(blocking=False):
        return None
    try:
        status, value = launcher.launch((list(sys.path), dict(os.environ), payload, world, timeout_s, pin,
                                         sys_path), timeout_s)
    except BaseException:  # no answer, or interrupted while waiting for one: a reply may still come
        with _LOCK:
            if _LAUNCHERS.get(sys_path) is launcher:
                del _LAUNCHERS[sys_path]
        launcher.close()
        raise
    finally:
        launcher.busy.release()
    if status == "error":
        raise value
    return value


def _serve(conn) -> None:
    """The launcher: one launch per request until its caller closes the pipe. Its own process
    group, so that a stuck launcher is ended with everything it started."""
    from . import local_ranks

    os.setpgid(0, 0)
    while True:
        try:
            path, env, payload, world, timeout_s, pin, sys_path = conn.recv()
        except (EOFError, OSError):
            return
        sys.path[:] = list(sys_path) + [p for p in path if p not in sys_path]
        os.environ.clear()
        os.environ.update(env)
        try:
            local_ranks.start_fork_server(sys_path)  # at the first launch: it imports with the path first
            reply = ("ok", local_ranks.run_payload(payload, world, timeout_s=timeout_s, pin=pin, sys_path=sys_path))
        except Exception as exc:  # RuntimeError / TimeoutError naming the ranks: the caller raises it
            reply = ("error", exc)
        conn.send(reply)


_REGISTERED = []


def _register_exit_hook() -> None:
    """Once, after multiprocessing's own (exit hooks run last-registered first): the launchers must
    end before multiprocessing joins its non-daemonic children, or it would wait for them forever."""
    if not _REGISTERED:
        atexit.register(close_all)
        _REGISTERED.append(True)


def close(sys_path: tuple) -> None:
    """End `sys_path`'s launcher, if there is one (as at exit)."""
    with _LOCK:
        launcher = _LAUNCHERS.pop(tuple(sys_path), None)
    if launcher is not None:
        launcher.close()


def close_all() -> None:
    """End every launcher (at exit, or when a caller is done with them): each ends when its pipe closes."""
    for launcher in list(_LAUNCHERS.values()):
        launcher.close()
    _LAUNCHERS.clear()
