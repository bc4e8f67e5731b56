"""Data-parallel replicas with microbatch counts of their own (`--pipeline-balance-data`, issue 40):
the per-step checks (runtime/replica_counts.py) and the packed microbatch (train/packed_batch.py).
The gradients of balanced and plain splits are the production matrix's l-balance-* rows."""
from __future__ import annotations

import pytest
import torch

import megatron_reference as ref
import pipeline_harness as H
from primus_megatron import schedules as S
from primus_megatron.runtime.replica_counts import replica_fingerprint

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")


@pytest.mark.parametrize("name", [n for n in S.names() if n != "zb-optimal"])
@pytest.mark.parametrize("pp", [2, 4])
def test_every_schedule_reduces_its_chunks_in_one_order_whatever_the_count(name, pp):
    """Replicas of different counts meet in DDP's reduces and gathers: every built-in schedule's
    chunk order (first forward, last gradient op per rank) is the same for every count."""
    prints = {m: replica_fingerprint(S.generate(name, pp, m)) for m in range(1, 3 * pp + 2)}
    assert len(set(prints.values())) == 1, prints


def test_the_replica_fingerprint_sees_the_chunk_order():
    """Swapping which chunk finishes last on a rank changes the fingerprint (what the check compares)."""
    sched = S.generate("zbv", 2, 4)
    ops = list(sched.ranks[0])
    last = {c: max(i for i, op in enumerate(ops) if op.kind == S.W and op.chunk == c) for c in (0, 1)}
    i, j = sorted(last.values())
    ops[i], ops[j] = ops[j], ops[i]
    swapped = sched.with_ranks((tuple(ops),) + tuple(sched.ranks[1:]))
    assert replica_fingerprint(swapped) != replica_fingerprint(sched)


def test_replicas_run_their_own_counts_and_mismatches_are_refused():
    """DP=2 x PP=2: replica 0 runs 3 microbatches and replica 1 runs 5 in the same step; replicas
    with schedules that reduce in other orders, or a pipeline whose ranks disagree on the count, are
    refused in one sentence on every rank before any p2p (no rank is left waiting)."""
    results = H.run_ranks({"body": H.replica_counts_body, "pp": 2, "num_layers": 4}, 4, timeout_s=300)
    for r in results:
        if r["pp_rank"] == 1:  # the last stage returns one loss dict per microbatch
            assert r["own_counts"] == (3 if r["dp_rank"] == 0 else 5), r
        assert isinstance(r["other_schedule"], str) and "reduce gradients in different chunk orders" in \
            r["other_schedule"], r
        assert isinstance(r["pipeline_disagrees"], str) and \
            "ranks of data-parallel replica 1 would run different plans or microbatch counts" in \
            r["pipeline_disagrees"], r


def _tiny_model():
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    torch.manual_seed(3)
    config = ref.tiny_gpt_config(2)
    return GPTModel(config, get_gpt_layer_local_spec(), vocab_size=ref.VOCAB_SIZE, max_sequence_length=32)


def test_a_packed_sample_trains_as_it_would_alone():
    """Per-token losses of samples packed into one microbatch equal each sample run alone (position
    ids restart, the mask keeps samples apart); padding trains nothing."""
    from primus_megatron.train.packed_batch import alone, pack

    ref.init_single_process()
    model = _tiny_model().eval()
    gen = torch.Generator().manual_seed(1)
    samples = [torch.randint(0, ref.VOCAB_SIZE, (n + 1,), generator=gen) for n in (5, 9, 3)]
    batch = pack(samples, 20)
    assert batch["loss_mask"].sum() == 17 and batch["loss_mask"][0, 17:].sum() == 0
    with torch.no_grad():
        packed = model(batch["tokens"], batch["position_ids"], batch["attention_mask"], labels=batch["labels"])
        start = 0
        for sample in samples:
            one = alone(sample)
            own = model(one["tokens"], one["position_ids"], one["attention_mask"], labels=one["labels"])
            n = len(sample) - 1
            torch.testing.assert_close(packed[0, start:start + n], own[0], rtol=1e-5, atol=1e-6)
            start += n
    with pytest.raises(ValueError, match="at most 20 trained positions"):
        pack(samples + samples, 20)


def test_balanced_batches_plan_the_same_everywhere_and_run_the_chosen_order():
    """Every replica's ranks make the same plan from the step alone; a rank without data gets the
    masks of the same packs; with our schedule the packs run in mb_order's choice, which on
    long-tail packs of this step is not their packed order (1f1b gains most from light ends)."""
    import argparse
    from types import SimpleNamespace

    from primus_megatron.options import from_options
    from primus_megatron.schedules.mb_order import choose_order
    from primus_megatron.train.balanced_data import BalancedBatches, schedule_order

    seq = 64
    args = argparse.Namespace(pipeline_balance_data="lb-mini", pipeline_balance_cost="0.05,1", global_batch_size=48,
                              seq_length=seq, seed=3, hidden_size=32)
    dataset = [{"tokens": torch.arange(i, i + seq), "labels": torch.arange(i + 1, i + seq + 1)} for i in range(200)]
    runner = SimpleNamespace(spec=from_options("1f1b"))
    plain = BalancedBatches(dataset, args, 1, 2)
    ordered = BalancedBatches(dataset, args, 1, 2, order=schedule_order(runner, 4))
    blind = BalancedBatches(None, args, 1, 2, order=schedule_order(runner, 4))
    (count, packs), (count2, reordered), (count3, masks) = plain.step(5), ordered.step(5), blind.step(5)
    assert count == count2 == count3 == plain.last_plan.counts[1] and plain.last_plan == ordered.last_plan
    packs, reordered, masks = list(packs), list(reordered), list(masks)
    factors = plain.last_plan.factors(1, ordered.cost)
    order = choose_order("1f1b", 4, S.Costs(mb_scale=factors), budget=0)[0]
    assert list(order) != sorted(order), f"this step's packs are best run as packed ({factors}): pick another step"
    for k, i in enumerate(order):
        assert torch.equal(reordered[k]["tokens"], packs[i]["tokens"])
        assert torch.equal(masks[k]["attention_mask"], reordered[k]["attention_mask"])
        assert torch.equal(masks[k]["position_ids"], reordered[k]["position_ids"])
