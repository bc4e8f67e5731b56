"""Megatron-LM's own pretrain_gpt.py on CPU (`--cpu`) training the architectures teams train
(issue 43), under our schedules, against Megatron's own 1F1B on the same command line:

* Llama/Qwen-style: RoPE, grouped-query attention, SwiGLU, RMSNorm, no biases, untied
  embeddings, per-token loss; megatron's local layers; DP=2 x PP=2 with overlapped gradient
  reduce and the distributed optimizer. `--cpu` turns Megatron-LM's default TE-fused RoPE off
  (`--no-rope-fusion`) and says so; nothing else on this path calls CUDA.
* DeepSeek-style: multi-latent attention (YaRN RoPE, low-rank query and key/value projections)
  and MoE with grouped experts and a shared expert, EP=2 over the DP=2 ranks; TransformerEngine
  layers (the test-only stand-in, tests/te_standin): megatron-core's local attention cannot build
  multi-latent attention (no separate key/value head sizes), which `--cpu` refuses in one sentence.

Each architecture under zb-h1 (one chunk per rank) and zbv (V), evaluated once after training (halved
2026-11-29: llama's v-half was a third V launch, and an evaluation during the last iteration repeated the
one after it on the same weights).

What must hold: every number Megatron-LM logs (lm loss, grad norm of every iteration, the MoE
load-balancing loss, validation and test losses) is identical, as printed, to Megatron's own
1F1B's. Every run starts from one shared checkpoint (initialisation depends on the placement).
"""
from __future__ import annotations

import functools

import pytest

import megatron_lm_harness as H

pytestmark = pytest.mark.megatron_lm

ITERS = 3
DP2PP2 = ["--pipeline-model-parallel-size", "2", "--global-batch-size", "16", *H.EVAL_AFTER_TRAINING,
          "--overlap-grad-reduce", "--use-distributed-optimizer"]  # 4 microbatches per data-parallel rank
FIXED = ["--pipeline-profile-steps", "0"]  # equal-cost plans: the numbers cannot depend on a measured plan
LLAMA = ["--group-query-attention", "--num-query-groups", "2", "--position-embedding-type", "rope", "--swiglu",
         "--normalization", "RMSNorm", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
         "--calculate-per-token-loss"]
DEEPSEEK = ["--multi-latent-attention", "--q-lora-rank", "16", "--kv-lora-rank", "16", "--qk-head-dim", "8",
            "--qk-pos-emb-head-dim", "4", "--v-head-dim", "8", "--position-embedding-type", "rope",
            "--swiglu", "--normalization", "RMSNorm", "--untie-embeddings-and-output-weights",
            "--disable-bias-linear", "--num-experts", "4", "--moe-router-topk", "2", "--moe-grouped-gemm",
            "--moe-shared-expert-intermediate-size", "48", "--moe-token-dispatcher-type", "alltoall",
            "--expert-model-parallel-size", "2", "--moe-aux-loss-coeff", "1e-2"]
# one schedule of each kind the runtime executes differently: one chunk per rank, V (v-half and v-min place
# layers as zbv does: test_production_matrix.py runs every schedule on these blocks, rows i and j)
ARCHS = {"llama": (LLAMA, False, ["zb-h1", "zbv"]), "deepseek": (DEEPSEEK, True, ["zb-h1", "zbv"])}
CASES = [(arch, schedule) for arch, (_, _, schedules) in ARCHS.items() for schedule in schedules]


@pytest.fixture(scope="module")
def runs(megatron_lm_tree, tmp_path_factory):
    tree, work = megatron_lm_tree, tmp_path_factory.mktemp("megatron-lm-archs")

    @functools.lru_cache(maxsize=None)
    def start(arch: str) -> str:
        """One iteration of Megatron's own schedule, saved: every run of `arch` loads it."""
        args, te, _ = ARCHS[arch]
        path = str(work / f"start-{arch}")
        H.run(tree, 4, DP2PP2 + args + ["--train-iters", "1", "--eval-interval", "1000", "--save", path,
                                        "--save-interval", "1"], te=te)
        return path

    @functools.lru_cache(maxsize=None)
    def run(arch: str, schedule):
        args, te, _ = ARCHS[arch]
        argv = DP2PP2 + args + ["--train-iters", str(ITERS), "--load", start(arch), "--finetune"]
        return H.run(tree, 4, argv + (["--pipeline-schedule", schedule, *FIXED] if schedule else []), te=te)

    return run


@pytest.mark.parametrize("arch, schedule", CASES, ids=[f"{a}-{s}" for a, s in CASES])
def test_architecture_trains_exactly_as_megatron(runs, arch, schedule):
    own, ours = runs(arch, None), runs(arch, schedule)
    assert sorted(ours.losses) == list(range(1, ITERS + 1)), H.tail(ours.log)
    assert {w for _, w in ours.validation} >= {"validation set", "test set"}, H.tail(ours.log)
    assert ours.numbers() == own.numbers()
    assert len({ours.losses[1], ours.losses[ITERS]}) == 2, "the loss did not change while training"
    for result in (ours, own):  # the architecture Megatron-LM was given, as it parsed it
        assert H.arg(result, "position_embedding_type") == "rope" and H.arg(result, "normalization") == "RMSNorm"
        assert H.arg(result, "swiglu") == "True" and H.arg(result, "add_bias_linear") == "False"
        assert H.arg(result, "apply_rope_fusion") == "False" and H.arg(result, "data_parallel_size") == "2"
        if arch == "llama":
            assert H.arg(result, "num_query_groups") == "2" and H.arg(result, "transformer_impl") == "local"
            assert H.arg(result, "calculate_per_token_loss") == "True"
        else:
            assert H.arg(result, "multi_latent_attention") == "True" and H.arg(result, "moe_grouped_gemm") == "True"
            assert H.arg(result, "transformer_impl") == "transformer_engine"
    assert "--no-rope-fusion" in next(line for line in ours.log.splitlines() if line.startswith("CPU mode:"))
    if arch == "deepseek":
        assert all(ours.aux_losses.get(i, {}).get("load_balancing_loss") for i in range(1, ITERS + 1)), \
            ours.aux_losses


def test_multi_latent_attention_on_local_layers_is_refused_in_one_sentence(megatron_lm_tree):
    """Forked ranks, not torchrun: the refusal is Megatron-LM's argument parsing with our plugin, the
    same under either launcher (and on either megatron-core: the first CI leg only, Makefile PY312_DESELECT)."""
    result = H.run(megatron_lm_tree, 2, ["--pipeline-model-parallel-size", "2", "--train-iters", "1",
                                         "--global-batch-size", "4", "--eval-interval", "1", *DEEPSEEK[:-4],
                                         "--pipeline-schedule", "zbv"], expect_ok=False, timeout=180)
    assert result.returncode == 2, H.tail(result.log)  # argparse's status, the launch's (torchrun reports 1)
    errors = [line for line in result.log.splitlines() if line.startswith("pretrain_gpt.py: error:")]
    assert len(errors) == 1 and "--multi-latent-attention needs TransformerEngine attention" in errors[0], \
        H.tail(result.log)
    # no traceback (the stacks the harness dumps of the ranks the launcher stops are not the run's)
    log = _without_stack_dumps(result.log)
    assert 'pretrain_gpt.py", line' not in log and "megatron/training" not in log, H.tail(log)


def _without_stack_dumps(log: str) -> str:
    """The log less faulthandler's dumps (megatron_lm_harness registers one on SIGTERM: the other
    ranks, waiting for rank 0 to print, are stopped by the launcher)."""
    kept, dumping = [], False
    for line in log.splitlines():
        if line.startswith(("Current thread 0x", "Thread 0x")):
            dumping = True
        elif dumping and not line.startswith("  File "):
            dumping = False
        if not dumping:
            kept.append(line)
    return "\n".join(kept)


def test_context_parallel_flags_meet_no_cuda_call_in_cpu_mode(megatron_lm_tree):
    """--context-parallel-size makes Megatron-LM's validate_args ask the GPU's architecture
    (get_device_arch_version): in CPU mode the dry run gets past it to the checks that matter (here
    ours: context parallelism needs TransformerEngine attention, which local layers do not have)."""
    result = H.run(megatron_lm_tree, 4, ["--pipeline-model-parallel-size", "2", "--context-parallel-size", "2",
                                         "--train-iters", "1", "--global-batch-size", "4", "--eval-interval", "1",
                                         *LLAMA, "--pipeline-schedule", "zbv"], expect_ok=False, timeout=180)
    assert result.returncode != 0
    assert "Torch not compiled with CUDA" not in result.log, H.tail(result.log)
    assert "--context-parallel-size 2 cannot be used with --pipeline-schedule zbv: context parallelism needs " \
           "TransformerEngine attention" in result.log, H.tail(result.log)
