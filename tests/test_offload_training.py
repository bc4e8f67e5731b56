"""examples/pretrain_gpt.py with --pipeline-offload (issue 32): training with every F's activations
offloaded gives the losses of the run without it bit for bit (dropout on), and a checkpoint saved
with offload resumes, with offload chosen by the planner, to the uninterrupted run's losses."""
from __future__ import annotations

import os

import pytest

import megatron_reference as ref
import pipeline_harness as H
from test_training import dataset, model_args  # noqa: F401  (the module's fixture and arguments)

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")


def test_offload_trains_identically_and_checkpoints_resume(dataset, tmp_path):  # noqa: F811
    save = str(tmp_path / "ckpt")
    common = ["--train-iters", "4", "--pipeline-schedule", "zbv", "--hidden-dropout", "0.1"]
    runs = [model_args(dataset, 2, *common),
            model_args(dataset, 2, *common, "--pipeline-offload", "all", "--save", save, "--save-interval", "2"),
            model_args(dataset, 2, *common, "--pipeline-offload", "auto", "--pipeline-memory-limit", "2",
                       "--pipeline-offload-bandwidth", "4", "--load", save, "--ckpt-step", "2")]
    results = H.run_ranks({"body": H.train_body, "pp": 2, "no_subprocesses": True, "runs": runs}, 2, timeout_s=900)
    plain, offloaded, resumed = results[0]
    assert sorted(os.listdir(save)) == ["iter_0000002", "iter_0000004", "latest_checkpointed_iteration.txt"]
    assert offloaded["losses"] == plain["losses"]  # bitwise
    assert resumed["start_iteration"] == 2
    assert resumed["losses"] == plain["losses"][2:]
