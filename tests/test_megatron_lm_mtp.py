"""Megatron-LM's own pretrain_gpt.py with multi-token prediction (`--mtp-num-layers 1`, DeepSeek-V3's MTP)
under our schedules on CPU ranks (issue 57), against megatron's own 1F1B on the same configuration.

megatron-core's MTP block sits on the loss stage: megatron's 1F1B puts it on the last pipeline rank with a
copy of the word embedding (kept equal to the first stage's through the embedding group); under zbv and
dualpipev the loss stage is rank 0's second chunk, whose MTP layer reads chunk 0's embedding itself
(runtime/mtp.py), and the MTP losses megatron tracks there are handed to the last pipeline rank, where
Megatron-LM logs them ("mtp_1 loss" in every iteration's line). pp=2, 4 microbatches, untied embeddings
(DeepSeek-V3's; Megatron-LM core_v0.16.1 cannot checkpoint MTP with tied embeddings at pp > 1: its
tie_embeddings_and_output_weights_state_dict asserts on the MTP stage's output layer weight) and RoPE (the
MTP stage's embedding copy has a learned position table of its own that nothing synchronises). Every run
loads one start (Megatron-LM's initialisation depends on the placement); zbv's checkpoint of iteration 2
resumes under megatron's own 1F1B with its numbers.

What must hold: every number Megatron-LM logs (lm loss, mtp_1 loss and grad norm of every iteration; the
validation and test losses) is identical, as printed, to megatron's own 1F1B's, on both tags (core_v0.16.1
and core_v0.19.0, whose GPTModel asks `mtp_on_this_rank` where its MTP block goes).
"""
from __future__ import annotations

import functools

import pytest

import megatron_lm_harness as H

pytestmark = pytest.mark.megatron_lm

ITERS = 3
ARGS = ["--pipeline-model-parallel-size", "2", "--global-batch-size", "8", *H.EVAL_AFTER_TRAINING,
        "--mtp-num-layers", "1", "--untie-embeddings-and-output-weights", "--position-embedding-type", "rope"]
FIXED = ["--pipeline-profile-steps", "0"]  # equal-cost plans: the numbers cannot depend on a measured plan
# loop placement; V. dualpipev places MTP as zbv does (the loss stage on rank 0's second chunk) and ran here until
# 2026-11-29; the MTP rows of test_runtime_parity.py and the production matrix run it (docs/configurations.md)
SCHEDULES = ["zb-h1", "zbv"]


@pytest.fixture(scope="module")
def runs(megatron_lm_tree, tmp_path_factory):
    tree, work = megatron_lm_tree, tmp_path_factory.mktemp("megatron-lm-mtp")

    start = functools.lru_cache(maxsize=None)(lambda: H.save_start(tree, 2, ARGS, str(work / "start")))

    @functools.lru_cache(maxsize=None)
    def run(schedule, resume=False):
        """`schedule` (None: megatron's own) from the start; zbv saves at iteration 2 (and at the end).
        `resume`: megatron's own from zbv's iteration 2 instead."""
        if resume:
            run("zbv")
            return H.run(tree, 2, ARGS + ["--train-iters", str(ITERS), "--load", str(work / "zbv"), "--ckpt-step", "2"])
        args = ARGS + ["--train-iters", str(ITERS), "--load", start(), "--finetune"]
        if schedule == "zbv":
            args += ["--save", str(work / "zbv"), "--save-interval", "2"]
        return H.run(tree, 2, args + (["--pipeline-schedule", schedule, *FIXED] if schedule else []))

    return run


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_mtp_trains_exactly_as_megatron(runs, schedule):
    own, ours = runs(None), runs(schedule)
    for result in (own, ours):
        assert sorted(result.losses) == list(range(1, ITERS + 1)), H.tail(result.log)
        assert H.arg(result, "mtp_num_layers") == "1" and H.arg(result, "untie_embeddings_and_output_weights") == "True"
        # the MTP loss is logged in every iteration (under V: handed from pipeline rank 0 to the last)
        assert all("mtp_1 loss" in result.aux_losses.get(i, {}) for i in range(1, ITERS + 1)), H.tail(result.log)
    assert {w for _, w in ours.validation} >= {"validation set", "test set"}, H.tail(ours.log)
    if schedule != "zb-h1":
        assert H.arg(ours, "virtual_pipeline_model_parallel_size") == "2"
    assert ours.numbers() == own.numbers()
    assert len({ours.losses[1], ours.losses[ITERS]}) == 2, "the loss did not change while training"


def test_a_checkpoint_saved_under_v_resumes_under_megatrons_1f1b(runs):
    """zbv's checkpoint of iteration 2 (rank 0's chunk 0 saves the one embedding; its MTP chunk saves no
    copy of it) loaded by megatron's own 1F1B (whose MTP stage takes the embedding from it again): the
    rest of the run logs megatron's own numbers."""
    own, resumed = runs(None), runs(None, resume=True)
    assert sorted(resumed.losses) == [ITERS], H.tail(resumed.log)
    assert resumed.numbers() == own.numbers(iterations=[ITERS])
