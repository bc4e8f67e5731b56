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
