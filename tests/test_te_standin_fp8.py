"""The TransformerEngine stand-in's FP8 (the per-tensor recipes: ``--fp8-recipe delayed`` and
``tensorwise``, formats E4M3 and HYBRID), as TE v2.11 computes it (the stand-in's modules cite the
lines), on CPU in a process of its own with tests/te_standin first on its path
(tests/te_fp8_cases.py):

* the quantizers cast for real: x * scale rounded to the float8 dtype, saturating at its largest
  finite value, scale_inv = 1 / scale; delayed scaling records the amax as a running max until
  the update, current scaling scales by the tensor's own amax (448 / amax, a power of two on
  request, 1 for an all-zero tensor); the FNUZ dtypes and E4M3's 240 on an emulated gfx942;
* delayed scaling's update is TE's fused kernel's: roll, max (or most recent) over the window,
  fp8_max * 2^-margin / amax, nothing for a quantizer that cast nothing since the last update;
* FP8 GEMMs multiply the float8 data as cuBLASLt on a TN-only device gets them;
* the oracle of deferred weight gradients: LayerNormLinear + Linear over two steps of two
  microbatches (fused into main_grad, is_first_microbatch caching the quantized weight) give
  BITWISE the same outputs, input gradients, main_grad, bias and norm gradients, amax histories
  and scales with the weight-gradient GEMMs delayed to backward_dw as run in B; backward_dw
  changes no scaling state (it reads the quantized tensors saved in B: the input's column-wise
  data and grad_output, in the recipe's backward format);
* what TE raises (alignment, MXFP8 and NVFP4 on a Hopper) the stand-in raises; blockwise and custom
  recipes are refused in one sentence naming the stand-in;
* GroupedLinear (megatron's grouped experts) the same way: per-expert casts, an expert given no
  rows, TE's alignment check on each expert's rows and its Fp8Padding.
"""
from __future__ import annotations

import os

import pytest
import torch

import megatron_reference as ref
import te_fp8_cases as cases
from primus_megatron.runtime import local_ranks

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")

STANDIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "te_standin")


def _run(body, **case) -> dict:
    return local_ranks.run_ranks(body, {"pp": 1, **case}, 1, timeout_s=300, sys_path=[STANDIN])[0]


def _cast(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return values.to(dtype).float()


def test_quantizers_cast_for_real():
    rec = _run(cases.quantizers)
    x, d = rec["x"], rec["delayed"]
    scaled = x * 4.0
    finite = scaled.abs() < 57344
    assert torch.equal(d["data"].float()[finite], _cast(scaled[finite], torch.float8_e5m2))
    assert d["data"].float()[0, 2] == 57344.0  # 80000 saturates to E5M2's largest finite value
    assert torch.isnan(d["data"].float()[0, 3])
    assert torch.equal(d["scale_inv"], torch.tensor([0.25]))
    assert torch.equal(d["amax_first"], torch.tensor([20000.0]))  # NaN ignored
    assert torch.equal(d["amax_second"], torch.tensor([20000.0]))  # a running max until the update
    assert torch.equal(d["dequantized"][finite], _cast(scaled[finite], torch.float8_e5m2) * 0.25)
    assert not torch.equal(d["dequantized"][finite], x[finite])  # rounded: 1e-3 is not representable
    scale = torch.tensor(448.0) / torch.tensor(5.0)  # max |y| = 5
    cur = rec["current_pow2=False"]
    assert torch.equal(cur["scale"], scale.reshape(1))
    assert torch.equal(cur["data"].float(), _cast(cur["y"] * scale, torch.float8_e4m3fn))
    pow2 = rec["current_pow2=True"]
    assert torch.equal(pow2["scale"], torch.tensor([64.0])) and torch.equal(pow2["scale_inv"], torch.tensor([1 / 64]))
    assert torch.equal(rec["current_zero_scale"], torch.tensor([1.0]))
    assert rec["sm90"] == {"E4M3": (torch.float8_e4m3fn, torch.float8_e4m3fn, 448.0),
                           "HYBRID": (torch.float8_e4m3fn, torch.float8_e5m2, 448.0)}
    assert rec["gfx942"] == {"E4M3": (torch.float8_e4m3fnuz, torch.float8_e4m3fnuz, 240.0),
                             "HYBRID": (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz, 240.0)}


def test_delayed_scaling_update_is_te_fused_kernel():
    rec = _run(cases.delayed_update)
    # margin 1: 448 / 2. Quantizer 0 cast (amax 5 in row 0), 1 cast nothing (row 0 zero: kept as
    # it was), 2's amax was reduced across ranks to 6
    rolled = torch.tensor([[0.0, 0.0, 0.0], [3.0, 4.0, 1.0], [5.0, 4.0, 6.0]])
    rolled[:, 1] = torch.tensor([0.0, 4.0, 4.0])
    top = torch.tensor(224.0)
    for algo, amax2 in (("max", 8.0), ("most_recent", 6.0)):
        history, scale = rec[algo]
        assert torch.equal(history, rolled), algo
        assert torch.equal(scale, torch.stack([top / 5.0, torch.tensor(3.0), top / amax2])), algo


def test_fp8_gemm_multiplies_the_float8_data():
    for layout, (out, want) in _run(cases.gemm).items():
        assert torch.equal(out, want), layout


@pytest.fixture(scope="module")
def oracle():
    return _run(cases.undivided_vs_delayed)


def _assert_same(got, want, where: str) -> None:
    if isinstance(want, dict):
        assert set(got) == set(want), where
        for key in want:
            _assert_same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, torch.Tensor):
        assert torch.equal(got, want), f"{where} differs"
    else:
        assert got == want, where


def _assert_delayed_is_undivided(undivided: dict, delayed: dict, is_weight) -> None:
    """Every step's outputs, input gradients, gradients and scaling state bitwise; backward_dw changed no
    scaling state; every weight's main_grad written (not the stale 7s) and every other parameter's .grad set."""
    for step, (u, d) in enumerate(zip(undivided["steps"], delayed["steps"])):
        for key in ("out", "dgrad0", "dgrad1", "grads", "state"):
            _assert_same(d[key], u[key], f"step {step} {key}")
        _assert_same(d["state_before_w"], d["state"], f"step {step}: backward_dw changed the FP8 state")
        for name, (main_grad, grad) in u["grads"].items():
            if is_weight(name):
                assert not torch.equal(main_grad, torch.full_like(main_grad, 7.0)), f"{name}: main_grad never written"
            else:
                assert grad is not None and grad.abs().sum() > 0, f"{name}: no gradient"


@pytest.mark.parametrize("recipe", [f"{name} {fmt}" for name, fmt in cases.RECIPES])
def test_delayed_wgrad_is_bitwise_the_undivided_backward(oracle, recipe):
    undivided, delayed = oracle[recipe]["undivided"], oracle[recipe]["delayed"]
    _assert_delayed_is_undivided(undivided, delayed, lambda name: name.endswith(".weight"))
    if recipe.startswith("delayed"):  # the scales moved off 1 after the first step
        state = undivided["steps"][1]["state"]
        assert not torch.equal(state["0.scaling_fwd.scale"], torch.ones(3))
        assert not torch.equal(state["1.scaling_bwd.scale"], torch.ones(2))
    grad_dtype = torch.float8_e5m2 if recipe.endswith("HYBRID") else torch.float8_e4m3fn
    handed = delayed["handed"]
    assert len(handed) == 2 * 2 * 2  # steps x microbatches x layers
    for x, dy in handed:
        assert x == ("Float8TensorStorage", {"rowwise": False, "columnwise": True}, torch.float8_e4m3fn)
        assert dy == ("Float8TensorStorage", {"rowwise": True, "columnwise": True}, grad_dtype)


def test_delayed_wgrad_on_gfx942_uses_fnuz():
    rec = _run(cases.undivided_vs_delayed, platform="gfx942")
    for recipe, got in rec.items():
        for step, (u, d) in enumerate(zip(got["undivided"]["steps"], got["delayed"]["steps"])):
            _assert_same(d["grads"], u["grads"], f"{recipe} step {step}")
            _assert_same(d["state"], u["state"], f"{recipe} step {step}")
        assert all(x[2] == torch.float8_e4m3fnuz for x, _ in got["delayed"]["handed"]), recipe


def test_is_first_microbatch_caches_the_quantized_weight():
    rec = _run(cases.weight_cache)
    assert torch.equal(rec["cached"], rec["first"])  # the weight moved by 1, the cache did not
    assert not torch.allclose(rec["recast"], rec["first"], atol=1.0)  # True re-casts in place
    assert torch.equal(rec["uncached"], rec["recast"])  # None casts afresh: the same values
    assert rec["first_workspaces"] == rec["uncached_workspaces"] == ["weight"]


def test_refusals_are_te_sentences():
    rec = _run(cases.refusals)
    assert rec["blockwise"] == ("NotImplementedError", "the TransformerEngine stand-in does not reproduce the "
                                "Float8BlockScaling recipe (--fp8-recipe blockwise): its 1x128 and 128x128 block "
                                "scales are not emulated")
    assert rec["mxfp8"] == ("AssertionError", "Device compute capability 10.0 or higher required for MXFP8 execution.")
    assert rec["nvfp4"] == ("AssertionError", "Device compute capability 10.0 or higher required for NVFP4 execution.")
    assert rec["custom"] == ("NotImplementedError", "the TransformerEngine stand-in does not reproduce CustomRecipe: "
                             "its quantizer factory is not run")
    message = ("FP8 execution requires the product of all dimensions except the last to be divisible by 8 and the "
               "last dimension to be divisible by 16, but got tensor with dims={}")
    assert rec["rows_not_multiple_of_8"] == ("AssertionError", message.format([12, 32]))
    assert rec["features_not_multiple_of_16"] == ("AssertionError", message.format([16, 24]))
    assert rec["unknown_platform"][0] == "ValueError" and "sm80" in rec["unknown_platform"][1]
    # a process a test starts: the environment switch, read when TE checks (not at import)
    assert rec["no_fp8_device"] == ("AssertionError", "Device compute capability 8.9 or higher required for FP8 "
                                    "execution.")
    assert rec["environment_sm90"] is None
    assert rec["environment_sm80"][0] == "ValueError"
    assert "TE_STANDIN_EMULATE_FP8_DEVICE" in rec["environment_sm80"][1] and "sm80" in rec["environment_sm80"][1]
    assert rec["gemm_missing_transpose"] == ("RuntimeError", "Input A is missing column-wise usage")


def test_attention_under_fp8_autocast_runs_in_the_inputs_precision():
    """TE v2.11's DotProductAttention under an FP8 autocast whose recipe has fp8_dpa and fp8_mha off attends in
    high precision (the stand-in's attention module cites the lines): outputs and input gradients are bitwise
    those without an autocast, for each per-tensor recipe and format; FP8 attention itself is refused by name.
    Also megatron-core's TEDelayedScaling keyword TE 2.0 dropped is ignored, as TE's pydantic recipe ignores it."""
    rec = _run(cases.attention_under_fp8)
    assert rec["fp8_enabled_inside"] is True
    for name, fmt in cases.RECIPES:
        got = rec[f"{name}_{fmt}"]
        assert all(torch.equal(a, b) for a, b in zip(got, rec["plain"])), f"{name} {fmt}"
    for knob in ("fp8_dpa", "fp8_mha"):
        assert rec["raised"][knob] == ("NotImplementedError", "the TransformerEngine stand-in's DotProductAttention "
                                       "does not reproduce FP8 attention (the recipe's fp8_dpa / fp8_mha)")
    assert rec["override_linear_precision"].startswith("recipe_type=DelayedScaling, margin=0, format=HYBRID")


# --- GroupedLinear (megatron's TEGroupedMLP experts) ----------------------------------------------

@pytest.fixture(scope="module")
def grouped_oracle():
    return _run(cases.grouped_undivided_vs_delayed)


@pytest.mark.parametrize("recipe", [f"{name} {fmt}" for name, fmt in cases.RECIPES])
def test_grouped_delayed_wgrad_is_bitwise_the_undivided_backward(grouped_oracle, recipe):
    """TE v2.11's GroupedLinear under FP8 (grouped_linear.py, cited in the stand-in): two layers of
    three experts over two steps of two microbatches, one expert given no rows in each, fused into main_grad with
    is_first_microbatch caching the quantized weights. backward_dw gives bitwise the outputs, input
    gradients, main_grads, bias gradients (from B under FP8), amax histories and scales of the
    undivided backward and changes no scaling state; put holds each expert's input as a Float8Tensor
    (TE's input quantizers are not internal) with its column-wise data only, in E4M3, and its
    grad_output as a storage with both usages, in the recipe's backward format."""
    undivided, delayed = grouped_oracle[recipe]["undivided"], grouped_oracle[recipe]["delayed"]
    _assert_delayed_is_undivided(undivided, delayed, lambda name: ".weight" in f".{name}")
    # FP8 rounds: the first step's outputs are not those of the same layers without FP8
    assert not torch.equal(undivided["steps"][0]["out"], grouped_oracle["no_fp8_out"])
    assert torch.allclose(undivided["steps"][0]["out"], grouped_oracle["no_fp8_out"], rtol=0.1, atol=0.1)
    if recipe.startswith("delayed"):  # every expert's used scales moved off 1 after the first step
        state = undivided["steps"][1]["state"]
        for layer in ("0", "1"):
            assert (state[f"{layer}.scaling_fwd.scale"][[0, 1, 3, 4, 6, 7]] != 1).all(), layer  # inputs, weights
            assert (state[f"{layer}.scaling_bwd.scale"][[0, 2, 4]] != 1).all(), layer  # grad outputs
    grad_dtype = torch.float8_e5m2 if recipe.endswith("HYBRID") else torch.float8_e4m3fn
    handed = delayed["handed"]
    assert len(handed) == 2 * 2 * 2  # steps x microbatches x layers
    for inputs, grad_outputs in handed:
        assert len(inputs) == len(grad_outputs) == 3
        assert all(x == ("Float8Tensor", True, {"rowwise": False, "columnwise": True}, torch.float8_e4m3fn)
                   for x in inputs), inputs
        assert all(dy == ("Float8TensorStorage", False, {"rowwise": True, "columnwise": True}, grad_dtype)
                   for dy in grad_outputs), grad_outputs


def test_grouped_fp8_on_gfx942_uses_fnuz():
    rec = _run(cases.grouped_undivided_vs_delayed, platform="gfx942", recipes=[("delayed", "HYBRID")])
    for recipe, got in rec.items():
        if recipe == "no_fp8_out":
            continue
        for step, (u, d) in enumerate(zip(got["undivided"]["steps"], got["delayed"]["steps"])):
            _assert_same(d["grads"], u["grads"], f"{recipe} step {step}")
            _assert_same(d["state"], u["state"], f"{recipe} step {step}")
        assert all(x[3] == torch.float8_e4m3fnuz for inputs, _ in got["delayed"]["handed"] for x in inputs), recipe


def test_grouped_fp8_alignment_is_te_s_and_fp8_padding_pads():
    """An expert given 5 rows: TE's forward and input-gradient GEMMs run (their k is a feature size),
    the weight-gradient GEMM (k = the expert's rows) raises TE's cuBLASLt sentence, in B when
    undelayed and in backward_dw when delayed. TE's Fp8Padding pads each expert's rows with zero rows
    to 16 and Fp8Unpadding drops them (their backwards the other way round): the same layer then
    trains, the padding rows adding nothing to the weight gradients; already aligned splits are
    returned as they are (what --moe-router-padding-for-fp8 arranges). LayerNormMLP, which megatron
    never builds, is refused by name."""
    rec = _run(cases.grouped_alignment)
    sentence = ("RuntimeError", "Leading dimension requirement on A for FP8 GEMM. Caller must pad.")
    assert rec["forward_ran_False"] == rec["forward_ran_True"] == (20, 16)
    assert rec["raised_False"] == {"backward": sentence, "backward_dw": None}
    assert rec["raised_True"] == {"backward": None, "backward_dw": sentence}
    x, padded = rec["x"], rec["padded"]
    assert rec["padded_splits"] == [16, 16] and padded.shape == (32, 32)
    assert torch.equal(padded[:5], x[:5]) and torch.equal(padded[16:31], x[5:])
    assert not padded[5:16].any() and not padded[31:].any()
    assert rec["y_rows"] == 20 and rec["aligned_is_same"] is True
    # d(sum y)/dW_e = sum over the expert's real rows of its FP8 input (scale 1 at the first step; the
    # gradient of ones is exact in E5M2): the zero rows add nothing
    for e, rows in enumerate((slice(0, 5), slice(5, 20))):
        want = x[rows].to(torch.float8_e4m3fn).float().sum(0).expand(16, 32)
        assert torch.allclose(rec["weight_grads"][e], want, rtol=1e-6, atol=1e-6), e
        assert (rec["x_grad"][rows] == rec["x_grad"][rows][0]).all(), e  # ones @ W_e: one row for all
    assert rec["layernorm_mlp"] == {"build": ("NotImplementedError", "the TransformerEngine stand-in does not "
                                              "reproduce LayerNormMLP: megatron-core 0.16.1 and 0.19 never build it")}
