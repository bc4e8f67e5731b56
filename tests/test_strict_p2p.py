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

# hanging ones last (nothing after them); _per_direction: on a process group per direction
SCENARIOS = ["send_first_batch", "send_first_per_direction", "head_of_line_per_direction", "send_first",
             "head_of_line"]


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


@pytest.mark.parametrize("scenario", ["send_first", "head_of_line"])
def test_the_same_orders_pass_strict_on_a_group_per_direction(orders, scenario):
    """--pipeline-p2p-groups per-direction: what rank 0 sends to rank 1 and what rank 1 sends to rank 0
    are on two groups, so two queues per rank: the orders above that hold each other on one queue
    complete (the queue model's hand-made case, test_schedule_rejections.py)."""
    for rank in (0, 1):
        assert orders["strict"][rank][scenario + "_per_direction"] == ("ok", [float(2 - rank)] * 4), rank


def test_a_batch_progresses_together(orders):
    for mode in ("strict", "plain"):
        for rank in (0, 1):
            assert orders[mode][rank]["send_first_batch"] == ("ok", [float(2 - rank)] * 4), (mode, rank)


def test_lazy_init_first_contact_blocks_the_host_until_the_peer_posts():
    """strict-lazy: the first lone op between two ranks is a rendezvous on the host (the two-rank
    communicator's creation); strict (eager init) posts without waiting. A peer that never posts
    to this rank is named as the post's failure."""
    late = 1.5
    out = {mode: H.run_ranks({"body": H.first_contact_body, "pp": 2, "mode": mode, "late_s": late,
                              "timeout_s": 20}, 2, timeout_s=120)[0] for mode in ("strict", "strict-lazy")}
    assert out["strict"]["outcome"] == "sent" and out["strict"]["posted_s"] < late / 2, out
    # and the send completed only once the receive was posted: gloo's sends are rendezvous sends,
    # which the strict mode's "at least as strict as NCCL" rests on (runtime/strict_p2p.py)
    assert out["strict"]["sent_s"] > late * 0.8, out
    assert out["strict-lazy"]["outcome"] == "sent" and out["strict-lazy"]["posted_s"] > late * 0.8, out
    never = H.run_ranks({"body": H.first_contact_body, "pp": 2, "mode": "strict-lazy", "late_s": 4, "never": True,
                         "timeout_s": 1}, 2, timeout_s=120)[0]
    assert never["posted_s"] < 3.5, never
    for needle in ("pipeline rank 0", "failed to post in op F0", "pipeline rank 1", "first contact with global rank 1"):
        assert needle in never["outcome"], (needle, never)


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


def test_the_products_lowering_runs_strict_lazy():
    """The product's lowering posts every posting as a Batch, single ops included. Under lazy init a
    batch of one is still a batch (torch's batch_isend_irecv coalesces it; its first use creates the
    group's communicator, a rendezvous of every rank), not a lone op (the pair's communicator): a
    mode that took a one-op batch for a lone op would meet one rank's pairwise first contact with
    the other's group creation and hang here (it did, in zbv at pp=2). Same losses and gradients as
    the reference."""
    cases = [{"schedule": name, "microbatches": 4, "options": {"p2p_timeout_s": 30, "p2p_mode": "strict-lazy"}}
             for name in ("zbv", "1f1b")]
    per_rank = H.run_ranks({"body": H.cases_body, "pp": 2, "num_layers": 4, "cases": cases}, 2, timeout_s=300)
    for i in range(len(cases)):
        results = [r[i] for r in per_rank]
        for rank, res in enumerate(results):
            assert "error" not in res, f"{cases[i]['schedule']} rank {rank}: {res['error']}"
        _assert_same(results, f"{cases[i]['schedule']}, the product's lowering, strict-lazy")


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


def test_watchdog_names_a_rank_that_never_sends_and_every_rank_exits_nonzero(tmp_path):
    """Issue 28 (4): with waits on the device (no host timeout), the watchdog thread names the
    oldest pending p2p op (rank, op, peer, microbatch) and ends every stuck rank non-zero, in
    bounded time (well before the process group's own 60 s timeout)."""
    import time

    from primus_megatron.runtime import watchdog

    started = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        H.run_ranks({"body": H.watchdog_body, "pp": 2, "timeout_s": 2.0, "report_dir": str(tmp_path)}, 2,
                    timeout_s=120)
    elapsed = time.monotonic() - started
    text = str(info.value)
    assert elapsed < 40, elapsed
    hung = f"failed:\nits process exited with code {watchdog.HANG_EXIT_CODE}"
    # Whichever watchdog fires first ends its process; the other rank's watchdog fires too, or its wait
    # fails first on the closed connection (a PipelineTimeout naming the same wait): non-zero either way.
    names = {0: "the receive of gradient mb0 stage 1->0 from pipeline rank 1 (global 1) in op B0 (microbatch 0, "
                "chunk 0, stage 0)",
             1: "the receive of activation mb1 stage 0->1 from pipeline rank 0 (global 0) in op F1 (microbatch 1"}
    fired = 0
    for rank, needle in names.items():
        if f"rank {rank} {hung}" in text:
            report = (tmp_path / f"hang-rank{rank}.txt").read_text()
            assert report.startswith(f"pipeline rank {rank} (global {rank}): p2p watchdog: {needle}"), report
            assert "(limit 2 s;" in report and "watchdog_body" in report  # the stacks of every thread follow
            fired += 1
        else:
            plain = needle.replace("the receive", "receive").split(" in op ")
            assert f"rank {rank} failed:\nPipelineTimeout: pipeline rank {rank}" in text and plain[0] in text, text
    assert fired >= 1, text


class _Work:
    def __init__(self):
        self.calls = []

    def wait(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return True

    def is_completed(self):
        return True


def test_nccl_waits_are_on_the_device_and_gloo_waits_on_the_host(monkeypatch):
    """The wait mode follows the process group's backend (no flag): on NCCL/RCCL `work.wait()`
    carries no timeout (the current stream waits, the host goes on: WorkNCCL::wait polls the host
    only when given one), on gloo it carries the p2p timeout."""
    import torch.distributed as dist

    from primus_megatron.runtime import p2p as P

    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(dist, "get_global_rank", lambda group, r: r)
    for backend, waits, mode in (("nccl", "device", "native"), ("gloo", "host", "plain")):
        monkeypatch.setattr(dist, "get_backend", lambda group=None, b=backend: b)
        link = P.P2P(object(), 0, 7.0, "plain")
        assert (link.waits, link.mode) == (waits, mode)
        work = _Work()
        link.wait(P._Pending(work, torch.zeros(1), "activation mb0 stage 0->1", 1), op="F0")
        (args, kwargs), = work.calls
        assert (args, kwargs) == (((), {}) if waits == "device" else ((), {"timeout": __import__("datetime").timedelta(seconds=7.0)}))


def test_strict_is_the_default_and_plain_an_option(monkeypatch):
    """Both training entry points (examples/pretrain_gpt.py and the Megatron-LM plugin) build their
    runner with get_forward_backward_func and no p2p mode: strict unless $PRIMUS_PIPELINE_P2P says
    otherwise; a wrong value is one sentence naming the option, before any process group."""
    import primus_megatron as pm

    monkeypatch.delenv("PRIMUS_PIPELINE_P2P", raising=False)
    assert pm.get_forward_backward_func("1f1b").p2p_mode == "strict"
    assert pm.get_forward_backward_func("1f1b", p2p_mode="plain").p2p_mode == "plain"
    monkeypatch.setenv("PRIMUS_PIPELINE_P2P", "strict-lazy")
    assert pm.get_forward_backward_func("zbv").p2p_mode == "strict-lazy"
    monkeypatch.setenv("PRIMUS_PIPELINE_P2P", "eager")
    with pytest.raises(ValueError, match=r"^p2p mode 'eager' \(option p2p_mode or \$PRIMUS_PIPELINE_P2P\) is not one "
                                         r"of strict, strict-lazy, plain$"):
        pm.get_forward_backward_func("1f1b")
