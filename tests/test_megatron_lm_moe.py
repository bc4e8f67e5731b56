"""Megatron-LM's own pretrain_gpt.py training a mixture-of-experts GPT on CPU ranks under our
schedules (issue 38), against Megatron's own 1F1B on the same configuration.

TransformerEngine is the test-only stand-in (tests/te_standin, TE v2.11's classes; see
test_megatron_lm_te.py), so megatron-core builds its TE MoE spec: the routed experts as
TEGroupedMLP over TE's GroupedLinear (`--moe-grouped-gemm`), whose weight GEMMs our plugin routes
to the W ops (te_wgrad), a shared expert of TE linear layers, the all-to-all token dispatcher over
EP=2 (the expert-data-parallel group is the DP=2 ranks), the load-balancing loss. 4 ranks: DP=2 x
PP=2 x EP=2, with Megatron-LM's production settings: overlapped gradient reduce, the distributed
optimizer, overlapped parameter gather, gradient-accumulation fusion, bf16.

What must hold: every number Megatron-LM logs (lm loss, load-balancing loss, grad norm of every
iteration; validation and test losses) is identical, as printed, to Megatron's own 1F1B's; and
the experts' weight gradients are deferred (the plugin's line: grouped experts among the routed
layers). Every run starts from one shared checkpoint (Megatron-LM's initialisation depends on the
placement, and zbv places layers in a V). Also, each against its own 1F1B under zb-h1:
megatron's router with DeepSeek-V3's aux-loss-free balancing (expert bias) and token dropping with a
capacity factor, SequentialMLP experts over TE's linear layers, and local layers (SequentialMLP of
megatron's linear layers).

--overlap-moe-expert-parallel-comm (bf16, as megatron requires), grouped TE experts and local layers:
zbv planned with an all-to-all cost runs its overlapped F&B pairs through megatron-core's combined step
(rank 0 logs how many), and so does dualpipev with every activation offloaded (local layers); megatron's
own combined 1F1B (its interleaved schedule, 2 virtual stages per rank) with grouped TE experts; each logs
exactly the numbers of megatron's 1F1B without the flag, from the shared start of its layers.

What runs once, not per schedule or layer kind (2026-11-29, halving the suite's CPU: each case is a launch of
4 ranks, about 9 s of CPU): the grouped experts under one schedule of each kind the runtime executes
differently (zb-h1: one chunk per rank; zbv: V), not dualpipev too (a V placement as zbv's; its overlapped
pairs on grouped experts run in test_megatron_lm_fp8.py's MoE test, through the combined step in the
offload test here). Under the flag, the overlapped pairs through megatron-core's combined step once per
layer kind with zbv (the schedule the second leg keeps), and dualpipev's pairs (3 on rank 0) through the
same runtime/combined.py path in the offload test; megatron's own combined 1F1B once (grouped TE experts):
it is megatron's schedule, and what it shows (the flag alone leaves megatron's numbers as they were) does
not depend on our layers. Expert bias and the capacity factor are options of megatron's router, which our
runtime does not touch: one launch with both (`router`) instead of one each.
"""
from __future__ import annotations

import functools
import re

import pytest

import megatron_lm_harness as H
from primus_megatron import schedules as S

pytestmark = pytest.mark.megatron_lm

# the grouped experts' runs are the session's (conftest megatron_lm_moe_runs: one shared start, megatron's own run
# shared with the FP8 tests); the variants below take the same model options
ITERS = H.MoEPipelineRuns.ITERS
MOE, TE_MOE = H.MoEPipelineRuns.MOE, H.MoEPipelineRuns.TE_MOE
DP2PP2 = H.MoEPipelineRuns.DP2PP2 + H.EVAL_AFTER_TRAINING
FIXED = H.MoEPipelineRuns.FIXED
# one loop and one V schedule (v-half, v-min and dualpipev place layers as zbv does; the matrix runs them all)
SCHEDULES = ["zb-h1", "zbv"]
VARIANTS = {  # each against its own 1F1B under zb-h1
    # megatron's router: DeepSeek-V3's aux-loss-free balancing (expert bias) and token dropping by capacity
    "router": TE_MOE + ["--moe-router-enable-expert-bias", "--moe-router-score-function", "sigmoid",
                        "--moe-router-load-balancing-type", "none", "--moe-expert-capacity-factor", "1.0",
                        "--moe-token-drop-policy", "probs"],
    # without --moe-grouped-gemm: SequentialMLP over TE's linear layers
    "te-sequential": MOE + ["--moe-shared-expert-intermediate-size", "64"],
    # megatron's fused masked softmax needs apex's CUDA kernel under bf16 (fusions/fused_softmax.py:357)
    "local-sequential": MOE + ["--transformer-impl", "local", "--no-masked-softmax-fusion"],
}
# --overlap-moe-expert-parallel-comm: our schedules with overlapped F&B pairs run each pair through
# megatron-core's combined step (runtime/combined.py); zbv pairs its neighbours only when planned with an
# all-to-all cost. Megatron's own combined 1F1B needs its interleaved schedule at pp > 1 (transformer_config.py
# :1857-1861 at core_v0.16.1): 2 virtual stages per rank; Megatron-LM's default --overlap-p2p-communication
# (batch_p2p_comm off) is what its interleaved schedule needs at pp=2 (arguments.py:573-581)
A2A = ["--overlap-moe-expert-parallel-comm"]
PAIRED = {"dualpipev": ["--pipeline-schedule", "dualpipev"],
          "zbv": ["--pipeline-schedule", "zbv", "--pipeline-costs", "1,1,1,a2a=0.5"]}
COMBINED_1F1B = "megatron-combined-1f1b"  # megatron's interleaved 1F1B under the flag
OFFLOADED = "dualpipev-offload"  # dualpipev's pairs through the combined step, every activation to host and back
LAYERS = {"te": TE_MOE, "local": VARIANTS["local-sequential"]}
# the pairs through the combined step with each layer kind; megatron's combined 1F1B with one (module docstring)
A2A_CASES = [("te", "zbv"), ("local", "zbv"), ("te", COMBINED_1F1B)]


@pytest.fixture(scope="module")
def runs(megatron_lm_tree, megatron_lm_moe_runs, tmp_path_factory):
    tree, work = megatron_lm_tree, tmp_path_factory.mktemp("megatron-lm-moe")
    grouped, start = megatron_lm_moe_runs, megatron_lm_moe_runs.start

    @functools.lru_cache(maxsize=None)
    def variant(name, schedule):
        args = DP2PP2 + VARIANTS[name] + ["--train-iters", str(ITERS)]
        if name == "local-sequential":  # the local layers' shared start: megatron's own run is overlapped's too
            args += ["--load", local_start(), "--finetune"]
        return H.run(tree, 4, args + (["--pipeline-schedule", schedule, *FIXED] if schedule else []),
                     te=name != "local-sequential")

    @functools.lru_cache(maxsize=None)
    def local_start() -> str:
        """The local layers' start (another checkpoint layout than TransformerEngine's)."""
        path = str(work / "start-local")
        H.run(tree, 4, DP2PP2 + LAYERS["local"] + ["--train-iters", "1", "--eval-interval", "1000", "--save", path,
                                                   "--save-interval", "1"])
        return path

    @functools.lru_cache(maxsize=None)
    def overlapped(layers, schedule):
        """`schedule` (None: megatron's 1F1B without the flag) from the shared start of `layers`."""
        if schedule is None:  # megatron's 1F1B without the flag: the run the other tests compare with too
            return grouped(None) if layers == "te" else variant("local-sequential", None)
        args = DP2PP2 + LAYERS[layers] + ["--train-iters", str(ITERS), "--load",
                                          start() if layers == "te" else local_start(), "--finetune"]
        if schedule == COMBINED_1F1B:
            args += A2A + ["--num-virtual-stages-per-pipeline-rank", "2"]
        elif schedule == OFFLOADED:
            args += A2A + PAIRED["dualpipev"] + FIXED + ["--pipeline-offload", "all"]
        elif schedule is not None:
            args += A2A + PAIRED[schedule] + FIXED
        return H.run(tree, 4, args, te=layers == "te")

    return grouped, variant, overlapped


_arg = H.arg


_routed = H.routed


def _check(ours: H.Result, own: H.Result) -> None:
    assert sorted(ours.losses) == list(range(1, ITERS + 1)), H.tail(ours.log)
    assert {w for _, w in ours.validation} >= {"validation set", "test set"}, H.tail(ours.log)
    for result in (ours, own):
        assert _arg(result, "num_experts") == "4" and _arg(result, "expert_model_parallel_size") == "2"
        assert _arg(result, "data_parallel_size") == "2"
        for name in ("overlap_grad_reduce", "use_distributed_optimizer", "overlap_param_gather", "bf16"):
            assert _arg(result, name) == "True", name
    assert ours.numbers() == own.numbers()
    assert len({ours.losses[1], ours.losses[ITERS]}) == 2, "the loss did not change while training"


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_grouped_experts_train_exactly_as_megatron(runs, schedule):
    grouped, _, _ = runs
    own, ours = grouped(None), grouped(schedule)
    _check(ours, own)
    assert all(ours.aux_losses.get(i, {}).get("load_balancing_loss") for i in range(1, ITERS + 1)), ours.aux_losses
    assert _arg(ours, "moe_grouped_gemm") == "True" and _arg(ours, "transformer_impl") == "transformer_engine"
    assert _arg(ours, "gradient_accumulation_fusion") == "True"
    # rank 0's chunks hold the first layers: every one's grouped experts (fc1, fc2) defer their GEMMs to W
    routed = _routed(ours)
    assert routed and all(grouped_count >= 2 for _, grouped_count in routed), H.tail(ours.log)
    assert "defer their weight gradients" not in own.log


@pytest.mark.parametrize("name", list(VARIANTS))
def test_moe_variants_train_exactly_as_megatron(runs, name):
    _, variant, _ = runs
    own, ours = variant(name, None), variant(name, "zb-h1")
    _check(ours, own)
    if name == "local-sequential":
        assert _arg(ours, "transformer_impl") == "local" and "defer their weight gradients" not in ours.log
    elif name == "te-sequential":
        assert _arg(ours, "moe_grouped_gemm") == "False"
        assert _routed(ours) and all(g == 0 for _, g in _routed(ours)), H.tail(ours.log)  # TE Linear experts
    else:  # the router's two options, both as Megatron-LM parsed them
        assert all(g >= 2 for _, g in _routed(ours)) and _routed(ours), H.tail(ours.log)
        assert _arg(ours, "moe_router_enable_expert_bias") == "True", H.tail(ours.log)
        assert _arg(ours, "moe_expert_capacity_factor") == "1.0", H.tail(ours.log)


# zbv planned with an all-to-all cost reaches megatron-core's combined step as dualpipev does (which the offload
# test below runs); the second CI leg runs those with TE layers (Makefile's PY312_DESELECT)
@pytest.mark.parametrize("layers, schedule", A2A_CASES, ids=[f"{s}-{layers}" for layers, s in A2A_CASES])
def test_a2a_overlap_trains_exactly_as_megatron(runs, layers, schedule):
    """--overlap-moe-expert-parallel-comm: our overlapped pairs through megatron's combined step, and
    megatron's own combined (interleaved) 1F1B, log exactly the numbers of megatron's plain 1F1B."""
    _, _, overlapped = runs
    own, ours = overlapped(layers, None), overlapped(layers, schedule)
    _check(ours, own)
    assert _arg(ours, "overlap_moe_expert_parallel_comm") == "True"
    assert _arg(own, "overlap_moe_expert_parallel_comm") == "False"
    if schedule == COMBINED_1F1B:  # megatron's interleaved schedule, which then calls its combined step itself
        assert _arg(ours, "virtual_pipeline_model_parallel_size") == "2" and _arg(ours, "overlap_p2p_comm") == "True"
        return
    # every pair of pipeline rank 0's plan ran as one call of megatron's combined step (zbv planned with an
    # all-to-all cost: 1 at m=4, its other pairs are on rank 1)
    planned, ran = H.combined_pairs(ours, schedule, PAIRED[schedule])
    assert planned and ran == [planned], H.tail(ours.log)


def test_a2a_overlap_with_activation_offload_trains_exactly_as_megatron(runs):
    """dualpipev's pairs through megatron's combined step with --pipeline-offload all: each pair's F half's
    activations recorded inside the combined call and moved to host as it ends, its B half's back before it
    starts; Megatron-LM logs exactly megatron's plain 1F1B's numbers."""
    _, _, overlapped = runs
    own, ours = overlapped("local", None), overlapped("local", OFFLOADED)
    _check(ours, own)
    assert re.search(r"dualpipev: \d+ overlapped F&B pairs ran on pipeline rank 0", ours.log), H.tail(ours.log)
    # pipeline rank 0: every F of its 2 chunks x 4 microbatches, and what each of its B ops kept for its W
    b_ops = sum(op.kind == S.B for op in S.generate("dualpipev", 2, 4).ranks[0])
    moved = re.findall(r"dualpipev: --pipeline-offload all moved (\d+) F ops' activations and (\d+) W shares to "
                       r"host and back on pipeline rank 0", ours.log)
    assert moved == [("8", str(b_ops))], H.tail(ours.log)
