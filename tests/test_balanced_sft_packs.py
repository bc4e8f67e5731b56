"""The pieces of `--pipeline-balance-data` in Megatron-LM's --sft loop that need no launch
(primus_megatron/megatron_lm/balanced_data.py): a sample's length, a pack in SFTDataset's format, and
the one-sentence refusals. The launches (gradients against megatron's own run) are in
tests/test_megatron_lm_sft.py."""
from __future__ import annotations

import argparse

import pytest
import torch

from primus_megatron.megatron_lm.balanced_data import pack, problem, sample_length


def _item(tokens, cu, loss_mask, seq=8):
    """A sample as core_v0.19.0's SFTDataset returns it: cu_seqlens padded with seq to seq + 1 entries."""
    padded = torch.full((seq + 1,), seq, dtype=torch.int32)
    padded[:len(cu)] = torch.tensor(cu, dtype=torch.int32)
    return {"tokens": torch.tensor(tokens), "labels": torch.tensor(tokens) + 100,
            "loss_mask": torch.tensor(loss_mask, dtype=torch.float32), "position_ids": torch.arange(seq),
            "cu_seqlens": padded, "max_seqlen": torch.tensor(5)}


def test_a_samples_length_ends_at_its_last_loss():
    assert sample_length({"loss_mask": torch.tensor([0.0, 1, 1, 0, 1, 0, 0, 0])}) == 5
    assert sample_length({"loss_mask": torch.zeros(8)}) == 1  # no loss at all: one token, still planned


def test_a_pack_keeps_every_document_and_pads_with_one_more():
    a = _item(range(1, 9), [0, 2, 5, 8], [1, 1, 1, 1, 0, 0, 0, 0])  # two documents in its first 4 tokens
    b = _item(range(11, 19), [0, 8], [1, 1, 1, 0, 0, 0, 0, 0])
    lengths = [sample_length(a), sample_length(b)]
    assert lengths == [4, 3]
    out = pack([a, b], lengths, 8)
    assert out["tokens"].tolist() == [[1, 2, 3, 4, 11, 12, 13, 0]]
    assert out["labels"].tolist() == [[101, 102, 103, 104, 111, 112, 113, 0]]
    assert out["loss_mask"].tolist() == [[1, 1, 1, 1, 1, 1, 1, 0]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1, 2, 0]]  # each sample's own, the padding's from 0
    assert out["cu_seqlens"].tolist() == [[0, 2, 4, 7, 8, 8, 8, 8, 8]]
    assert out["cu_seqlens"].dtype == torch.int32 and out["max_seqlen"].tolist() == [3]


def test_a_full_pack_has_no_padding_document_and_an_overfull_one_is_refused():
    a, b = _item(range(8), [0, 8], [1] * 5 + [0] * 3), _item(range(8), [0, 8], [1, 1, 1, 0, 0, 0, 0, 0])
    assert pack([a, b], [5, 3], 8)["cu_seqlens"].tolist() == [[0, 5, 8, 8, 8, 8, 8, 8, 8]]
    with pytest.raises(ValueError, match="exceeds --seq-length 8"):
        pack([a, b], [5, 4], 8)


def _args(**given) -> argparse.Namespace:
    base = dict(pipeline_balance_data="lb-mini", pipeline_schedule="zb-h1", sft=True,
                dataloader_inter_document_masking=False, calculate_per_token_loss=True,
                transformer_impl="transformer_engine", tensor_model_parallel_size=1, rampup_batch_size=None,
                dataloader_type=None, pipeline_model_parallel_size=2)
    return argparse.Namespace(**{**base, **given})


@pytest.mark.parametrize("given, words", [
    ({}, None),
    ({"calculate_per_token_loss": False}, "needs --calculate-per-token-loss"),
    ({"sft": False}, "needs --sft or --dataloader-inter-document-masking"),
    ({"transformer_impl": "local"}, "needs --transformer-impl transformer_engine"),
    ({"pipeline_schedule": None}, "needs --pipeline-schedule"),
    ({"rampup_batch_size": [4, 2, 8]}, "cannot take --rampup-batch-size"),
    ({"dataloader_type": "cyclic"}, "needs --dataloader-type single"),
    ({"sft": False, "dataloader_inter_document_masking": True}, None),
])
def test_what_balanced_sft_needs_is_said_in_one_sentence(given, words):
    said = problem(_args(**given))
    if words is None:
        assert said is None
    else:
        assert said.startswith("--pipeline-balance-data in Megatron-LM's pretrain_gpt.py") and words in said, said
        assert "\n" not in said


@pytest.mark.parametrize("balance", ["lb-mini", None])
@pytest.mark.parametrize("schedule, pp, refused", [("zb-h1", 2, False), ("zb-h1", 4, True), ("zbv", 2, True),
                                                   ("interleaved-zb", 2, True), ("dualpipev", 2, True)])
def test_inter_document_masking_needs_every_chunk_on_the_first_or_last_stage(balance, schedule, pp, refused):
    """Megatron-LM builds that dataset for the first and last stage only (pretrain_gpt.py is_dataset_built_on_rank,
    core_v0.19.0), yet every stage reads cu_seqlens from it: zbv without balancing failed in get_batch with
    "'NoneType' object is not an iterator" on pipeline rank 1 before this check. With --sft every stage builds it."""
    args = _args(sft=False, dataloader_inter_document_masking=True, pipeline_schedule=schedule,
                 pipeline_model_parallel_size=pp, pipeline_balance_data=balance)
    said = problem(args)
    if not refused:
        assert said is None
        return
    assert said.startswith(f"--pipeline-schedule {schedule} with --dataloader-inter-document-masking") and \
        "first and the last stage only" in said and "\n" not in said, said
    assert problem(_args(sft=True, dataloader_inter_document_masking=True, pipeline_schedule=schedule,
                         pipeline_model_parallel_size=pp, pipeline_balance_data=balance)) is None
    megatrons_own = _args(sft=False, dataloader_inter_document_masking=True, pipeline_schedule=None,
                          pipeline_model_parallel_size=pp, pipeline_balance_data=None)
    assert problem(megatrons_own) is None  # megatron's own schedules: Megatron-LM's own behaviour


def test_a_sample_of_several_documents_costs_the_sum_of_theirs():
    """Pretraining samples under --dataloader-inter-document-masking are all --seq-length long: by length they
    all cost the same, by their documents (attention within each) they do not."""
    from primus_megatron.balancing import SampleCost, plan_batch

    cost = SampleCost(a=1.0, b=1.0)
    # four samples of 8 tokens: 0 and 3 one document each (64 + 8), 1 and 2 eight 1-token documents (8 * 2)
    docs = [[8], [1] * 8, [1] * 8, [8]]
    lengths = [8] * 4
    heavy = {0, 3}
    assert [sum(cost.of(d) for d in docs[i]) for i in range(4)] == [72.0, 16.0, 16.0, 72.0]

    def heavy_per_replica(plan):
        return sorted(len({i for mb in r for i in mb} & heavy) for r in plan.replicas)

    # by length all four tie, and the split pairs 0 with 3 (ties broken by index): one replica gets both heavy
    assert heavy_per_replica(plan_batch(lengths, 2, 8, "lb-mini", cost)) == [0, 2]
    for mode in ("lb-mini", "sorted"):
        assert heavy_per_replica(plan_batch(lengths, 2, 8, mode, cost, documents=docs)) == [1, 1], mode
    with pytest.raises(ValueError, match="do not make up its 8 tokens"):
        plan_batch(lengths, 2, 8, "lb-mini", cost, documents=[[8], [4], [8], [8]])


def test_a_samples_documents_come_from_its_cu_seqlens():
    from primus_megatron.megatron_lm.balanced_data import documents

    item = _item(range(8), [0, 3, 5, 8], [1] * 8)
    assert documents(item, 8) == [3, 2, 3]
    assert documents(item, 4) == [3, 1]  # the first 4 tokens: the second document cut short


def test_core_v0161_is_refused_and_the_group_alone_is_not_judged():
    old = _args()
    del old.dataloader_inter_document_masking  # core_v0.16.1's arguments have no such option
    assert "needs Megatron-LM core_v0.19.0 or later" in problem(old)
    assert problem(argparse.Namespace(pipeline_balance_data="lb-mini")) is None  # the plugin's precheck
