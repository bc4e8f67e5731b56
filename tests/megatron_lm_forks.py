"""Launch Megatron-LM's pretrain_gpt.py for the tests, paying its imports once per session.

Importing pretrain_gpt.py costs about 9 s of CPU per rank here (torch; torch._dynamo and inductor,
through megatron's torch.compile decorators; megatron.training). Under torchrun every rank of every
launch pays it, which made these launches half the suite's time on 2 cores. This process, started
once per Megatron-LM tree (cwd), imports pretrain_gpt once. For each request it forks a launcher
(its own process group, output to the request's log) that forks the ranks: each gets the
environment torchrun gives a rank (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT,
TORCHELASTIC_RUN_ID, ...) and runs pretrain_gpt.py as __main__ with runpy: the same file and its
own code, with the modules it imports already loaded. As under torchrun, the first rank that exits
non-zero ends the others (SIGTERM, which the tests' sitecustomize turns into a stack dump, then
SIGKILL 10 s later) and the launch exits with that rank's status. Before its first request it also
imports what runs import later (the plugin's runtime) and reads Megatron-LM's argument help texts
once (`_cache_field_docstrings`): with Megatron-LM's index cache (megatron_lm_harness._data_cache) a
2-rank run's CPU went from 5.5 s to 2.5 s (2026-11-29).

Requests come one JSON object a line on stdin: {"argv": [...], "nproc": n, "env": {...}, "log": path},
and optionally "setup": {"path": dir, "module": name, "call": function, "args": [...]}, a test-only
function each rank calls after its environment is set and before pretrain_gpt.py runs (e.g.
tests/fp8_breakages.py breaking the runtime on purpose in that launch alone).
Replies, one JSON object a line on the descriptor that was stdout: {"pid": launcher pid} at once,
then {"code": exit status} when the launch has ended (negative: killed by that signal).
"""
from __future__ import annotations

import atexit
import gc
import inspect
import json
import os
import runpy
import signal
import sys
import traceback

_GRACE_S = 10  # from SIGTERM to SIGKILL for the ranks left when one fails (torchrun waits too)


def _agent_store():
    """The rendezvous store, hosted by the launcher as torchrun's agent hosts it: bound to a port
    the kernel picks and held for the run, so no other process can take the port between picking
    it and rank 0 binding it (a picked-then-closed port once failed a run: address already in use).
    The ranks connect as clients (TORCHELASTIC_USE_AGENT_STORE, torch.distributed.rendezvous)."""
    from primus_megatron.runtime.local_ranks import rendezvous_store

    return rendezvous_store()


def _setup(setup: dict) -> None:
    """A request's test-only setup, in the rank (forked: nothing reaches the import-once process)."""
    import importlib

    sys.path.insert(0, setup["path"])
    getattr(importlib.import_module(setup["module"]), setup["call"])(*setup.get("args", []))


# What a run imports after pretrain_gpt's own imports (the plugin when it installs and builds its
# runner; Megatron-LM's tokenizer, checkpointing and schedule modules, imported where used): about
# 0.5 s of CPU per rank. Only imports, as runtime/rank_preload.py; none that a run's options decide
# (the TransformerEngine stand-in is on the path of a process of its own). Megatron's are optional:
# the tags differ in what they have.
_RUN_IMPORTS = ("primus_megatron.compat.cpu", "primus_megatron.compat.cpu_training",
                "primus_megatron.compat.cpu_combined", "primus_megatron.compat.checkpoint_writer",
                "primus_megatron.compat.attention_env", "primus_megatron.compat.primus_engines",
                "primus_megatron.megatron_lm.post_validation", "primus_megatron.optim",
                "primus_megatron.runtime.forward_backward", "primus_megatron.runtime.te_wgrad",
                "primus_megatron.runtime.loss_handover", "primus_megatron.runtime.profiler",
                "primus_megatron.runtime.local_ranks", "primus_megatron.unsupported")
_MEGATRON_RUN_IMPORTS = ("megatron.core.tokenizers.text.models",
                         "megatron.core.dist_checkpointing.strategies.state_dict_saver",
                         "megatron.core.models.gpt.fine_grained_callables",
                         "megatron.core.pipeline_parallel.bridge_communicator",
                         "megatron.core.pipeline_parallel.multimodule_communicator")


def _import_what_runs_import() -> None:
    import importlib

    for name in _RUN_IMPORTS:
        importlib.import_module(name)
    for name in _MEGATRON_RUN_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    from primus_megatron.schedules import registry

    registry.names()  # imports the built-in schedules' modules (each registers itself)


def _cache_field_docstrings() -> None:
    """Megatron-LM builds part of its argument parser from its config dataclasses (TransformerConfig
    and others), reading each field's docstring, the help text, out of the class's source with inspect
    and ast (argument_utils.ArgumentGroupFactory._get_field_docstrings, core_v0.16.1 and core_v0.19.0);
    a rank parses its arguments three times (in-process restart's wrapper, fault tolerance's setup,
    initialize_megatron), about 40% of a tiny run's time per rank under cProfile. The docstrings depend on the
    source alone: read once here, the forked ranks inherit them. The parser and the arguments are
    Megatron-LM's own (a copy of the cached dict per call, as the original returns a new one)."""
    try:
        from megatron.training.argument_utils import ArgumentGroupFactory
    except ImportError:  # a Megatron-LM without config-built arguments
        return
    original = ArgumentGroupFactory._get_field_docstrings
    cache: dict = {}

    def cached(self, src_cfg_class):
        if src_cfg_class not in cache:
            cache[src_cfg_class] = original(self, src_cfg_class)
        return dict(cache[src_cfg_class])

    ArgumentGroupFactory._get_field_docstrings = cached
    import argparse

    from megatron.training.arguments import add_megatron_arguments

    try:  # fills the cache; a parser this tag cannot build here is built by the ranks (and cached there)
        add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    except Exception:  # noqa: BLE001
        pass


def _rank(rank: int, nproc: int, port: int, argv: list, env: dict, setup: dict = None) -> None:
    """One rank: torchrun's environment, pretrain_gpt.py as __main__, then the interpreter's own
    exit steps (atexit) and the exit status a plain `python pretrain_gpt.py` would have."""
    os.environ.clear()
    os.environ.update(env)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", ROLE_RANK=str(rank),
                      WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc), ROLE_WORLD_SIZE=str(nproc),
                      GROUP_WORLD_SIZE="1", ROLE_NAME="default", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      TORCHELASTIC_RUN_ID="primus-tests", TORCHELASTIC_RESTART_COUNT="0",
                      TORCHELASTIC_MAX_RESTARTS="0", TORCHELASTIC_USE_AGENT_STORE="True")
    sys.argv = ["pretrain_gpt.py", *argv]
    # every rank writes to the one log: block-buffered stdout flushes mid-line and another rank's text
    # lands inside a line ("True" + "WARNING: ..." on a busy machine); a line per write keeps lines whole
    sys.stdout.reconfigure(line_buffering=True)
    code = 0
    try:
        if setup:
            _setup(setup)
        runpy.run_path("pretrain_gpt.py", run_name="__main__")
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _launch(request: dict) -> None:
    """The launcher: its own process group (the harness kills it whole on a time-out), output to
    the request's log, one child per rank, torchrun's rule for a failing rank."""
    os.setsid()
    fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    store = _agent_store()  # noqa: F841  (held open until the launcher exits)
    nproc, port = request["nproc"], store.port
    ranks = {}
    for rank in range(nproc):
        pid = os.fork()
        if pid == 0:
            _rank(rank, nproc, port, request["argv"], request["env"], request.get("setup"))
        ranks[pid] = rank

    def kill_rest(*_):
        for pid in ranks:
            os.kill(pid, signal.SIGKILL)

    signal.signal(signal.SIGALRM, kill_rest)  # also how the harness ends a launch past its time limit
    code = 0
    while ranks:
        try:
            pid, status = os.wait()
        except InterruptedError:
            continue
        rank, rc = ranks.pop(pid), os.waitstatus_to_exitcode(status)
        if rc != 0 and code == 0:
            code = rc if rc > 0 else 128 - rc
            print(f"[launcher] rank {rank} exited with {rc}; stopping the other ranks", file=sys.stderr, flush=True)
            for other in ranks:
                os.kill(other, signal.SIGTERM)
            signal.alarm(_GRACE_S)
    os._exit(code)


def _skip_library_teardown_at_exit() -> None:
    """The operator libraries imported so far (torch's, megatron's and TE's custom ops: about 190) are
    not deregistered one by one when a rank exits (weakref finalizers that atexit runs): the process is
    ending and its registrations end with it. In a forked rank that teardown writes to dispatcher tables
    shared with this process, page by page; skipping it, test_megatron_lm_te.py and _mtp.py took 5% less
    CPU (69 against 73 s, 2026-11-29). Finalizers a run adds still run. The finalizers are found in
    CPython's own registry of them (`weakref.finalize._registry`, there since 3.4); without one, nothing
    changes."""
    import weakref

    import torch.library

    for fin, info in list(getattr(weakref.finalize, "_registry", {}).items()):
        if getattr(info, "func", None) is torch.library._del_library:
            fin.atexit = False


def main() -> None:
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what pretrain_gpt's imports print must not reach the replies
    sys.path.insert(0, os.getcwd())
    import pretrain_gpt  # noqa: F401  (the imports, once: what this process is for)

    if "megatron.training" in sys.modules:  # Megatron-LM's pretrain_gpt.py (the tests' stand-in imports none)
        _import_what_runs_import()
        _cache_field_docstrings()
    # Megatron's rerun state machine names the caller of every validate_result through inspect.getframeinfo,
    # whose first call in a process takes every loaded module's real path (about 3,000 here): taken once,
    # the ranks inherit inspect's caches
    inspect.getframeinfo(sys._getframe())
    _skip_library_teardown_at_exit()
    gc.freeze()  # what the ranks inherit stays out of their collections (runtime/rank_preload.py)

    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                _launch(request)
            except BaseException:
                traceback.print_exc()
                os._exit(1)
        replies.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n")


if __name__ == "__main__":
    main()
