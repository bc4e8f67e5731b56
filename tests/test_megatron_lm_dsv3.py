"""A scaled-down DeepSeek-V3 recipe through Megatron-LM's own pretrain_gpt.py on CPU ranks (issue 57, item 2),
under dualpipev and zbv with the expert all-to-all overlapped, against megatron's own 1F1B.

One configuration, DeepSeek-V3's recipe in small: multi-latent attention (query and key/value low ranks, a rope
part of the head), the first layer dense and the others MoE (`--moe-layer-freq`), grouped routed experts and a
shared expert, the sigmoid router with aux-loss-free expert bias and a sequence-wise balance loss, node-limited
routing (4 experts in 2 groups, each token's top-2 from 1 group), one MTP layer (`--mtp-num-layers 1`), EP=2 over
the DP=2 ranks with `--overlap-moe-expert-parallel-comm`, bf16, the distributed optimizer (its checkpoint fully
reshardable, so that a V placement loads a loop placement's optimizer state), overlapped gradient reduce,
TransformerEngine layers (the test-only stand-in, tests/te_standin). 4 ranks: DP=2 x PP=2 x EP=2; 4 layers (V:
4 stages of one, the dense one and the MTP layer's loss stage both on pipeline rank 0).

Megatron's own 1F1B without the flag runs iteration 1 of 3 and saves it (model, optimizer state, expert bias);
megatron's own 1F1B, and dualpipev and zbv (planned with an all-to-all cost, so with pairs) with the flag, each
resume it and run iterations 2 and 3, our overlapped F&B pairs each one call of megatron-core's combined step.
(Resumed, not a --finetune start: the V placements load the loop placement's optimizer state too, through the
fully reshardable format. Each compares with a resumed run of megatron's own: Megatron-LM logs a run's first
iteration without resetting its loss sums, so a run's second logged losses are the mean of its first two
(training.py:1796-1797 at core_v0.16.1), and a resumed run's iteration 2 reads otherwise than an uninterrupted
one.) What must hold: every number Megatron-LM logs (lm loss, mtp_1 loss, the sequence balance loss, grad norm;
the validation and test losses) is identical, as printed, to megatron's own; the recipe's options reached
Megatron-LM as given.

Both tags (core_v0.16.1 and core_v0.19.0, the one matching the installed megatron-core) take every option of the
recipe: `DROPPED` names none for either (an option a tag lacked would be dropped there alone, and said so).
"""
from __future__ import annotations

import functools
import re

import pytest

import megatron_lm_harness as H

pytestmark = pytest.mark.megatron_lm

ITERS, RESUME = 3, 1  # megatron's own runs iterations 1-3; ours resume its iteration 1 and run 2-3
WORLD = ["--pipeline-model-parallel-size", "2", "--global-batch-size", "16", "--eval-interval", str(ITERS),
         "--overlap-grad-reduce", "--use-distributed-optimizer", "--dist-ckpt-optim-fully-reshardable", "--bf16",
         "--train-iters", str(ITERS)]  # 4 microbatches per data-parallel rank
DSV3 = ["--multi-latent-attention", "--q-lora-rank", "16", "--kv-lora-rank", "16", "--qk-head-dim", "8",
        "--qk-pos-emb-head-dim", "4", "--v-head-dim", "8", "--position-embedding-type", "rope",
        "--swiglu", "--normalization", "RMSNorm", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
        "--num-experts", "4", "--moe-layer-freq", "([0]+[1]*3)", "--moe-router-topk", "2", "--moe-grouped-gemm",
        "--moe-shared-expert-intermediate-size", "48", "--moe-router-score-function", "sigmoid",
        "--moe-router-enable-expert-bias", "--moe-router-num-groups", "2", "--moe-router-group-topk", "1",
        "--moe-router-load-balancing-type", "seq_aux_loss", "--moe-aux-loss-coeff", "1e-4",
        "--moe-router-topk-scaling-factor", "2.5", "--moe-token-dispatcher-type", "alltoall",
        "--expert-model-parallel-size", "2", "--mtp-num-layers", "1"]
DROPPED: dict = {"core_v0.16.1": [], "core_v0.19.0": []}  # options (with their values) a tag lacks: none
A2A = ["--overlap-moe-expert-parallel-comm"]
FIXED = ["--pipeline-profile-steps", "0"]  # equal-cost plans: the numbers cannot depend on a measured plan
PAIRED = {"dualpipev": ["--pipeline-schedule", "dualpipev"],
          "zbv": ["--pipeline-schedule", "zbv", "--pipeline-costs", "1,1,1,a2a=0.5"]}


def recipe(tag: str) -> list:
    """DSV3 less the options `tag` lacks (each with its value, if it takes one)."""
    args, dropped = list(DSV3), DROPPED.get(tag, [])
    for option in dropped:
        i = args.index(option)
        del args[i:i + (2 if i + 1 < len(args) and not args[i + 1].startswith("--") else 1)]
    return args


@pytest.fixture(scope="module")
def runs(megatron_lm_tree, tmp_path_factory):
    tree, work = megatron_lm_tree, tmp_path_factory.mktemp("megatron-lm-dsv3")
    base = WORLD + recipe(H.matching_tag())

    @functools.lru_cache(maxsize=None)
    def start() -> str:
        """Megatron's own schedule's iteration RESUME, saved (the 3-iteration run's learning-rate schedule,
        which a resumed run must match): every run resumes it, optimizer state included."""
        path = str(work / "start")
        H.run(tree, 4, base + ["--save", path, "--save-interval", str(RESUME), "--exit-interval", str(RESUME)],
              te=True)
        return path

    @functools.lru_cache(maxsize=None)
    def run(schedule):
        """`schedule` (None: megatron's own 1F1B without the flag) from the start to iteration ITERS."""
        args = base + ["--load", start(), "--ckpt-step", str(RESUME)]
        return H.run(tree, 4, args + ([*A2A, *PAIRED[schedule], *FIXED] if schedule else []), te=True)

    return run


@pytest.mark.parametrize("schedule", list(PAIRED))
def test_deepseek_v3_recipe_trains_exactly_as_megatron(runs, schedule):
    own, ours = runs(None), runs(schedule)
    for result in (own, ours):
        assert sorted(result.losses) == list(range(RESUME + 1, ITERS + 1)), H.tail(result.log)
    assert {w for _, w in ours.validation} >= {"validation set", "test set"}, H.tail(ours.log)
    for result in (own, ours):  # the recipe as Megatron-LM parsed it
        assert H.arg(result, "multi_latent_attention") == "True" and H.arg(result, "q_lora_rank") == "16"
        # the first layer dense, the others MoE (a list in the dump, spaces and all: H.arg reads one word)
        freq = re.search(r"^\s+moe_layer_freq \.+ (.*)$", result.log, re.M)
        assert freq and freq.group(1) == "[0, 1, 1, 1]", freq
        assert H.arg(result, "moe_router_score_function") == "sigmoid"
        assert H.arg(result, "moe_router_enable_expert_bias") == "True"
        assert H.arg(result, "moe_router_num_groups") == "2" and H.arg(result, "moe_router_group_topk") == "1"
        assert H.arg(result, "moe_shared_expert_intermediate_size") == "48"
        assert H.arg(result, "mtp_num_layers") == "1" and H.arg(result, "expert_model_parallel_size") == "2"
        assert H.arg(result, "data_parallel_size") == "2" and H.arg(result, "bf16") == "True"
        assert H.arg(result, "use_distributed_optimizer") == "True"
        assert H.arg(result, "transformer_impl") == "transformer_engine"
        # megatron's own numbers, logged in every iteration: MTP's loss, the sequence-wise balance loss
        assert all({"mtp_1 loss", "seq_load_balancing_loss"} <= set(result.aux_losses.get(i, {}))
                   for i in sorted(result.losses)), result.aux_losses
    assert H.arg(own, "overlap_moe_expert_parallel_comm") == "False"
    assert H.arg(ours, "overlap_moe_expert_parallel_comm") == "True"
    assert H.arg(ours, "virtual_pipeline_model_parallel_size") == "2"
    assert ours.numbers() == own.numbers()
    assert len({ours.losses[RESUME + 1], ours.losses[ITERS]}) == 2, "the loss did not change while training"
    # every pair of pipeline rank 0's plan ran as one call of megatron-core's combined step
    planned, ran = H.combined_pairs(ours, schedule, PAIRED[schedule])
    assert planned and ran == [planned], H.tail(ours.log)
