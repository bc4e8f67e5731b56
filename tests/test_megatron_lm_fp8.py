"""Megatron-LM's own pretrain_gpt.py in FP8 (`--bf16 --fp8-format hybrid`, TE layers) under our
schedules with W ops, against megatron's own 1F1B in FP8 (issue 54).

TransformerEngine is the test-only stand-in (tests/te_standin, TE v2.11), told to answer as an FP8
device (a Hopper: megatron_lm_harness.run(fp8_device=...) sets the stand-in's switch in every rank),
so Megatron-LM's FP8 path runs as on a GPU: megatron-core's TE autocast around each microbatch's
forward (`get_fp8_context`), the weight cast once per step (`is_first_microbatch`), and the stand-in
casting to float8 with TE's scales. Nothing else is shimmed: megatron-core 0.16.1 and 0.19.0 ask TE,
not the device, whether FP8 runs. Our runtime accepts FP8 with W ops for the recipes the stand-in
reproduces (primus_megatron/unsupported.py FP8_CPU_REPRODUCED) and says so at start-up.

Per recipe (`delayed`: amax histories and scales updated as each microbatch's forward autocast exits
and as its backward ends; `tensorwise`: current scaling), one test: megatron's own 1F1B and our zb-h1,
zbv and dualpipev from one shared checkpoint (megatron_lm_harness.TEPipelineRuns, shared with
test_megatron_lm_te.py), pp=2 with tied embeddings and gradient-accumulation fusion (TE writes the
weight gradient into main_grad), 4 microbatches, 3 iterations: the numbers Megatron-LM logs (lm loss
and grad norm of every iteration, the validation and test losses) identical, as printed. One launch
per schedule (the harness runs one schedule per pretrain_gpt.py) and one for megatron's own; megatron's
bf16 run, shared with test_megatron_lm_te.py, shows FP8 rounded (the numbers differ from it).

The MoE recipe in FP8 the same way, under the delayed recipe: TE grouped experts with
--moe-router-padding-for-fp8 on DP=2 x PP=2 x EP=2 (megatron_lm_harness.MoEPipelineRuns, whose start and
megatron's own bf16 run test_megatron_lm_moe.py shares), megatron's own 1F1B and our zb-h1, zbv and dualpipev
(four launches of 4 ranks: 33 s more CPU on core_v0.16.1, 2026-11-29, measured as in docs/testing.md).

Then each way the B/W split could go wrong in FP8 (tests/fp8_breakages.py: a quantized tensor freed or
cast again between B and W, a microbatch's backward amax reduced never or twice, the cached FP8 weight
re-cast between B and W) is made on purpose in one zb-h1 launch under the delayed recipe, and the same
comparison fails: these tests would catch it.
"""
from __future__ import annotations

import pytest

import fp8_breakages
import megatron_lm_harness as H
import schedule_subset

pytestmark = pytest.mark.megatron_lm

ITERS = H.TEPipelineRuns.ITERS
RECIPES = ["delayed", "tensorwise"]
SCHEDULES = ["zb-h1", "zbv", "dualpipev"]  # loop placement; V; V with overlapped F&B pairs
MOE_RECIPE = "delayed"
BASIS = "FP8 with deferred weight gradients: "  # our start-up line (unsupported.log_fp8_basis_once)


def _differences(ours: H.Result, own: H.Result) -> list:
    """What the comparison with megatron's own run finds: one line per logged quantity that differs."""
    a, b = ours.numbers(), own.numbers()
    return [f"{name}: {a[name]} != megatron's {b[name]}" for name in sorted(set(a) | set(b)) if a.get(name) != b.get(name)]


def _own_fp8(result: H.Result, recipe: str) -> None:
    """Megatron-LM trained as asked: TE layers, bf16 with FP8 GEMMs of this recipe, fused accumulation."""
    assert sorted(result.losses) == list(range(1, ITERS + 1)), H.tail(result.log)
    assert {w for _, w in result.validation} >= {"validation set", "test set"}, H.tail(result.log)
    assert H.arg(result, "transformer_impl") == "transformer_engine"
    assert H.arg(result, "bf16") == "True" and H.arg(result, "gradient_accumulation_fusion") == "True"
    assert (H.arg(result, "fp8"), H.arg(result, "fp8_recipe")) == ("hybrid", recipe)


@pytest.mark.parametrize("recipe", RECIPES)
def test_fp8_trains_exactly_as_megatron(megatron_lm_te_pp2, recipe):
    runs = megatron_lm_te_pp2
    own, bf16 = runs(None, recipe), runs(None, None)
    _own_fp8(own, recipe)
    assert BASIS not in own.log  # megatron's own schedule: nothing of ours decides anything
    # FP8 rounded: the losses are not bf16's (were the stand-in answering as a CPU, Megatron-LM would have
    # stopped at TE's "Device compute capability 8.9 or higher required for FP8 execution.")
    assert own.losses != bf16.losses, "megatron's own FP8 run logged its bf16 run's losses"
    assert len({own.losses[1], own.losses[ITERS]}) == 2, "the loss did not change while training"
    failures = {}
    for schedule in schedule_subset.under_test(SCHEDULES):
        ours = runs(schedule, recipe)
        _own_fp8(ours, recipe)
        # our runtime ran the TE layers' weight GEMMs in W ops under FP8, and said what that rests on
        assert f"with the {recipe} recipe rests on the CPU reproduction" in ours.log, H.tail(ours.log)
        assert "TransformerEngine layers defer their weight gradients to W ops" in ours.log, H.tail(ours.log)
        if schedule != "zb-h1":
            assert H.arg(ours, "virtual_pipeline_model_parallel_size") == "2"
        if _differences(ours, own):
            failures[schedule] = _differences(ours, own)
    assert not failures, f"{recipe}: {failures}"


def test_fp8_moe_with_grouped_experts_trains_exactly_as_megatron(megatron_lm_moe_runs):
    """Megatron-LM's MoE recipe in FP8: TE grouped experts (TEGroupedMLP over GroupedLinear, each expert's
    rows cast by its own quantizer) with --moe-router-padding-for-fp8, a shared expert, the all-to-all
    dispatcher over EP=2 and the load-balancing loss on DP=2 x PP=2, delayed scaling (the recipe with state
    that W could get wrong); megatron's own 1F1B and our zb-h1, zbv and dualpipev from the start
    test_megatron_lm_moe.py's bf16 runs share: the numbers Megatron-LM logs (lm loss, load-balancing loss,
    grad norm, validation and test losses) identical, as printed."""
    runs, recipe = megatron_lm_moe_runs, MOE_RECIPE
    own, bf16 = runs(None, recipe), runs(None, None)
    _own_fp8(own, recipe)
    for name, value in (("num_experts", "4"), ("expert_model_parallel_size", "2"), ("data_parallel_size", "2"),
                        ("moe_grouped_gemm", "True"), ("moe_router_padding_for_fp8", "True")):
        assert H.arg(own, name) == value, f"{name}: {H.arg(own, name)}"
    assert all(own.aux_losses.get(i, {}).get("load_balancing_loss") for i in range(1, ITERS + 1)), own.aux_losses
    assert own.losses != bf16.losses, "megatron's own FP8 MoE run logged its bf16 run's losses"
    assert BASIS not in own.log and "defer their weight gradients" not in own.log
    failures = {}
    for schedule in schedule_subset.under_test(SCHEDULES):
        ours = runs(schedule, recipe)
        _own_fp8(ours, recipe)
        assert f"with the {recipe} recipe rests on the CPU reproduction" in ours.log, H.tail(ours.log)
        # rank 0's chunks hold the first layers: every one's grouped experts (fc1, fc2) run their FP8 GEMMs in W
        routed = H.routed(ours)
        assert routed and all(grouped >= 2 for _, grouped in routed), H.tail(ours.log)
        if _differences(ours, own):
            failures[schedule] = _differences(ours, own)
    assert not failures, f"{recipe}: {failures}"


@pytest.mark.parametrize("breakage", sorted(fp8_breakages.BREAKAGES))
def test_a_broken_fp8_split_is_caught(megatron_lm_te_pp2, breakage):
    """The comparison of test_fp8_trains_exactly_as_megatron fails when the split is broken on purpose
    (tests/fp8_breakages.py), on zb-h1 with the delayed recipe: the run itself goes through, wrong."""
    runs = megatron_lm_te_pp2
    own = runs(None, "delayed")
    broken = runs("zb-h1", "delayed", rank_setup=("fp8_breakages", "install", breakage))
    assert f"fp8 breakage {breakage} made" in broken.log, H.tail(broken.log)
    _own_fp8(broken, "delayed")
    assert _differences(broken, own), f"{breakage}: the broken split logged megatron's own numbers"
