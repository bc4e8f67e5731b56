"""The strict p2p mode (runtime/strict_p2p.py) runs a rank's communication as NCCL would.

Gloo accepts orders that hang on the GPU; in strict mode (the default on CPU) they time out,
named, as they would hang under NCCL: one ordered queue per process group (an unmatched
receive at the head holds everything behind it; a send completes only once its receive is
active on the peer), the ops of a batch progressing together. The plain mode (gloo as it is)
accepts the same orders: that contrast is the break-check of every test here.
"""
from __future__ import annotations

import pytest
import torch

import megatron_reference as ref
import pipeline_harness as H
import strict_lowerings
from primus_megatron import schedules as S

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")

SCENARIOS = ["send_first_batch", "send_first", "head_of_line"]  # hanging ones last (nothing after them)


@pytest.fixture(scope="module")
def orders():
    """Each p2p order on 2 ranks, strict then plain (one process group per scenario)."""
    out = {}
    for mode in ("strict", "plain"):
        out[mode] = H.run_ranks({"body": H.p2p_order_body, "pp": 2, "mode": mode, "scenarios": SCENARIOS,
                                 "timeout_s": 1.5}, 2, timeout_s=120)
    return out


@pytest.mark.parametrize("scenario", ["send_first", "head_of_line"])
def test_orders_that_hang_under_nccl_time_out_strict_and_pass_plain(orders, scenario):
    for rank in (0, 1):
        status, text = orders["strict"][rank][scenario]
        assert status == "timeout", (rank, text)
        assert f"pipeline rank {rank}" in text and f"pipeline rank {1 - rank}" in text, text
        assert "strict p2p" in text and "queue is held by the" in text, text
        status, got = orders["plain"][rank][scenario]
        assert status == "ok" and got == [float(2 - rank)] * 4, (rank, got)


def test_a_batch_progresses_together(orders):
    for mode in ("strict", "plain"):
        for rank in (0, 1):
            assert orders[mode][rank]["send_first_batch"] == ("ok", [float(2 - rank)] * 4), (mode, rank)


def test_the_old_interleaved_lowering_deadlocks_strict_and_passes_on_plain_gloo():
    """Issue 28's break-check: interleaved-1f1b at pp=4, m=8, lowered as before the NCCL-order
    lowering (rank 0 posts four receives from rank 3 before F0): under NCCL's ordering the cycle
    0 -> 3 -> 2 -> 1 -> 0 deadlocks step 1. Plain gloo runs it (and computes the right
    gradients); strict mode times out on every rank, named."""
    sched = S.generate("interleaved-1f1b", 4, 8, validate=False)
    first = strict_lowerings.hoisted(sched).ranks[0][:5]
    assert [type(i).__name__ for i in first] == ["Recv"] * 4 + ["Op"] and {i.peer for i in first[:4]} == {3}
    base = {"schedule": "interleaved-1f1b", "microbatches": 8, "lowering": "hoisted"}
    cases = [{**base, "options": {"p2p_timeout_s": 30, "p2p_mode": "plain"}},
             {**base, "options": {"p2p_timeout_s": 3, "p2p_mode": "strict"}}]
    per_rank = H.run_ranks({"body": H.cases_body, "pp": 4, "num_layers": 8, "cases": cases}, 4, timeout_s=300)
    plain = [r[0] for r in per_rank]
    for rank, res in enumerate(plain):
        assert "error" not in res, f"rank {rank}: {res['error']}"
    _assert_same(plain, "interleaved-1f1b (old lowering) on plain gloo")
    for rank, res in enumerate(r[1] for r in per_rank):
        assert "PipelineTimeout" in res.get("error", ""), (rank, res)
        assert f"pipeline rank {rank} " in res["error"] and "(limit 3 s)" in res["error"], res["error"]
        assert "microbatch" in res["error"] and "strict p2p" in res["error"], res["error"]


def test_batch_items_run_in_the_executor_strict():
    """Hand-built Batch items (each run of consecutive sends and receives posted as one
    batch_isend_irecv) through the executor in strict mode: the same losses and gradients as the
    reference, for a one-chunk and a V schedule."""
    cases = [{"schedule": name, "microbatches": 4, "lowering": "batched",
              "options": {"p2p_timeout_s": 30, "p2p_mode": "strict"}} for name in ("1f1b", "zbv")]
    per_rank = H.run_ranks({"body": H.cases_body, "pp": 2, "num_layers": 4, "cases": cases}, 2, timeout_s=300)
    for i in range(len(cases)):
        results = [r[i] for r in per_rank]
        for rank, res in enumerate(results):
            assert "error" not in res, f"{cases[i]['schedule']} rank {rank}: {res['error']}"
        _assert_same(results, f"{cases[i]['schedule']} with Batch items, strict")


def _assert_same(results: list, what: str) -> None:
    """Losses and every gradient equal the non-pipelined reference (rank 0 holds it)."""
    losses = [x for res in results for x in res["losses"]]
    assert len(losses) == len(results[0]["ref_losses"]), what
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(results[0]["ref_losses"]), rtol=1e-5, atol=1e-7,
                               msg=lambda m: f"{what} losses: {m}")
    grads = ref.merge_grads([res["grads"] for res in results])
    assert set(grads) == set(results[0]["ref_grads"]), what
    for name, g in results[0]["ref_grads"].items():
        torch.testing.assert_close(grads[name], g, rtol=1e-5, atol=1e-7, msg=lambda m: f"{what} grad {name}: {m}")
