"""Data side of training: packaged corpus, ByteTokenizer, Megatron .bin/.idx, GPTDataset splits and
the resumable microbatch iterator (primus_megatron.train.tokenizer / .data)."""
from __future__ import annotations

import argparse
import json
import os

import numpy
import pytest
import torch

from primus_megatron.train import data as D
from primus_megatron.train.tokenizer import ByteTokenizer, NullTokenizer, build_tokenizer, padded_vocab_size

SEQ = 64
TOK = ByteTokenizer()


@pytest.fixture(scope="module")
def dist():
    from tests.megatron_reference import init_single_process

    init_single_process()


@pytest.fixture(scope="module")
def corpus_prefix(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("corpus") / "corpus_text_document")
    result = D.build_indexed_dataset(D.corpus_files(), prefix, TOK)
    assert result["documents"] > 2000
    return prefix


def _args(prefix, cache, **over):
    args = dict(data_path=[prefix], seq_length=SEQ, micro_batch_size=2, global_batch_size=8, train_iters=20,
                eval_iters=2, eval_interval=10, split="949,50,1", data_cache_path=str(cache))
    args.update(over)
    return args


@pytest.fixture(scope="module")
def splits(dist, corpus_prefix, tmp_path_factory):
    return D.build_datasets(_args(corpus_prefix, tmp_path_factory.mktemp("cache")))


# --- tokenizer ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["", "plain ASCII", "naïve café — “quotes”", "日本語のテキスト", "emoji 🧪🚀 and \x00 nul",
                                  "mixed\nlines\r\n\ttabs", "\U0010ffff edge of Unicode", "Ω≈ç√∫˜µ≤≥÷ åß∂ƒ©˙∆˚¬"])
def test_byte_tokenizer_round_trips_unicode(text):
    ids = TOK.tokenize(text)
    assert all(0 <= i < 256 for i in ids) and len(ids) == len(text.encode("utf-8"))
    assert TOK.detokenize(ids) == text
    assert TOK.detokenize(ids + [TOK.eod]) == text  # eod is not text


def test_byte_tokenizer_round_trips_random_unicode():
    rng = numpy.random.default_rng(0)
    for _ in range(200):
        cps = rng.integers(1, 0x110000, size=int(rng.integers(0, 40)))
        text = "".join(chr(c) for c in cps if not 0xD800 <= c < 0xE000)  # no lone surrogates in UTF-8
        assert TOK.detokenize(TOK.tokenize(text)) == text


def test_tokenizer_attributes_megatron_reads():
    assert TOK.vocab_size == 257 and TOK.eod == 256
    assert TOK.unique_identifiers["class"] == "ByteTokenizer"
    with pytest.raises(NotImplementedError):
        TOK.pad  # no pad id: MegatronDataset falls back to -1, never the eod
    null = NullTokenizer(100)
    assert (null.vocab_size, null.eod) == (101, 100)
    assert padded_vocab_size(257, 128, 1) == 384
    assert padded_vocab_size(257, 128, 2) == 512
    assert padded_vocab_size(256, 128, 1) == 256
    assert padded_vocab_size(50257, 128, 8) == 51200
    with pytest.raises(ValueError, match="--tokenizer-type"):
        build_tokenizer("GPT2BPETokenizer")
    ns = argparse.Namespace(tokenizer_type="ByteTokenizer", tokenizer_model=None, mock_data=True, vocab_size=1000,
                            make_vocab_size_divisible_by=128, tensor_model_parallel_size=2)
    assert isinstance(build_tokenizer(ns), NullTokenizer)  # Megatron-LM: mock data with --vocab-size
    assert D.padded_vocab(ns, build_tokenizer(ns)) == 1024
    ns.mock_data = False
    assert isinstance(build_tokenizer(ns), ByteTokenizer) and D.padded_vocab(ns, TOK) == 512


# --- indexed dataset ------------------------------------------------------------------------------

def test_indexed_dataset_round_trips_corpus(corpus_prefix):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    texts = [t for t in D.iter_jsonl_documents(D.corpus_files()) if t]
    ds = IndexedDataset(corpus_prefix)
    assert len(ds) == len(texts)
    assert list(ds.document_indices) == list(range(len(texts) + 1))  # one sequence per document
    assert ds.index.dtype == numpy.uint16
    for i in list(range(0, len(texts), 97)) + [len(texts) - 1]:
        seq = ds[i]
        assert seq[-1] == TOK.eod and TOK.eod not in seq[:-1]
        assert TOK.detokenize(seq.tolist()) == texts[i]
    assert int(ds.sequence_lengths.sum()) == sum(len(t.encode("utf-8")) + 1 for t in texts)


def _jsonl(path, texts):
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    return str(path)


def _names(directory):
    return sorted(os.listdir(directory))


def test_half_written_dataset_leaves_no_final_files(tmp_path, monkeypatch):
    from megatron.core.datasets import indexed_dataset

    src = _jsonl(tmp_path / "in.jsonl", ["first document", "", "second — document", "third"])
    out = tmp_path / "out"
    out.mkdir()
    prefix = str(out / "ds")
    real_finalize = indexed_dataset.IndexedDatasetBuilder.finalize

    def crash_after_bin(self, idx_path):  # .bin complete, .idx half written, then the process "dies"
        self.data_file.close()
        with open(idx_path, "wb") as f:
            f.write(b"MMIDIDX\x00\x00")
        raise KeyboardInterrupt("killed between .bin and .idx")

    monkeypatch.setattr(indexed_dataset.IndexedDatasetBuilder, "finalize", crash_after_bin)
    with pytest.raises(KeyboardInterrupt):
        D.build_indexed_dataset([src], prefix, TOK)
    assert _names(out) == []  # neither final names nor temporaries

    # A failure while tokenizing keeps an existing good pair intact.
    monkeypatch.setattr(indexed_dataset.IndexedDatasetBuilder, "finalize", real_finalize)
    D.build_indexed_dataset([src], prefix, TOK)
    before = {n: (out / n).read_bytes() for n in _names(out)}
    assert set(before) == {"ds.bin", "ds.idx", "ds.meta.json"}

    class Exploding(ByteTokenizer):
        calls = 0

        def tokenize(self, text):
            Exploding.calls += 1
            if Exploding.calls == 2:
                raise RuntimeError("tokenizer died")
            return super().tokenize(text)

    with pytest.raises(RuntimeError, match="tokenizer died"):
        D.build_indexed_dataset([src], prefix, Exploding())
    assert {n: (out / n).read_bytes() for n in _names(out)} == before
    ds = indexed_dataset.IndexedDataset(prefix)
    assert [TOK.detokenize(ds[i].tolist()) for i in range(len(ds))] == ["first document", "second — document",
                                                                       "third"]  # empty document skipped


def test_corpus_dataset_build_is_idempotent(tmp_path, capsys):
    prefix = str(tmp_path / "data" / "corpus_text_document")
    assert D.main(["--build-corpus-dataset", prefix]) == 0
    first = capsys.readouterr().out
    assert first.startswith("wrote ") and prefix + ".bin" in first
    mtime = os.path.getmtime(prefix + ".idx")
    assert D.main(["--build-corpus-dataset", prefix]) == 0
    assert capsys.readouterr().out.startswith("up to date: ")
    assert os.path.getmtime(prefix + ".idx") == mtime
    assert not D.indexed_dataset_is_current(D.corpus_files(), prefix, TOK, append_eod=False)


# --- GPTDataset samples and splits -----------------------------------------------------------------

def test_samples_shapes_labels_and_masks(splits):
    train, valid, test = splits
    for ds in (train, valid, test):
        for i in (0, 1, len(ds) // 2, len(ds) - 1):
            s = ds[i]
            assert set(s) == {"tokens", "labels", "loss_mask", "attention_mask", "position_ids"}
            assert s["tokens"].shape == s["labels"].shape == s["loss_mask"].shape == (SEQ,)
            assert s["attention_mask"].shape == (1, SEQ, SEQ) and s["attention_mask"].dtype == torch.bool
            assert torch.equal(s["attention_mask"][0], ~torch.tril(torch.ones(SEQ, SEQ, dtype=torch.bool)))
            assert torch.equal(s["tokens"][1:], s["labels"][:-1])  # labels are the next tokens
            assert torch.equal(s["position_ids"], torch.arange(SEQ))
            assert torch.all(s["loss_mask"] == 1)  # Megatron-LM default: eod is trained on
            assert s["tokens"].max() <= TOK.eod and s["tokens"].min() >= 1


def test_eod_mask_loss_reset_positions_and_padding(dist, corpus_prefix, tmp_path):
    args = _args(corpus_prefix, tmp_path, eod_mask_loss=True, reset_position_ids=True, reset_attention_mask=True,
                 create_attention_mask_in_dataloader=True, drop_last_partial_validation_sequence=False)
    train, valid, _ = D.build_datasets(args)
    eods = 0
    for i in range(40):
        s = train[i]
        is_eod = s["tokens"] == TOK.eod
        eods += int(is_eod.sum())
        assert torch.equal(s["loss_mask"] == 0, is_eod)
        for j in torch.nonzero(is_eod).flatten().tolist():  # a new document starts at position 0
            if j + 1 < SEQ:
                assert s["position_ids"][j + 1] == 0 and bool(s["attention_mask"][0, j + 1, j])
    assert eods > 0
    # The valid split keeps its last partial sequence: padded labels carry no loss.
    padded = 0
    for i in range(len(valid)):
        s = valid[i]
        pad = s["labels"] == 0  # byte 0 never occurs in the text; megatron maps its pad id -1 to 0
        if pad.any():
            k = int(torch.nonzero(pad)[0])
            assert torch.all(pad[k:]) and torch.all(s["loss_mask"][k:] == 0) and torch.all(s["tokens"][k + 1:] == 0)
            padded += 1
    assert padded >= 1


def test_split_proportions_and_sample_counts(splits, corpus_prefix):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    n = len(IndexedDataset(corpus_prefix))
    train, valid, test = splits
    bounds = [0, round(0.949 * n), round(0.999 * n), n]
    for ds, lo, hi in zip(splits, bounds, bounds[1:]):
        assert list(ds.indices) == list(range(lo, hi))  # contiguous, disjoint document ranges
    assert (train.num_samples, valid.num_samples, test.num_samples) == (20 * 8, (20 // 10 + 1) * 2 * 8, 2 * 8)
    assert len(train) >= 160 and len(valid) >= 48 and len(test) >= 16
    assert D.train_valid_test_num_samples(dict(micro_batch_size=4, global_batch_size=32, train_iters=1000,
                                               eval_iters=10, eval_interval=100)) == (32000, 3520, 320)
    assert D.train_valid_test_num_samples(dict(micro_batch_size=4, train_iters=7, eval_iters=3,
                                               train_samples=99)) == (99, 12, 12)


def test_empty_split_is_refused_before_megatron_hangs(dist, tmp_path):
    src = _jsonl(tmp_path / "tiny.jsonl", [f"document number {i}" for i in range(10)])
    prefix = str(tmp_path / "tiny")
    D.build_indexed_dataset([src], prefix, TOK)
    with pytest.raises(ValueError, match="test split .* without documents"):
        D.build_datasets(_args(prefix, tmp_path / "cache", seq_length=8))


def test_bad_data_path_messages(dist, tmp_path):
    with pytest.raises(FileNotFoundError, match="--data-path"):
        D.build_datasets(_args(str(tmp_path / "missing"), tmp_path))
    with pytest.raises(ValueError, match="--data-path"):
        D.parse_data_path(["0.5", "a", "b"])
    with pytest.raises(ValueError, match="--data-path PREFIX .* or --mock-data"):
        D.build_datasets(dict(seq_length=8, micro_batch_size=1, train_iters=1))
    assert D.parse_data_path("0.3 a 0.7 b") == (["a", "b"], [0.3, 0.7])
    assert D.parse_data_path(["a", "b"]) == (["a", "b"], None)


def test_weighted_blend_and_mock_data(dist, tmp_path):
    files = {os.path.basename(f): f for f in D.corpus_files()}
    p1, p2 = str(tmp_path / "licenses"), str(tmp_path / "reference")
    D.build_indexed_dataset([files["licenses.jsonl"]], p1, TOK)
    D.build_indexed_dataset([files["python_reference.jsonl"]], p2, TOK)
    train, valid, test = D.build_datasets(_args(None, tmp_path / "cache", data_path=["0.3", p1, "0.7", p2],
                                                split="90,10,0"))
    assert type(train).__name__ == "BlendedDataset" and test is None
    assert len(train) == 160
    share = numpy.bincount(numpy.asarray(train.dataset_index), minlength=2) / len(train)
    assert abs(share[0] - 0.3) < 0.05
    batch = next(D.batch_iterator(train, 2))
    assert set(batch) == set(D.BATCH_KEYS) and batch["tokens"].shape == (2, SEQ)

    mock = D.build_datasets(dict(mock_data=True, seq_length=SEQ, micro_batch_size=2, train_iters=3, eval_iters=1,
                                 vocab_size=100, create_attention_mask_in_dataloader=False))
    assert type(mock[0]).__name__ == "MockGPTDataset"
    batch = next(D.batch_iterator(mock[0], 2))
    assert batch["attention_mask"] is None and batch["tokens"].shape == (2, SEQ)
    assert int(batch["tokens"].max()) <= 100


# --- microbatch iterator ---------------------------------------------------------------------------

class _Indices(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"tokens": torch.tensor([i]), "labels": torch.tensor([i]), "loss_mask": torch.ones(1),
                "position_ids": torch.zeros(1, dtype=torch.long)}


def test_dp_ranks_take_disjoint_slices_of_each_global_batch():
    mbs, dp, gbs = 2, 3, 12  # 2 microbatches per rank per global batch
    ds = _Indices(5 * gbs + 5)  # an incomplete last run is dropped
    per_rank = [[b["tokens"].flatten().tolist() for b in D.batch_iterator(ds, mbs, r, dp)] for r in range(dp)]
    assert all(len(p) == 5 * gbs // (mbs * dp) for p in per_rank)
    for g in range(5):
        micro = gbs // (mbs * dp)
        taken = [i for r in range(dp) for m in per_rank[r][g * micro:(g + 1) * micro] for i in m]
        assert sorted(taken) == list(range(g * gbs, (g + 1) * gbs))  # disjoint, covering the global batch
    assert per_rank[1][0] == [2, 3]  # MegatronPretrainingSampler's slice: rank r takes [r*mbs, (r+1)*mbs)
    assert next(D.batch_iterator(ds, mbs, 0, dp))["attention_mask"] is None
    assert D.batch_iterator(None, mbs) is None
    with pytest.raises(ValueError, match="multiple of"):
        D.batch_iterator(ds, mbs, 0, dp, start_sample=4)
    with pytest.raises(ValueError, match="data_parallel_rank"):
        D.batch_iterator(ds, mbs, 3, dp)


def test_batch_iterator_is_deterministic_and_resumes_exactly(splits):
    train = splits[0]
    mbs, dp, gbs = 2, 2, 8

    def run(rank, start=0, limit=None):
        out = []
        for b in D.batch_iterator(train, mbs, rank, dp, start_sample=start):
            out.append(b)
            if limit and len(out) == limit:
                break
        return out

    full = run(1, limit=12)
    again = run(1, limit=12)
    for a, b in zip(full, again):
        assert all(torch.equal(a[k], b[k]) for k in D.BATCH_KEYS)
    consumed = 3 * gbs  # resume after 3 iterations
    resumed = run(1, start=consumed, limit=6)
    skip = consumed // (mbs * dp)
    for a, b in zip(full[skip:], resumed):
        assert all(torch.equal(a[k], b[k]) for k in D.BATCH_KEYS)
    other = run(0, limit=12)
    assert not any(torch.equal(a["tokens"], b["tokens"]) for a, b in zip(full, other))
    # The microbatch is exactly the dataset's samples (Megatron's sampler order, no reshuffling).
    assert torch.equal(full[0]["tokens"], torch.stack([train[2]["tokens"], train[3]["tokens"]]))


@pytest.mark.parametrize("where, bundled", [("elsewhere", False), ("relative", True), ("absolute", True)])
def test_a_missing_data_path_is_answered_with_what_it_expects(tmp_path, monkeypatch, where, bundled):
    """Issue 59 item 6: a missing --data-path names the files it expects and how they are made; the
    command that builds the bundled toy corpus is offered for that corpus's own prefix only."""
    from primus_megatron.train.arguments import ConfigError, _check_data_path

    monkeypatch.chdir(tmp_path)  # nothing built here
    prefix = {"elsewhere": str(tmp_path / "my_corpus_text_document"), "relative": D.DEFAULT_CORPUS_PREFIX,
              "absolute": str(tmp_path / D.DEFAULT_CORPUS_PREFIX)}[where]
    with pytest.raises(ConfigError) as exc:
        _check_data_path([prefix])
    text = str(exc.value)
    assert text.startswith(f"--data-path {prefix}: {prefix}.bin does not exist; ")
    assert "PREFIX.bin and PREFIX.idx" in text and "tools/preprocess_data.py" in text
    assert ("--build-corpus-dataset" in text) == bundled and ("--mock-data" in text) == (not bundled)
