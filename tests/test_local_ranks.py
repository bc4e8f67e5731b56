"""The CPU rank launcher (`runtime.local_ranks`): results by rank, and every run ends.

A worker's exception must come back naming the rank (while the other ranks are
blocked waiting on it), a rank killed without a word must come back named with
its signal (not as a timeout, nor as its peers' reset connections), and a rank that
never finishes must end the run at the time limit naming it; none may leave
processes behind.
"""
from __future__ import annotations

import os
import time

import psutil
import pytest

from primus_megatron.runtime import local_ranks, path_launcher


def _identity_body(rank: int, case: dict) -> dict:
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state

    from primus_megatron.compat import cpu

    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    return {"rank": rank, "world": dist.get_world_size(), "backend": dist.get_backend(),
            "pp_rank": parallel_state.get_pipeline_model_parallel_rank(),
            "pp_size": parallel_state.get_pipeline_model_parallel_world_size(),
            "threads": torch.get_num_threads(), "cpu_mode": cpu.is_enabled(), "sum": total.item(),
            "tensor": torch.full((3,), float(rank))}


def _fail_on_one_body(rank: int, case: dict) -> None:
    if rank == case["bad"]:
        raise ValueError(f"boom on rank {rank}")
    time.sleep(3600)  # busy elsewhere, never reporting: the launcher must kill it


def _hang_on_one_body(rank: int, case: dict) -> int:
    if rank == case["slow"]:
        time.sleep(3600)
    return rank


def _killed_on_one_body(rank: int, case: dict) -> None:
    import os
    import signal

    if rank == case["bad"]:
        os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer ends a process: no word
    time.sleep(3600)


def _children() -> set[int]:
    """Live rank processes of this test process (not multiprocessing's resource tracker, nor
    the fork server that starts the ranks and lives as long as this process)."""
    from multiprocessing import forkserver

    server = forkserver._forkserver._forkserver_pid  # its ranks share its command line: excluded by pid
    alive = []
    for p in psutil.Process().children(recursive=True):
        try:
            if (p.status() != psutil.STATUS_ZOMBIE and p.pid != server
                    and "resource_tracker" not in " ".join(p.cmdline())):
                alive.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return set(alive)


def test_results_come_back_indexed_by_rank_from_initialised_cpu_ranks():
    results = local_ranks.run_ranks(_identity_body, {"pp": 2}, 2, timeout_s=120)
    assert [r["rank"] for r in results] == [0, 1]
    assert [r["pp_rank"] for r in results] == [0, 1]
    for r in results:
        assert (r["world"], r["backend"], r["pp_size"], r["threads"], r["cpu_mode"]) == (2, "gloo", 2, 1, True)
        assert r["sum"] == 3.0  # the collective really ran across both ranks
    assert results[1]["tensor"].tolist() == [1.0, 1.0, 1.0]


@pytest.fixture
def short_grace(monkeypatch):
    """The others never report here (they sleep, or wait on the failed rank with a 300 s gloo timeout):
    1 s of local_ranks' grace for their side, not 10 s of waiting out."""
    monkeypatch.setattr(local_ranks, "REPORT_GRACE_S", 1.0)


def test_an_exception_on_one_rank_is_raised_naming_it_and_ends_the_others(short_grace):
    before = _children()
    started = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        local_ranks.run_ranks(_fail_on_one_body, {"pp": 2, "bad": 1, "gloo_timeout": 900}, 2, timeout_s=900)
    message = str(info.value)
    assert "rank 1 failed" in message and "ValueError: boom on rank 1" in message
    assert "rank 0 failed" not in message  # rank 0 never reported: killed, not blamed
    # It ends the grace (REPORT_GRACE_S) after the failure, not at the gloo or run timeout (900 s each:
    # far enough from the bound that a busy machine's slow start-up never reaches it).
    assert time.monotonic() - started < 450
    assert _children() <= before


def test_a_rank_that_never_finishes_ends_the_run_at_the_time_limit_naming_it():
    before = _children()
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"ranks \[0\] did not finish in 15 s"):
        local_ranks.run_ranks(_hang_on_one_body, {"pp": 2, "slow": 0}, 2, timeout_s=15)
    assert 15 <= time.monotonic() - started < 120
    assert _children() <= before


def test_a_rank_killed_without_a_word_is_named_with_its_signal_and_ends_the_others(short_grace):
    before = _children()
    started = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        local_ranks.run_ranks(_killed_on_one_body, {"pp": 2, "bad": 0, "gloo_timeout": 900}, 2, timeout_s=900)
    message = str(info.value)
    assert "rank 0 failed:\nits process was killed by signal 9 (SIGKILL)" in message
    assert "rank 1 failed" not in message
    assert time.monotonic() - started < 450  # found when it died, not at the run's 900 s time limit
    assert _children() <= before


def _crash_in_native_code(rank: int, case: dict) -> None:
    import ctypes

    if rank == case["bad"]:
        ctypes.string_at(0)  # reads address 0: SIGSEGV inside native code, as a crash in gloo would
    time.sleep(3600)


def test_a_rank_that_crashes_in_native_code_is_named_with_its_python_stack(short_grace):
    """A segmentation fault comes back with the frames faulthandler wrote at the crash (in the
    rank's fault file, not on a stderr a test run would capture and drop)."""
    with pytest.raises(RuntimeError) as info:
        local_ranks.run_ranks(_crash_in_native_code, {"pp": 2, "bad": 1, "gloo_timeout": 300}, 2, timeout_s=300)
    message = str(info.value)
    assert "rank 1 failed:\nits process was killed by signal 11 (SIGSEGV)" in message
    assert "faulthandler wrote:" in message and "Fatal Python error: Segmentation fault" in message
    assert "in _crash_in_native_code" in message  # the frame that crashed, by name


def _abort_after_native_words(rank: int, case: dict) -> None:
    os.write(2, f"native words from rank {rank}\n".encode())  # as gloo's enforce or the C library would
    os.abort()


def test_a_ranks_native_stderr_is_kept_in_its_own_file_when_asked(short_grace, tmp_path, monkeypatch):
    """PRIMUS_RANK_STDERR_DIR: what a rank wrote on file descriptor 2 before it died by SIGABRT is in
    its own file there (elsewhere it goes to the fork server's stderr, which a test run drops)."""
    monkeypatch.setenv(local_ranks.STDERR_DIR_ENV, str(tmp_path))
    with pytest.raises(RuntimeError) as info:
        local_ranks.run_ranks(_abort_after_native_words, {"pp": 1}, 1, timeout_s=300)
    assert "rank 0 failed:\nits process was killed by signal 6 (SIGABRT)" in str(info.value)
    files = list(tmp_path.glob("rank0-*.err"))
    assert len(files) == 1 and "native words from rank 0\n" in files[0].read_text(), files


def _imported_from(rank: int, case: dict) -> dict:
    import sys

    import probe_module_for_sys_path  # only in the directory the launch put first on the path

    return {"file": probe_module_for_sys_path.__file__, "first": sys.path[0]}


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory):
    """A directory for `sys_path` with a module found only there; its launcher ends with the module."""
    path = tmp_path_factory.mktemp("sys_path")
    (path / "probe_module_for_sys_path.py").write_text("VALUE = 1\n")
    yield path
    path_launcher.close((str(path),))


def test_ranks_launched_with_a_sys_path_import_from_it_first(probe_dir):
    """Directories in `sys_path` come first on the ranks' import path, from their start (a
    TransformerEngine stand-in must be there before megatron-core is imported)."""
    results = local_ranks.run_ranks(_imported_from, {"pp": 2}, 2, timeout_s=300, sys_path=[str(probe_dir)])
    for r in results:
        assert r["first"] == str(probe_dir) and r["file"].startswith(str(probe_dir))


def _parent_when_released(rank: int, case: dict) -> dict:
    """The rank's parent process, once the test creates case['release'] (after case['started'] is written)."""
    import os

    import probe_module_for_sys_path  # noqa: F401  (the path is first here too)

    if "started" in case:
        open(case["started"], "w").close()
        deadline = time.monotonic() + 600
        while not os.path.exists(case["release"]) and time.monotonic() < deadline:
            time.sleep(0.05)
    return {"parent": os.getppid(), "first": __import__("sys").path[0]}


def test_launches_with_a_sys_path_fork_from_one_server_and_a_busy_one_is_not_waited_for(probe_dir, tmp_path):
    """path_launcher: launches with the same `sys_path` fork their ranks from one server started with
    the path first (one import of torch and megatron-core, not one per rank); a launch while that
    launcher is busy with another thread's spawns its ranks fresh from this process instead of waiting.
    Which launch holds the launcher is fixed by the first one's rank waiting for a file."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    path = [str(probe_dir)]
    started, release = str(tmp_path / "started"), str(tmp_path / "release")
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(local_ranks.run_ranks, _parent_when_released, {"pp": 1, "started": started,
                                                                          "release": release}, 1,
                           timeout_s=600, sys_path=path)
        deadline = time.monotonic() + 600
        while not os.path.exists(started) and not held.done() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.exists(started), held.exception() if held.done() else "the held launch did not start"
        fresh = local_ranks.run_ranks(_parent_when_released, {"pp": 1}, 1, timeout_s=600, sys_path=path)
        open(release, "w").close()
        first = held.result()
    again = local_ranks.run_ranks(_parent_when_released, {"pp": 2}, 2, timeout_s=600, sys_path=path)
    assert fresh[0]["parent"] == os.getpid() and fresh[0]["first"] == str(probe_dir)
    server = first[0]["parent"]
    assert server != os.getpid() and [r["parent"] for r in again] == [server, server]
    assert all(r["first"] == str(probe_dir) for r in first + again)


def _transformer_engine_at_start(rank: int, case: dict) -> str:
    import sys

    module = sys.modules.get("transformer_engine")  # imported by megatron-core before this body ran, or not
    return getattr(module, "__file__", "")


def test_ranks_launched_with_the_te_stand_in_first_start_with_megatron_core_importing_it():
    """What `sys_path` is for: megatron-core, imported before the ranks' code runs (in their fork
    server), found the TransformerEngine stand-in there (multiprocessing ignores the path it hands a
    fork server: local_ranks.start_fork_server)."""
    import os

    standin = os.path.join(os.path.dirname(os.path.abspath(__file__)), "te_standin")
    files = local_ranks.run_ranks(_transformer_engine_at_start, {"pp": 1}, 1, timeout_s=600, sys_path=[standin])
    assert files[0].startswith(os.path.join(standin, "transformer_engine")), files


def test_two_launches_started_at_once_both_get_their_rendezvous():
    """Each launch hosts its own rendezvous store on a port the kernel picks and keeps it: two
    launches started together cannot take each other's port (a picked-then-closed port could)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        launches = [pool.submit(local_ranks.run_ranks, _identity_body, {"pp": 2}, 2, timeout_s=300) for _ in range(2)]
        results = [launch.result() for launch in launches]
    for result in results:
        assert [r["rank"] for r in result] == [0, 1] and all(r["sum"] == 3.0 for r in result)


def test_no_launcher_hands_on_a_port_it_picked_and_closed():
    """The pattern that raced (bind port 0, read the port, close, hand the number to a launcher) is
    gone from the package, the tests, the benchmarks and the scripts: rendezvous stores are held
    (local_ranks.rendezvous_store), torchrun runs --standalone or on a hosted c10d store."""
    import os
    import re

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pattern = re.compile(r"getsockname\(\)\[1\]|--master-port\b|def free_port")
    offenders = []
    for top in ("primus_megatron", "tests", "benchmarks", "scripts", "examples"):
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                path = os.path.join(folder, name)
                if name.endswith((".py", ".sh", ".sbatch")) and path != os.path.abspath(__file__):
                    with open(path, encoding="utf-8", errors="replace") as f:
                        if pattern.search(f.read()):
                            offenders.append(os.path.relpath(path, root))
    assert not offenders, f"a port picked and closed before a launcher binds it: {offenders}"
