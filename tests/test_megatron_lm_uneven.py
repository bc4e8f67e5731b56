"""Megatron-LM's own pretrain_gpt.py on uneven layer splits, with and without our schedules.

As tests/test_megatron_lm_e2e.py (patched Megatron-LM core_v0.16.1 on CPU ranks,
tests/megatron_lm_harness.py), on a 6-layer GPT at pp=2, every run loading one
checkpoint saved by Megatron's own schedule on the even split (--finetune):

* Megatron's own 1F1B with --decoder-first-pipeline-num-layers 2 (ranks hold 2 and
  4 layers) and zbv with --account-for-embedding-in-pipeline-split
  --account-for-loss-in-pipeline-split (global stages of 1, 2, 2, 1 layers: rank 0
  holds the embedding, the loss and 2 layers, rank 1 holds 4) log the losses,
  validation losses and grad norms of Megatron's own schedule on the even split:
  the checkpoint maps by layer number onto any split and placement. So does zbv on
  megatron's --pipeline-model-parallel-layout 'Et|t*3|t|tL' (stages of 1, 3, 1, 1
  layers; the virtual pipeline size comes from the layout). Embeddings are
  untied: with a tied embedding under V, rank 0 sums the embedding's and the output
  layer's gradients in one buffer as the microbatches run while megatron sums each
  stage's and then all-reduces, which may change the last printed digit (seen once in
  a validation loss); tied V on uneven splits is compared with a tolerance in
  tests/test_uneven_split.py;
* --pipeline-balance FILE picks the split before the build and trains the same numbers.

A split megatron-core cannot build is refused in one sentence, exit status 2, by the patched
validate_args before Megatron-LM's own checks: every such case in-process in
tests/test_reliability_config.py, and one refusal end to end in tests/test_megatron_lm_e2e.py.
"""
from __future__ import annotations

import functools
import re

import pytest

import megatron_lm_harness as H

pytestmark = pytest.mark.megatron_lm

SIX = ["--num-layers", "6", "--pipeline-model-parallel-size", "2", "--global-batch-size", "8",  # 4 microbatches
       "--untie-embeddings-and-output-weights"]
ITERS = 3
ACCOUNTED = ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]


@pytest.fixture(scope="module")
def tree(megatron_lm_tree):
    return megatron_lm_tree  # one unpack per session (conftest.py)


@pytest.fixture(scope="module")
def runs(tree, tmp_path_factory):
    work = tmp_path_factory.mktemp("megatron-lm-uneven")
    start = str(work / "start")
    H.run(tree, 2, SIX + ["--train-iters", "1", "--eval-interval", "1000", "--save", start, "--save-interval", "1"])

    @functools.lru_cache(maxsize=None)
    def run(*extra):
        return H.run(tree, 2, SIX + ["--train-iters", str(ITERS), "--eval-interval", str(ITERS), "--load", start,
                                     "--finetune", *extra])

    return run


def _check(result: H.Result) -> None:
    assert sorted(result.losses) == list(range(1, ITERS + 1)), H.tail(result.log)
    assert len(set(result.losses.values())) > 1, "the loss did not change while training"


@pytest.mark.parametrize("extra", [
    ("--decoder-first-pipeline-num-layers", "2"),
    ("--pipeline-schedule", "zbv", *ACCOUNTED),
    ("--pipeline-schedule", "zbv", "--pipeline-model-parallel-layout", "Et|t*3|t|tL"),
], ids=["megatron-first-2", "zbv-embedding-loss", "zbv-layout"])
def test_uneven_split_trains_as_megatron_on_the_even_split(runs, extra):
    even, uneven = runs(), runs(*extra)
    _check(even)
    _check(uneven)
    assert uneven.numbers() == even.numbers()
    # the split was built: each uneven split gives rank 0 2 of the 6 layers (the even one 3)
    held, even_held = _parameters_per_rank(uneven.log), _parameters_per_rank(even.log)
    assert held[0] < even_held[0] and held[1] > even_held[1], (held, even_held)


def _parameters_per_rank(log: str) -> dict:
    """Megatron-LM's own count of each pipeline rank's parameters."""
    found = re.findall(r"number of parameters on \(tensor, pipeline\) model parallel rank \(0, (\d+)\): (\d+)", log)
    assert {int(r) for r, _ in found} == {0, 1}, H.tail(log)
    return {int(r): int(n) for r, n in found}


def test_balance_from_a_profile_and_profile_out_in_megatron_lms_loop(runs, tmp_path):
    """--pipeline-balance FILE picks the split before Megatron-LM builds the model (the
    one `primus-pipeline balance` recommends) and trains the same numbers as the even
    split; --pipeline-profile-out writes the profile fitted to this run's measurements."""
    from primus_megatron.schedules import balance as B

    profile, written = str(tmp_path / "heavy_head.json"), str(tmp_path / "measured.json")
    heavy = B.ModelCosts(layer=B.Part(1.0, 1.0, 1.0), head=B.Part(3.0, 3.0, 3.0))
    B.save_profile(profile, heavy)
    best, _ = B.choose("zb-h1", 2, 4, heavy, 6)
    assert best.split.first is not None  # the heavy head moves layers to the first rank
    even, balanced = runs(), runs("--pipeline-schedule", "zb-h1", "--pipeline-balance", profile,
                                  "--pipeline-profile-out", written, "--pipeline-profile-steps", "1")
    _check(balanced)
    m = re.search(r"^\s+decoder_first_pipeline_num_layers \.+ (\S+)", balanced.log, re.M)
    assert m and m.group(1) == str(best.split.first), H.tail(balanced.log)
    assert balanced.numbers() == even.numbers()
    measured = B.load_profile(written)
    assert "was not written" not in balanced.log  # the window closed: nothing to say at the end
    assert measured.layer.f > 0 and measured.layer.b > 0 and measured.head.f > 0
