"""The TransformerEngine stand-in's context-parallel attention (p2p ring, a2a, all_gather) against
its own attention without context parallelism, and its refusals against TE v2.11's.

One launch of two gloo ranks (tests/te_cp_cases.py) runs every case; each rank holds chunks r and
2*cp-1-r of one seeded sequence, as megatron's get_batch_on_this_cp_rank slices it. Its output and
dQ, dK, dV must be those of the stand-in's attention on the whole sequence (computed on rank 0
without context parallelism, in fp32), sliced the same way; that reference is itself checked
against a plain softmax(Q K^T / sqrt(d)) V here.

Precision. TE v2.11 has no context-parallel backend for fp32 (utils.py 436-465 keep flash and fused
attention to fp16/bf16, 756-760 take the unfused one off under CP: "No dot product attention backend
is available", dot_product_attention.py 1396-1401), and neither has the stand-in now. So each case
runs twice: (1) in fp32 through attention_with_cp (TE's attn_forward_func_with_cp), called below
DotProductAttention's dtype refusal, to fp32 rounding (RTOL, ATOL): the ring's arithmetic itself;
(2) in bf16 and in fp16 through DotProductAttention, as megatron calls it, to 2 eps of the dtype
(HALF_TOL): the output is rounded once to the dtype, and the gradients a few times (the saved
output, dKV accumulated in the input dtype round the ring, as TE does); measured: bf16 within
|a - e| <= 1.6e-2 |e| + 4.8e-3, fp16 within 2e-3 |e| + 6e-4, against gradients up to ~5. A wrong
ring step, chunk or scale is O(1) off. The ring of four runs its p2p function directly, in fp32."""
from __future__ import annotations

import math
import os

import pytest
import torch

import te_cp_cases as cases
from primus_megatron.runtime.local_ranks import run_ranks

STANDIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "te_standin")
CP = 2
RTOL, ATOL = 1e-5, 1e-6
HALF_TOL = {label: 2 * torch.finfo(dtype).eps for label, dtype in cases.HALF.items()}  # rtol = atol


@pytest.fixture(scope="module")
def launch():
    return run_ranks(cases.run_cases, {"pp": 1}, CP, timeout_s=120, sys_path=[STANDIN])


def _plain_attention(name: str) -> dict:
    """softmax(Q K^T / sqrt(d)) V by autograd, independent of the stand-in."""
    _, _, mask, heads, groups, _ = cases.CASES[name]
    inputs = cases.full_inputs(name)
    q, k, v = (inputs[n].clone().requires_grad_() for n in "qkv")
    kk, vv = (x.repeat_interleave(heads // groups, dim=2) for x in (k, v))
    scores = torch.einsum("sbhd,tbhd->bhst", q, kk) / math.sqrt(q.shape[-1])
    if mask == "causal":
        scores = scores.masked_fill(torch.ones(cases.S, cases.S, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.einsum("bhst,tbhd->sbhd", scores.softmax(-1), vv).reshape(cases.S, cases.B, -1)
    out.backward(inputs["dout"])
    return {"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}


@pytest.mark.parametrize("name", list(cases.CASES))
def test_context_parallel_output_and_gradients_equal_attention_on_the_whole_sequence(launch, name):
    reference = launch[0]["references"][name]
    for rank in range(CP):
        got = launch[rank]["results"][name]
        for key in ("out", "dq", "dk", "dv"):
            want = cases.load_balanced(reference[key], rank, CP)
            torch.testing.assert_close(got[key], want, rtol=RTOL, atol=ATOL, msg=f"{name} rank {rank} {key}")
    plain = _plain_attention(name)
    for key in ("out", "dq", "dk", "dv"):
        torch.testing.assert_close(reference[key], plain[key], rtol=1e-4, atol=1e-5, msg=f"{name} reference {key}")


# what each communication type sends in F and in B on 2 ranks (TE: the ring's cp-1 KV transfers
# in F and cp transfers of KV / dKV in B; a2a's all-to-alls of q, k, v then out, of dout then
# dq, dk, dv; all_gather's K, V gathers, again in B, and the dK, dV reduce-scatters, which gloo does
# as all-reduces)
COMM = {
    "p2p": ({"isend": 1, "irecv": 1}, {"isend": 2, "irecv": 2}),
    "a2a": ({"all_to_all_single": 4}, {"all_to_all_single": 4}),
    "all_gather": ({"all_gather": 2}, {"all_gather": 2, "all_reduce": 2}),
}


@pytest.mark.parametrize("label", list(cases.HALF))
@pytest.mark.parametrize("name", list(cases.CASES))
def test_16_bit_context_parallel_attention_equals_attention_on_the_whole_sequence(launch, name, label):
    """bf16 / fp16 through DotProductAttention (the dtypes TE's context-parallel backends take),
    against the fp32 reference on the same (bf16-valued) inputs, to 2 eps of the dtype."""
    reference, tol = launch[0]["references"][name], HALF_TOL[label]
    for rank in range(CP):
        got = launch[rank]["half"][label][name]
        for key in ("out", "dq", "dk", "dv"):
            assert got[key].dtype == cases.HALF[label], (name, label, key, got[key].dtype)
            want = cases.load_balanced(reference[key], rank, CP)
            torch.testing.assert_close(got[key].float(), want, rtol=tol, atol=tol,
                                       msg=f"{name} {label} rank {rank} {key}")


@pytest.mark.parametrize("name", list(cases.CASES))
def test_communication_happens_inside_both_forward_and_backward(launch, name):
    comm = cases.CASES[name][0]
    forward, backward = COMM["p2p" if comm == "a2a+p2p" else comm]
    for rank in range(CP):
        for got in (launch[rank]["results"][name], *(launch[rank]["half"][label][name] for label in cases.HALF)):
            assert {c: n for c, n in got["forward_comm"].items() if n} == forward, (name, rank)
            assert {c: n for c, n in got["backward_comm"].items() if n} == backward, (name, rank)
    assert not any(launch[0]["references"][name]["forward_comm"].values())


NO_BACKEND = ("ValueError", "No dot product attention backend is available for the provided inputs. Please run "
              "with NVTE_DEBUG=1 NVTE_DEBUG_LEVEL=2 to find out the reasons for disabling all backends.")
HEADS = ("AssertionError", "The number of attention heads needs to be divisible by CP size!")
HEAD_DIM = ("AssertionError", "Hidden size per attention head should be multiple of 8!")
SEQ = ("AssertionError", "Sequence length per GPU needs to be divisible by 2!")
STANDIN_PREFIX = "the TransformerEngine stand-in's DotProductAttention does not reproduce "
REFUSALS = {  # TE v2.11's exception type and message (context_parallel.py, backends.py, utils.py)
    "unknown_comm_type": ("ValueError", "Unsupported communication type: ring!"),
    "a2a_heads_not_divisible": HEADS,
    "a2a_gqa_groups_not_divisible": HEADS,
    "a2a_head_dim_not_multiple_of_8": HEAD_DIM,
    "all_gather_head_dim_not_multiple_of_8": HEAD_DIM,
    "a2a_mla": ("AssertionError", "Context parallelism does not support MLA with {cp_comm_type=}!"),
    "all_gather_mla": ("AssertionError", "Context parallelism does not support MLA with {cp_comm_type=}!"),
    "p2p_odd_local_sequence": SEQ,
    "a2a_odd_local_sequence": SEQ,
    "padding_causal": ("AssertionError", "Padding mask not supported with context parallelism!"),
    "causal_bottom_right": NO_BACKEND,
    "arbitrary_mask": NO_BACKEND,
    "alibi": NO_BACKEND,
    "causal_cross_attention": NO_BACKEND,
    "p2p_sliding_window": ("AssertionError",
                           "Context parallelism does not support sliding window attention with {cp_comm_type=}!"),
    "a2a_post_scale_bias": ("AssertionError", "post_scale_bias bias type is not supported!"),
    "a2a+p2p_one_group": ("AssertionError",
                          "CP implementation a2a+p2p requires cp_group = [a2a_cp_group, p2p_cp_group]!"),
    "p2p_group_list": ("AssertionError",
                       f"cp_group must be {torch.distributed.ProcessGroup} type for cp_comm_type='p2p'!"),
    # TE's thd checks come first (dot_product_attention.py 1106-1117)
    "thd_4d": ("AssertionError", "Queries, keys and values must be 3D tensors when qkv_format = thd!"),
    # no context-parallel backend for fp32, thd or not (utils.py 436-465, 756-760)
    "thd_fp32": NO_BACKEND,
    # what TE does and the stand-in does not reproduce: its own NotImplementedError
    "thd": ("NotImplementedError", STANDIN_PREFIX + "qkv_format='thd' under context parallelism"),
    "p2p_post_scale_bias": ("NotImplementedError", STANDIN_PREFIX + "attention bias under context parallelism"),
    "dropout_in_training": ("NotImplementedError", STANDIN_PREFIX + "attention dropout under context parallelism"),
    # no context-parallel backend for fp32 / fp64 (utils.py 436-465, 756-760); fp8 e4m3 would reach
    # TE's FusedAttention (utils.py 444), whose FP8 path the stand-in does not reproduce
    "p2p_fp32": NO_BACKEND,
    "a2a_fp32": NO_BACKEND,
    "all_gather_fp64": NO_BACKEND,
    "a2a+p2p_reduced_fp32": NO_BACKEND,
    "fp8_e4m3": ("NotImplementedError", STANDIN_PREFIX + "FP8 attention"),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_refusals_match_transformer_engine(launch, name):
    for rank in range(CP):
        assert launch[rank]["refusals"][name] == REFUSALS[name], (name, rank)


def test_fp32_under_context_parallelism_is_refused_as_te_refuses_it_and_bf16_runs(launch):
    """TE v2.11 raises ValueError("No dot product attention backend is available ...") for fp32 q, k, v
    with a CP group of more than one rank (no backend left: utils.py 436-465, 756-760;
    dot_product_attention.py 1396-1401); the same configuration in bf16 runs, and fp32 without CP
    (the unfused backend) too."""
    for rank in range(CP):
        assert launch[rank]["refusals"]["p2p_fp32"] == NO_BACKEND, rank
        bf16 = launch[rank]["half"]["bf16"]["p2p_causal_sbhd"]
        assert bf16["out"].dtype == torch.bfloat16 and bool(torch.isfinite(bf16["out"]).all())
    assert launch[0]["references"]["p2p_causal_sbhd"]["out"].dtype == torch.float32


def test_a_ring_of_four_equals_attention_on_the_whole_sequence_and_turns_as_te_does(launch):
    """Four ranks simulated in one process (threads, messages through queues): the middle ring
    steps, where KV and the dKV accumulated so far travel together, and the ring's direction, which
    two ranks cannot show: F sends to cp_global_ranks[rank+1], B to cp_global_ranks[rank-1]."""
    ring = launch[0]["ring_of_four"]
    assert not ring["errors"], ring["errors"]
    n = cases.RING
    for rank in range(n):
        for key in ("out", "dq", "dk", "dv"):
            want = cases.load_balanced(ring["reference"][key], rank, n)
            torch.testing.assert_close(ring["results"][rank][key], want, rtol=RTOL, atol=ATOL,
                                       msg=f"ring rank {rank} {key}")
    peers = cases.RING_GLOBAL_RANKS
    for phase, step, count in (("forward", 1, n - 1), ("backward", -1, n)):
        for rank in range(n):
            sent = [dst for p, r, dst in ring["sends"] if p == phase and r == rank]
            assert sent == [peers[(rank + step) % n]] * count, (phase, rank, sent)
