"""Faults a training job survives, or reports precisely, through examples/pretrain_gpt.py.

* A rank SIGKILLed in the middle of a step (torchrun, 2 "nodes" x 2 CPU ranks, pp=4,
  zbv, --pipeline-p2p-timeout 5): the ranks on the other node are not stopped by
  their launcher, so they must notice on their own: each prints the p2p
  diagnosis (its rank, the op, microbatch, chunk and stage, the peer) and every
  rank exits non-zero, long before the 10-minute collective timeout.
* That job died after iteration 4's checkpoint, during iteration 5; its
  iteration 4 is made a half-written save by hand (the directory an interrupted
  save leaves, without the metadata written last), the tracker still naming it.
  `--load` skips it, resumes from iteration 2 and reproduces, loss for loss,
  iterations 3 and 4 as the job ran them before it was killed (4 also shows the
  optimizer's state restored: its loss follows step 3). The job's own iterations
  are the reference: no second, uninterrupted launch is needed. What that gives up
  (2026-11-29): iteration 4 is the only one after the resume that shows the
  optimizer's and the scheduler's state (it was 4 to 6), and the resumed launch
  ends on its NaN, so a resumed job running to the end and exiting 0 is shown by
  test_training.py's and test_uneven_split.py's resume tests, not here.
* Which checkpoint `--load` takes, at unit level (complete, interrupted, missing).
* A NaN/inf loss stops training with the iteration and the pipeline stage (and
  rank) that produced it; --no-check-for-nan-in-loss keeps going. Through
  pretrain_gpt.py it is the resumed job's launch that shows it (a NaN injected at
  its last iteration): one launch of 4 ranks for both, not a launch of its own.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

import megatron_reference as ref
from primus_megatron.runtime import local_ranks
import pipeline_harness as H

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "pretrain_gpt.py")
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
LOG = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*?\| lm loss: (\S+) \|")
# what a surviving rank must say (runtime/p2p.py's PipelineTimeout, printed by pretrain_gpt.py's main)
DIAGNOSIS = re.compile(r"pretrain_gpt\.py: error \(rank (\d)\): pipeline rank (\d) \(global \d\) [^\n]*?op "
                       r"([FBW]\d+(?:\.\d)?) \(microbatch (\d+), chunk (\d), stage (\d)\)[^\n]*? (?:receive|send) of "
                       r"\S+ mb\d+ stage \d->\d (?:from|to) pipeline rank (\d)")


def _env():
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT, PYTHONWARNINGS="ignore")


def _args(dataset, save, *extra, pp=4, schedule="zbv", iters=5):
    return ["--cpu", "--data-path", dataset, "--data-cache-path", os.path.join(os.path.dirname(dataset), "cache"),
            "--num-layers", "8", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "32",
            "--micro-batch-size", "2", "--global-batch-size", "8", "--lr", "2e-3", "--seed", "11",
            "--train-iters", str(iters), "--pipeline-model-parallel-size", str(pp), "--pipeline-schedule", schedule,
            "--save", save, "--save-interval", "2",
            # one plan for every launch: a plan from measured costs can differ between the killed and the
            # resumed launch, and with it the last bits of the tied embedding's gradient (docs/schedules.md)
            "--pipeline-profile-steps", "0", *extra]


class _Run:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _launch(cmd, log_dir, name):
    """Start `cmd` with output to files and a marker in its environment: a SIGKILLed rank leaves
    megatron's checkpoint-writer process (a multiprocessing Manager, in the rank's own session)
    behind, holding any pipe open; _finish ends this run's leftovers by their marker."""
    out, err = open(os.path.join(log_dir, name + ".out"), "w+"), open(os.path.join(log_dir, name + ".err"), "w+")
    marker = f"{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=dict(_env(), PRIMUS_TEST_RUN=marker))
    return proc, out, err, marker


def _reap(marker: str) -> None:
    """SIGKILL every process whose environment carries this run's marker (its descendants only)."""
    needle = f"PRIMUS_TEST_RUN={marker}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    os.kill(int(pid), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


def _finish(launched, timeout):
    proc, out, err, marker = launched
    try:
        proc.wait(timeout=timeout)
    finally:
        _reap(marker)  # this run's leftovers (and the whole run on timeout)
        proc.wait()
    out.seek(0)
    err.seek(0)
    run = _Run(proc.returncode, out.read(), err.read())
    out.close()
    err.close()
    return run


def _torchrun(argv, log_dir, nproc=4, timeout=300):
    return _finish(_launch([TORCHRUN, "--standalone", "--nproc-per-node", str(nproc), SCRIPT, *argv], log_dir,
                           "torchrun"), timeout)


def _losses(stdout: str) -> dict[int, str]:
    return {int(i): loss for i, loss in LOG.findall(stdout)}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from primus_megatron.train.data import build_corpus_dataset

    prefix = str(tmp_path_factory.mktemp("data") / "corpus_text_document")
    build_corpus_dataset(prefix)
    return prefix


@pytest.fixture(scope="module")
def killed(dataset, tmp_path_factory):
    """Two torchrun agents on this machine ("nodes" 0 and 1, 2 ranks each); global rank 2
    (node 1) SIGKILLs itself during its second forward op of iteration 5."""
    save = str(tmp_path_factory.mktemp("killed") / "ckpt")
    argv = _args(dataset, save, "--pipeline-p2p-timeout", "5", "--inject-kill-at", "5", "--inject-kill-rank", "2")
    # the c10d rendezvous on a store this process hosts (both agents its clients): no port is picked,
    # closed and handed on; the workers share the store the node of rank 0 hosts on a kernel-picked port
    store = local_ranks.rendezvous_store(2)
    started = time.monotonic()
    logs = str(tmp_path_factory.mktemp("killed-logs"))
    launched = [_launch([TORCHRUN, "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "2",
                         "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{store.port}",
                         "--rdzv-id", "killed", "--rdzv-conf", "is_host=false", SCRIPT, *argv], logs, f"node{node}")
                for node in (0, 1)]
    runs = [_finish(item, 300) for item in launched]
    return {"save": save, "codes": [r.returncode for r in runs], "stdout": [r.stdout for r in runs],
            "stderr": [r.stderr for r in runs], "elapsed": time.monotonic() - started}


def test_a_rank_killed_mid_step_is_diagnosed_by_the_survivors_and_every_rank_exits_nonzero(killed):
    node0, node1 = killed["stderr"]
    assert killed["codes"][0] != 0 and killed["codes"][1] != 0, killed["codes"]
    # torchrun's summaries: every global rank failed, rank 2 by SIGKILL
    exits = {}
    for text in (node0, node1):
        for rank, code in re.findall(r"rank\s+: (\d) \(local_rank: \d\)\s+exitcode\s+: (-?\d+)", text):
            exits[int(rank)] = int(code)
    assert sorted(exits) == [0, 1, 2, 3] and all(code != 0 for code in exits.values()), exits
    assert exits[2] == -9
    # the survivors on node 0 diagnose on their own: rank 1 waited for the dead rank 2 (rank 0 may be
    # stopped by its launcher once rank 1 has failed, but says what it waited for if it gets there)
    found = {int(m.group(1)): m for m in DIAGNOSIS.finditer(node0 + node1)}
    assert 1 in found, (node0 + node1)[-3000:]
    rank, pipeline_rank, op, mb, chunk, stage, peer = found[1].groups()
    assert pipeline_rank == "1" and peer == "2"
    assert op.startswith("F") and int(chunk) == (1 if op.endswith(".1") else 0)
    assert int(stage) == (6 if chunk == "1" else 1)  # zbv at pp=4: rank 1 holds stages 1 and 6
    assert 'File "' + os.path.join(ROOT, "primus_megatron") not in node0 + node1  # one line per rank, no traceback
    assert killed["elapsed"] < 240, "no rank waited for the 10-minute collective timeout"


@pytest.fixture(scope="module")
def resumed(killed, dataset):
    """The killed job's checkpoints as it left them, then its iteration 4 save cut short by hand (as an
    interrupted save leaves it: the directory's temporary name, without the metadata written last; the
    tracker still names it), and the job launched again with --load and a NaN loss at its last iteration."""
    save = killed["save"]
    left = sorted(os.listdir(save))
    with open(os.path.join(save, "latest_checkpointed_iteration.txt")) as f:
        tracker = f.read().strip()
    if "iter_0000004" in left:
        os.rename(os.path.join(save, "iter_0000004"), os.path.join(save, "iter_0000004.partial"))
        os.remove(os.path.join(save, "iter_0000004.partial", "primus_meta.json"))
    # saving every iteration: iteration 5, whose loss is NaN, is then a scheduled save that must not happen
    out = _torchrun(_args(dataset, save, "--load", save, "--inject-nan-loss-at", "5", "--save-interval", "1"),
                    os.path.dirname(save))
    return {"left": left, "tracker": tracker, "out": out, "after": sorted(os.listdir(save))}


def test_the_killed_job_resumes_from_its_last_complete_checkpoint_and_matches_its_own_iterations(killed, resumed):
    save = killed["save"]
    before = _losses("".join(killed["stdout"]))  # the c10d rendezvous may give either agent global rank 0
    assert sorted(before) == [1, 2, 3, 4], before  # killed during iteration 5
    assert resumed["left"] == ["iter_0000002", "iter_0000004", "latest_checkpointed_iteration.txt"]
    assert resumed["tracker"] == "4"
    out = resumed["out"]
    assert "iteration 4, whose checkpoint is missing or incomplete" in out.stdout
    assert "interrupted save(s): iter_0000004.partial; loading the newest complete checkpoint, iteration 2" \
        in out.stdout
    assert f"loaded checkpoint {save}/iter_0000002" in out.stdout
    again = _losses(out.stdout)
    assert sorted(again) == [3, 4], (again, out.stderr[-3000:])  # 5: the injected NaN (the next test)
    assert again == {i: before[i] for i in (3, 4)}, (again, before)
    # the interrupted save replaced by the resumed run's own iteration 4 (and its iteration 3 saved: interval 1)
    assert resumed["after"] == ["iter_0000002", "iter_0000003", "iter_0000004", "latest_checkpointed_iteration.txt"]


# -- which checkpoint --load takes -------------------------------------------------------------------

def _fake_checkpoint(root, iteration, *, complete=True, partial=False):
    path = os.path.join(root, f"iter_{iteration:07d}" + (".partial" if partial else ""))
    os.makedirs(path)
    open(os.path.join(path, "shard.distcp"), "w").close()
    if complete and not partial:
        open(os.path.join(path, "primus_meta.json"), "w").close()


def _tracker(root, text):
    with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(text)


def test_load_takes_the_trackers_checkpoint_when_it_is_complete(tmp_path):
    from primus_megatron.train.checkpoint import latest

    _fake_checkpoint(tmp_path, 2)
    _fake_checkpoint(tmp_path, 4)
    _tracker(tmp_path, "4")
    heard = []
    assert latest(str(tmp_path), log=heard.append) == (4, os.path.join(tmp_path, "iter_0000004"))
    assert heard == []
    assert latest(str(tmp_path), step=2) == (2, os.path.join(tmp_path, "iter_0000002"))


@pytest.mark.parametrize("damage", ["partial directory", "missing directory", "no metadata", "unreadable tracker"])
def test_load_never_takes_an_incomplete_checkpoint(tmp_path, damage):
    from primus_megatron.train.checkpoint import latest

    _fake_checkpoint(tmp_path, 2)
    _fake_checkpoint(tmp_path, 3)
    if damage == "partial directory":
        _fake_checkpoint(tmp_path, 4, partial=True)
    elif damage == "no metadata":
        _fake_checkpoint(tmp_path, 4, complete=False)
    _tracker(tmp_path, "garbage" if damage == "unreadable tracker" else "4")
    heard = []
    assert latest(str(tmp_path), log=heard.append) == (3, os.path.join(tmp_path, "iter_0000003"))
    assert len(heard) == 1 and "loading the newest complete checkpoint, iteration 3" in heard[0], heard
    if damage != "unreadable tracker":
        assert "names iteration 4, whose checkpoint is missing or incomplete" in heard[0]


def test_load_says_clearly_when_no_checkpoint_is_complete(tmp_path):
    from primus_megatron.train.checkpoint import CheckpointError, latest

    assert latest(str(tmp_path)) is None  # an empty directory: nothing to say, train from scratch
    _fake_checkpoint(tmp_path, 2, partial=True)
    _tracker(tmp_path, "2")
    heard = []
    assert latest(str(tmp_path), log=heard.append) is None
    assert heard and "has no complete checkpoint" in heard[0] and "iter_0000002.partial" in heard[0] \
        and "training from scratch" in heard[0], heard
    with pytest.raises(CheckpointError, match=r"--ckpt-step 2: .*iter_0000002 is not a complete checkpoint "
                                              r"\(an interrupted save\)"):
        latest(str(tmp_path), step=2)


# -- NaN/inf loss --------------------------------------------------------------------------------------

def test_a_nan_loss_stops_the_run_naming_iteration_stage_and_rank(resumed):
    """The resumed job (zbv at pp=4) with a NaN loss injected at its last iteration, 5: the loss is computed
    on stage 7, which rank 0 holds. That run saves every iteration, and a run's last one is saved when it
    ends too: iteration 5 is neither (the NaN check comes before the scheduled save and the final one)."""
    out = resumed["out"]
    assert out.returncode != 0
    lines = [line for line in out.stderr.splitlines() if "NaN/inf loss" in line]
    assert lines == ["pretrain_gpt.py: error (rank 0): NaN/inf loss at iteration 5 (computed on pipeline stage 7, "
                     "rank 0)"], out.stderr[-3000:]
    assert 5 not in _losses(out.stdout)  # iteration 5 is not logged as if it were fine
    assert "iter_0000005" not in resumed["after"] and "iter_0000005.partial" not in resumed["after"], resumed["after"]


def nan_body(rank, world_case):
    """examples/pretrain_gpt.py's train() with its checks configured, for each argv; a NaN made
    in one layer's output (by patching TransformerLayer.forward) where the case says so."""
    import torch
    from megatron.core.transformer.transformer_layer import TransformerLayer

    from primus_megatron.train import pretrain
    from primus_megatron.train.arguments import parse_run
    from primus_megatron.train.forward_step import NonFiniteLoss

    original = TransformerLayer.forward
    out = []
    for argv, poison in world_case["runs"]:
        running = [0]  # the iteration in progress (0-based): the next after each optimizer step

        def forward(self, *a, _poison=poison, **k):
            result = original(self, *a, **k)
            if _poison and self.layer_number == _poison[0] and running[0] + 1 == _poison[1] \
                    and torch.is_grad_enabled():
                return (result[0] * float("nan"),) + tuple(result[1:])
            return result

        TransformerLayer.forward = forward
        try:
            args, spec = parse_run(argv, world_size=2)
            probe = pretrain.Probe(on_iteration=lambda iteration, *_: running.__setitem__(0, iteration + 1))
            out.append({"losses": pretrain.train(args, spec, probe=probe)["losses"]})
        except NonFiniteLoss as exc:
            out.append({"error": str(exc)})
        finally:
            TransformerLayer.forward = original
    return out


def test_the_stage_named_is_the_first_whose_output_was_not_finite_and_the_check_can_be_disabled(dataset, tmp_path):
    def run(schedule, *extra):
        return ["--cpu", "--data-path", dataset, "--num-layers", "4", "--hidden-size", "32", "--num-attention-heads",
                "4", "--seq-length", "32", "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "3",
                "--pipeline-model-parallel-size", "2", "--pipeline-schedule", schedule,
                "--pipeline-p2p-timeout", "60", *extra]

    runs = [(run("zbv"), (2, 2)),  # layer 2 is stage 1 of the V, on rank 1; the loss is on stage 3 (rank 0)
            (run("zb-h1", "--inject-nan-loss-at", "2"), None),  # loop placement: loss stage 1 on rank 1
            (run("zbv", "--inject-nan-loss-at", "2", "--no-check-for-nan-in-loss"), None)]
    results = H.run_ranks({"body": nan_body, "pp": 2, "runs": runs}, 2, timeout_s=300)
    for res in results:  # every rank stops (or goes on) together
        assert res[0] == {"error": "NaN/inf loss at iteration 2 (computed on pipeline stage 1, rank 1)"}, res[0]
        assert res[1] == {"error": "NaN/inf loss at iteration 2 (computed on pipeline stage 1, rank 1)"}, res[1]
        losses = res[2]["losses"]
        assert len(losses) == 3 and losses[1] != losses[1] and losses[0] == losses[0], losses
