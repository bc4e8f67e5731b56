"""The TransformerEngine stand-in's qkv_format="thd" (packed sequences, megatron-core's
PackedSeqParams), as TE v2.11 runs it (the stand-in's module doc cites the lines), on CPU in a
process of its own with tests/te_standin first on its path (tests/te_thd_cases.py):

* each sequence of a pack attends only to itself: thd output and q/k/v gradients equal the
  stand-in's own sbhd attention on each sequence alone, in fp32 and in bf16. Exactly: the
  stand-in computes sequence i as the sbhd path computes a batch of one (the same operations on
  the same values), so bf16 needs no tolerance here either; TE's own kernels agree with it up to
  rounding (tests/test_te_standin_conformance.py on a GPU);
* rows outside every sequence follow the backend TE picks for the dtype: bf16 (cuDNN's fused
  attention) zeroes them and passes them no gradient, padding between sequences included
  (cu_seqlens_*_padded); fp32 (TE's unfused backend) returns only cu_seqlens_q[-1] rows;
* TE's own checks raise TE's AssertionError messages; what TE runs and the stand-in does not
  reproduce raises the stand-in's NotImplementedError;
* megatron-core's GPTModel over TE layers (RoPE, grouped-query attention) fed a pack from
  packed_batch.pack as packed_seq_params gives each sample's per-token losses as the sample run
  alone, and the same embedding gradient; without packed_seq_params it does not.
"""
from __future__ import annotations

import os

import pytest
import torch

import megatron_reference as ref
import te_thd_cases as cases
from primus_megatron.runtime import local_ranks

STANDIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "te_standin")
NOT_REPRODUCED = "the TransformerEngine stand-in's DotProductAttention does not reproduce "


def _run(body, **case) -> dict:
    return local_ranks.run_ranks(body, {"pp": 1, **case}, 1, timeout_s=300, sys_path=[STANDIN])[0]


@pytest.fixture(scope="module")
def attention():
    return _run(cases.attention)


def _assert_alone(thd: dict, alone: list, what: str) -> None:
    for seq in alone:
        rows = slice(seq["start"], seq["start"] + seq["n"])
        for key in ("out", "dq", "dk", "dv"):
            assert torch.equal(thd[key][rows], seq[key]), \
                f"{what}: {key} of the sequence at {seq['start']} (length {seq['n']}) differs from it run alone"


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("mask", ["padding_causal", "padding"])
def test_each_sequence_attends_as_it_would_alone(attention, mask, dtype):
    thd, alone = attention[f"pack_{mask}_{dtype}"]
    assert thd["out"].shape == (16, cases.HEADS * cases.D)
    _assert_alone(thd, alone, f"{mask} {dtype}")
    # max_seqlen left to TE (rounded up to 64) computes the same
    assert torch.equal(attention[f"no_max_seqlen_{dtype}"], attention[f"pack_padding_causal_{dtype}"][0]["out"])


def test_rows_outside_every_sequence_follow_the_backend(attention):
    full = attention["pack_padding_causal_bf16"][0]
    tail = attention["uncovered_tail_bf16"]  # cuDNN's fused attention: all 16 rows, the last zeroed
    assert tail["out"].shape == (16, cases.HEADS * cases.D)
    assert torch.equal(tail["out"][:15], full["out"][:15]) and not tail["out"][15].any()
    assert not tail["dq"][15].any() and not tail["dk"][15].any() and not tail["dv"][15].any()
    fp32 = attention["uncovered_tail_fp32"]  # TE's unfused backend: cu_seqlens_q[-1] rows
    assert fp32["out"].shape == (15, cases.HEADS * cases.D)
    assert torch.equal(fp32["out"], attention["pack_padding_causal_fp32"][0]["out"][:15])
    thd, alone = attention["padded_bf16"]  # sequences at [0, 5), [6, 9), [10, 17) of 18 rows
    _assert_alone(thd, alone, "padding between sequences")
    for row in (5, 9, 17):
        assert not thd["out"][row].any() and not thd["dq"][row].any() and not thd["dk"][row].any(), row


REFUSALS = {
    # dot_product_attention.py 1106-1117 (TE v2.11)
    "4d_inputs": ("AssertionError", "Queries, keys and values must be 3D tensors when qkv_format = thd!"),
    "causal_mask_type": ("AssertionError", "Attention mask type must be padding or padding_causal for qkv_format=thd!"),
    "no_mask": ("AssertionError", "Attention mask type must be padding or padding_causal for qkv_format=thd!"),
    "no_cu_seqlens": ("AssertionError", "cu_seqlens_q and cu_seqlens_kv can not be None when qkv_format = thd!"),
    "int64_cu_seqlens": ("AssertionError", "cu_seqlens_q and cu_seqlens_q must both be in dtype torch.int32!"),
    "cu_seqlens_shapes_differ": ("AssertionError",
                                 "cu_seqlens_q and cu_seqlens_q must both have shape [batch_size + 1]!"),
    # TE runs these (or reads past its tensors); the stand-in does not reproduce them
    "fp32_padding_between": ("NotImplementedError", NOT_REPRODUCED + "padding between sequences"),
    "fp32_attention_mask": ("NotImplementedError", NOT_REPRODUCED + "an attention_mask with qkv_format='thd' in fp32"),
    "post_scale_bias": ("NotImplementedError", NOT_REPRODUCED + "attention bias with qkv_format='thd'"),
    "max_seqlen_short": ("NotImplementedError", NOT_REPRODUCED + "max_seqlen 4 below a sequence's length 5"),
    "cu_seqlens_past_the_tokens": ("NotImplementedError", NOT_REPRODUCED + "cu_seqlens [0, 3, 9]"),
    "fp64": ("NotImplementedError", NOT_REPRODUCED + "qkv_format='thd' in torch.float64"),
}


def test_refusals(attention):
    got = attention["refusals"]
    assert sorted(got) == sorted(REFUSALS)
    for name, (kind, message) in REFUSALS.items():
        assert got[name] is not None, f"{name}: nothing raised"
        assert got[name][0] == kind and got[name][1].startswith(message), f"{name}: {got[name]}"


@pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_packed_sample_trains_as_it_would_alone_on_te_layers(dtype):
    """tests/test_replica_counts.py's check for megatron's local layers, on TE layers through thd.
    Per-token losses: exactly (the same operations per token; attention per sequence). The
    embedding gradient sums every token's share in another order (one pack against three runs):
    1e-6 of its largest value in fp32, one bf16 step (2^-8) in bf16."""
    res = _run(cases.gpt, dtype=dtype)
    assert res["cu_seqlens"].tolist() == [0, 5, 14, 17, 20] and res["max_seqlen"] == 9
    start, crossed = 0, 0.0
    for own in res["alone"]:
        n = own.shape[1]
        assert torch.equal(res["packed"][0, start:start + n], own[0]), f"the sample at {start} (length {n})"
        crossed = max(crossed, float((res["unpacked"][0, start:start + n] - own[0]).abs().max()))
        start += n
    assert crossed > 1e-2, "without packed_seq_params the samples should see each other"
    scale = float(res["alone_grad"].abs().max())
    tol = 1e-6 if dtype == "fp32" else 2.0 ** -8
    assert float((res["packed_grad"] - res["alone_grad"]).abs().max()) <= tol * scale
