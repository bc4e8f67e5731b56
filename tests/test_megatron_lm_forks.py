"""The tests' Megatron-LM launcher (megatron_lm_forks.py, through megatron_lm_harness.run) keeps
torchrun's contract: each rank sees torchrun's environment and runs pretrain_gpt.py as __main__,
a failing rank ends the others and gives the run its exit status, a time-out kills every rank,
and nothing is left running. On a stand-in tree whose pretrain_gpt.py does what argv says, so
these take a second, not a Megatron-LM import."""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

import megatron_lm_harness as H

FAKE = '''
import json, os, socket, sys, time
import helper_module  # imported once by the launcher; __main__ below runs per rank
if __name__ == "__main__":
    rank = int(os.environ["RANK"])
    what = sys.argv[sys.argv.index("--do") + 1]
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS", "TORCHELASTIC_USE_AGENT_STORE")
    with socket.socket() as probe:  # the rendezvous port must be held by the launcher, not merely picked
        held = probe.connect_ex(("127.0.0.1", int(os.environ["MASTER_PORT"]))) == 0
    # one write() per line: ranks share the log, and print() under -u writes the text and its
    # newline apart, so two ranks' lines could merge into one
    os.write(1, ("ENV " + json.dumps({k: os.environ.get(k) for k in keys} | {"argv0": sys.argv[0],
             "imported_once": helper_module.PID != os.getpid(), "port_held": held}) + "\\n").encode())
    if what in ("fail", "hang"):
        open(f"pid-{rank}", "w").write(str(os.getpid()))
    if what == "fail" and rank == 1:  # once the others have started and written their pids
        world = int(os.environ["WORLD_SIZE"])
        while not all(os.path.exists(f"pid-{r}") for r in range(world)):
            time.sleep(0.1)
        raise SystemExit(3)
    if what in ("fail", "hang"):
        time.sleep(1800)
'''


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "Megatron-LM-fake"
    root.mkdir()
    (root / "pretrain_gpt.py").write_text(FAKE)
    (root / "helper_module.py").write_text("import os\nPID = os.getpid()\n")
    yield str(root)
    for forks in list(H._FORKS.values()):
        forks.close()
    H._FORKS.clear()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")


def _envs(log: str) -> list:
    return sorted((json.loads(line[4:]) for line in log.splitlines() if line.startswith("ENV ")),
                  key=lambda e: int(e["RANK"]))


def _forks_of(tree):
    """The import-once process serving `tree` (keyed by tree and PYTHONPATH in the harness)."""
    (forks,) = [f for (t, _), f in H._FORKS.items() if t == tree]
    return forks


def test_each_rank_gets_torchruns_environment_and_runs_pretrain_gpt_as_main(tree):
    result = H.run(tree, 3, ["--do", "ok"], cpu_flag=False)
    envs = _envs(result.log)
    assert result.returncode == 0 and len(envs) == 3, result.log
    assert [(e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"]) for e in envs] == \
        [(str(r), str(r), "3", "3") for r in range(3)]
    assert len({e["MASTER_PORT"] for e in envs}) == 1 and envs[0]["MASTER_ADDR"] == "127.0.0.1"
    assert all(e["TORCHELASTIC_RUN_ID"] and e["OMP_NUM_THREADS"] == "1" for e in envs)
    assert all(e["argv0"] == "pretrain_gpt.py" and e["imported_once"] for e in envs)
    # the launcher hosts the rendezvous store on a port it holds, as torchrun's agent does
    assert all(e["port_held"] and e["TORCHELASTIC_USE_AGENT_STORE"] == "True" for e in envs), envs
    forks = _forks_of(tree)
    again = H.run(tree, 2, ["--do", "ok"], cpu_flag=False)  # the same import-once process serves the next run
    assert again.returncode == 0 and [e["WORLD_SIZE"] for e in _envs(again.log)] == ["2", "2"]
    assert _forks_of(tree) is forks and forks.proc.poll() is None


def test_a_failing_rank_ends_the_others_and_gives_the_run_its_status(tree):
    started = time.monotonic()
    result = H.run(tree, 3, ["--do", "fail"], cpu_flag=False, expect_ok=False, timeout=600)
    assert result.returncode == 3, result.log
    assert "rank 1 exited with 3" in result.log
    assert time.monotonic() - started < 900  # not the 1800 s the others sleep (a busy machine starts ranks late)
    pids = [int(open(os.path.join(tree, f"pid-{r}")).read()) for r in (0, 2)]
    assert not any(_alive(p) for p in pids)
    with pytest.raises(AssertionError, match="exited with 3"):
        H.run(tree, 3, ["--do", "fail"], cpu_flag=False, timeout=120)


def test_a_run_past_its_time_limit_is_killed_whole(tree):
    # On a busy machine the ranks may not have started (written their pids) when the limit ends the
    # run: the limit grows until they have, so that what is asserted (both were killed) is checked.
    for limit in (10, 40, 160):
        started = time.monotonic()
        with pytest.raises(AssertionError, match=f"did not finish in {limit} s"):
            H.run(tree, 2, ["--do", "hang"], cpu_flag=False, timeout=limit)
        assert time.monotonic() - started < limit + 50
        files = [os.path.join(tree, f"pid-{r}") for r in (0, 1)]
        if all(os.path.exists(f) for f in files):
            break
        for f in files:
            if os.path.exists(f):
                os.remove(f)
    pids = [int(open(f).read()) for f in files]
    assert not any(_alive(p) for p in pids)
    assert H.run(tree, 2, ["--do", "ok"], cpu_flag=False).returncode == 0  # the process serves the next run


def test_closing_leaves_no_process(tree):
    H.run(tree, 2, ["--do", "ok"], cpu_flag=False)
    forks = _forks_of(tree)
    pid = forks.proc.pid
    forks.close()
    assert not _alive(pid)
