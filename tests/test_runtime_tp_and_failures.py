"""Tensor parallel x pipeline parallel, sequence-parallel deferred weight
gradients, and failures that must be loud (a silent peer, a split that
defers nothing)."""
from __future__ import annotations

import pytest
import torch

import megatron_reference as ref
import pipeline_harness as H

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")

TP_CASES = ([{"schedule": s, "microbatches": 3} for s in ("megatron-1f1b", "zb-h1", "zbv", "v-min")]
            + [{"schedule": s, "microbatches": 3, "fusion": True, "config": {"gradient_accumulation_fusion": True}}
               for s in ("megatron-1f1b", "zb-h1", "zbv")])


@pytest.fixture(scope="module")
def tp_results():
    return H.run_ranks({"body": H.tp_body, "tp": 2, "pp": 2, "num_layers": 4, "cases": TP_CASES}, 4, timeout_s=600)


def _per_tp_rank(results, i, tp_rank):
    rows = [r[i] for r in results if r[i]["tp_rank"] == tp_rank]
    return [x for row in rows for x in row["losses"]], ref.merge_grads([row["grads"] for row in rows])


@pytest.mark.parametrize("tp_rank", [0, 1])
def test_tensor_parallel_2_x_pipeline_2_matches_megatron_1f1b(tp_results, tp_rank):
    baseline = {c.get("fusion", False): i for i, c in enumerate(TP_CASES) if c["schedule"] == "megatron-1f1b"}
    for i, case in enumerate(TP_CASES):
        if case["schedule"] == "megatron-1f1b":
            continue
        assert all(r[baseline[case.get("fusion", False)]]["oracle_linear"] == [ref.MEGATRON_LINEAR] * 2
                   for r in tp_results), "megatron's 1F1B (the oracle) ran through our linear hook"
        losses, grads = _per_tp_rank(tp_results, i, tp_rank)
        m_losses, m_grads = _per_tp_rank(tp_results, baseline[case.get("fusion", False)], tp_rank)
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(m_losses), rtol=1e-5, atol=1e-7)
        assert set(grads) == set(m_grads) and len(grads) > 10
        for name in m_grads:
            torch.testing.assert_close(grads[name], m_grads[name], rtol=1e-5, atol=1e-7,
                                       msg=lambda m: f"{case} tp rank {tp_rank} {name}: {m}")


def test_sequence_parallel_wgrad_does_not_read_the_shared_gather_buffer():
    results = H.run_ranks({"body": H.sp_linear_body, "tp": 2, "pp": 1}, 2, timeout_s=300)
    for res in results:
        assert res["count"] == 2  # both layers deferred their weight gradient
        # B -> W keeps (grad_output, input) per layer; the column layer's backward runs last and its
        # input is the sequence-parallel shard, not the tp-times larger gathered input
        assert res["held"][-1] == res["shard"], res["held"]
        for eager, deferred in zip(res["eager"], res["deferred"]):
            assert torch.isfinite(deferred).all()
            torch.testing.assert_close(deferred, eager, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("recv_policy, p2p_groups", [("early", "one"), ("just-in-time", "per-direction")])
def test_a_silent_peer_times_out_with_rank_op_peer_and_microbatch_named(recv_policy, p2p_groups):
    """Under either receive policy and either group layout (per-direction: the gradient waited for
    comes on the second group) the waiting rank names its op, the message and the peer. The
    silent rank would come back after 600 s (or once rank 0 has its answer): a PipelineTimeout with
    the 3 s limit can only be the timeout firing first, however slow the machine."""
    case = {"schedule": "zb-h1", "microbatches": 3, "num_layers": 4,
            "options": {"p2p_timeout_s": 3, "recv_policy": recv_policy, "p2p_groups": p2p_groups}}
    results = H.run_ranks({"body": H.silent_rank_body, "pp": 2, "silent_s": 600, "cases": [case]}, 2,
                          timeout_s=900)
    res = results[0]
    assert res["error_type"] == "PipelineTimeout", res
    msg = res["message"]
    for needle in ("pipeline rank 0", "(limit 3 s)", "in op B0 (microbatch 0, chunk 0", "gradient mb0 stage 1->0", "from pipeline rank 1"):
        assert needle in msg, (needle, msg)
    assert res["elapsed"] < 600, "the timeout must fire before the peer comes back"


def test_w_whose_b_deferred_nothing_fails_loudly():
    case = {"schedule": "zb-h1", "microbatches": 2, "options": {"p2p_timeout_s": 20}, "break_hooks": True}
    results = H.run_ranks({"body": H.cases_body, "pp": 2, "num_layers": 4, "cases": [case]}, 2, timeout_s=300)
    for res in results:
        assert "WeightGradStoreError" in res[0]["error"]
        assert "found no deferred weight gradient" in res[0]["error"]
