"""The TransformerEngine stand-in's context-parallel attention (p2p ring, a2a, all_gather) against
its own attention without context parallelism, and its refusals against TE v2.11's.

One launch of two gloo ranks (tests/te_cp_cases.py) runs every case; each rank holds chunks r and
2*cp-1-r of one seeded sequence, as megatron's get_batch_on_this_cp_rank slices it. Its output and
dQ, dK, dV must be those of the stand-in's attention on the whole sequence (computed on rank 0
without context parallelism), sliced the same way; that reference is itself checked against a
plain softmax(Q K^T / sqrt(d)) V here."""
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


@pytest.mark.parametrize("name", list(cases.CASES))
def test_communication_happens_inside_both_forward_and_backward(launch, name):
    comm = cases.CASES[name][0]
    forward, backward = COMM["p2p" if comm == "a2a+p2p" else comm]
    for rank in range(CP):
        got = launch[rank]["results"][name]
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
    # what TE does and the stand-in does not reproduce: its own NotImplementedError
    "thd": ("NotImplementedError", STANDIN_PREFIX + "qkv_format='thd'"),
    "p2p_post_scale_bias": ("NotImplementedError", STANDIN_PREFIX + "attention bias under context parallelism"),
    "dropout_in_training": ("NotImplementedError", STANDIN_PREFIX + "attention dropout under context parallelism"),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_refusals_match_transformer_engine(launch, name):
    for rank in range(CP):
        assert launch[rank]["refusals"][name] == REFUSALS[name], (name, rank)


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
