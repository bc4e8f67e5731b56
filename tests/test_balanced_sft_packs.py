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
    ({"sft": False, "dataloader_inter_document_masking": True, "pipeline_model_parallel_size": 4},
     "needs --pipeline-model-parallel-size 2"),
])
def test_what_balanced_sft_needs_is_said_in_one_sentence(given, words):
    said = problem(_args(**given))
    if words is None:
        assert said is None
    else:
        assert said.startswith("--pipeline-balance-data in Megatron-LM's pretrain_gpt.py") and words in said, said
        assert "\n" not in said


def test_core_v0161_is_refused_and_the_group_alone_is_not_judged():
    old = _args()
    del old.dataloader_inter_document_masking  # core_v0.16.1's arguments have no such option
    assert "needs Megatron-LM core_v0.19.0 or later" in problem(old)
    assert problem(argparse.Namespace(pipeline_balance_data="lb-mini")) is None  # the plugin's precheck
