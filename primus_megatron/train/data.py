"""The data side of examples/pretrain_gpt.py, on megatron-core's own datasets.

* ``build_indexed_dataset``: JSONL documents -> Megatron's ``PREFIX.bin`` /
  ``PREFIX.idx`` (what Megatron-LM's tools/preprocess_data.py writes: one
  sequence per document, eod appended), atomically.
* ``build_datasets``: (train, valid, test) through megatron-core's
  BlendedMegatronDatasetBuilder with a GPTDatasetConfig filled from
  Megatron-LM's argument names (``--data-path``, ``--split``, ``--seed``,
  ``--seq-length``, ``--data-cache-path``, ``--mock-data``, ...).
* ``batch_iterator``: microbatches the way Megatron-LM's
  MegatronPretrainingSampler hands them out, resumable from a consumed-samples
  count.
* ``python -m primus_megatron.train.data --build-corpus-dataset [PREFIX]``:
  the indexed dataset of the corpus shipped in primus_megatron/data/corpus.

megatron-core behaviour this module relies on (0.16.1):

* ``BlendedMegatronDatasetBuilder.build()`` must be called on every rank of
  the default process group: global rank 0 builds the index files (document,
  sample and shuffle indices, ``.npy`` under ``path_to_cache``) and the other
  ranks wait on ``torch.distributed.barrier()`` (any backend, gloo included),
  then load the cached files.  ``path_to_cache`` must therefore be on a file
  system every rank sees.  Ranks where ``is_built_on_rank()`` is False get
  ``None`` datasets (they still join the barriers).
* A split with no documents and a requested sample count makes GPTDataset
  loop forever (zero tokens per epoch); ``build_datasets`` refuses it first.
* BlendedDataset (a ``--data-path`` with several prefixes) calls
  ``torch.distributed.get_rank()`` unconditionally when it caches, so blends
  need an initialized process group (a world of one is enough).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import warnings
from types import SimpleNamespace
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy
import torch

from .dataset_paths import DEFAULT_CORPUS_PREFIX, missing_dataset
from .tokenizer import ByteTokenizer, build_tokenizer_from_args, padded_vocab_size

CORPUS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "corpus")
BATCH_KEYS = ("tokens", "labels", "loss_mask", "attention_mask", "position_ids")

# Megatron-LM's defaults for the data arguments build_datasets reads.
_DEFAULTS = dict(
    seed=1234, split="969, 30, 1", data_path=None, mock_data=False, data_cache_path=None,
    mmap_bin_files=True, num_dataset_builder_threads=1, reset_position_ids=False,
    reset_attention_mask=False, eod_mask_loss=False, create_attention_mask_in_dataloader=True,
    mid_level_dataset_surplus=0.005, allow_ambiguous_pad_tokens=False, train_samples=None,
    eval_interval=None, eval_iters=0, full_validation=False, drop_last_partial_validation_sequence=True,
)

logger = logging.getLogger(__name__)


def _quiet_megatron_import():
    warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")


def _arg(args, name):
    if isinstance(args, dict):
        value = args.get(name, None)
    else:
        value = getattr(args, name, None)
    return _DEFAULTS.get(name) if value is None else value


# ---------------------------------------------------------------------------------------------
# The shipped corpus and indexed datasets
# ---------------------------------------------------------------------------------------------

def corpus_files() -> List[str]:
    """The JSONL files of the corpus shipped with the package, sorted."""
    if not os.path.isdir(CORPUS_DIR):
        raise FileNotFoundError(f"the packaged corpus directory {CORPUS_DIR} is missing "
                                f"(regenerate it with `python scripts/build_corpus.py`)")
    files = sorted(os.path.join(CORPUS_DIR, n) for n in os.listdir(CORPUS_DIR) if n.endswith(".jsonl"))
    if not files:
        raise FileNotFoundError(f"no .jsonl files in {CORPUS_DIR}")
    return files


def iter_jsonl_documents(jsonl_paths: Sequence[str], json_key: str = "text") -> Iterator[str]:
    """The ``json_key`` field of every line of the files, in order."""
    for path in jsonl_paths:
        with open(path, "r", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    doc = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{lineno}: not a JSON line ({exc.msg})") from None
                if not isinstance(doc, dict) or not isinstance(doc.get(json_key), str):
                    raise ValueError(f"{path}:{lineno}: expected an object with a string field {json_key!r}")
                yield doc[json_key]


def _paths(prefix: str) -> Tuple[str, str, str]:
    return prefix + ".bin", prefix + ".idx", prefix + ".meta.json"


def _fingerprint(jsonl_paths: Sequence[str], tokenizer, append_eod: bool, json_key: str) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({"tokenizer": dict(tokenizer.unique_identifiers), "append_eod": bool(append_eod),
                         "json_key": json_key}, sort_keys=True).encode())
    for path in jsonl_paths:
        h.update(b"\0file\0")
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def indexed_dataset_is_current(jsonl_paths: Sequence[str], output_prefix: str, tokenizer, *,
                               append_eod: bool = True, json_key: str = "text") -> bool:
    """True when PREFIX.bin/.idx exist and were built from exactly these inputs and settings."""
    bin_path, idx_path, meta_path = _paths(output_prefix)
    if not (os.path.isfile(bin_path) and os.path.isfile(idx_path) and os.path.isfile(meta_path)):
        return False
    try:
        with open(meta_path, "r", encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return False
    return meta.get("fingerprint") == _fingerprint(jsonl_paths, tokenizer, append_eod, json_key)


def _add_documents(builder, jsonl_paths: Sequence[str], tokenizer, dtype, *, append_eod: bool,
                   json_key: str) -> Tuple[int, int, int]:
    """Tokenize every document into `builder`: (documents, tokens, skipped empty documents).
    Raises ValueError when no document has a token."""
    documents = tokens = skipped = 0
    for text in iter_jsonl_documents(jsonl_paths, json_key):
        ids = list(tokenizer.tokenize(text))
        if not ids:
            skipped += 1
            continue
        if append_eod:
            ids.append(tokenizer.eod)
        builder.add_document(numpy.asarray(ids, dtype=dtype), [len(ids)])
        documents += 1
        tokens += len(ids)
    if documents == 0:
        raise ValueError(f"no non-empty {json_key!r} documents in {', '.join(jsonl_paths)}")
    return documents, tokens, skipped


def _commit(tmp_prefix: str, output_prefix: str) -> None:
    """Rename the temporary files into place: the old .idx goes first, so an old .idx never pairs
    with a new .bin, and the new .idx comes last."""
    (bin_path, idx_path, meta_path), (tmp_bin, tmp_idx, tmp_meta) = _paths(output_prefix), _paths(tmp_prefix)
    for old in (idx_path, meta_path):
        if os.path.exists(old):
            os.remove(old)
    os.replace(tmp_bin, bin_path)
    os.replace(tmp_meta, meta_path)
    os.replace(tmp_idx, idx_path)


def build_indexed_dataset(jsonl_paths: Sequence[str], output_prefix: str, tokenizer=None, *,
                          append_eod: bool = True, json_key: str = "text") -> Dict[str, object]:
    """Tokenize JSONL documents into Megatron's ``output_prefix.bin`` / ``.idx``.

    One sequence per non-empty document (empty documents are skipped), the
    tokenizer's eod appended when ``append_eod``; token dtype as Megatron-LM's
    preprocess_data picks it (uint16 below 65500 ids, else int32).  Written
    under temporary names and renamed at the end, ``.idx`` last: the final
    ``.idx`` exists only next to a complete ``.bin``; a failure leaves any
    previous pair untouched and removes the temporary files.  A sidecar
    ``output_prefix.meta.json`` records the inputs' fingerprint and counts.
    Returns those counts and paths.
    """
    _quiet_megatron_import()
    from megatron.core.datasets.indexed_dataset import DType, IndexedDataset, IndexedDatasetBuilder

    tokenizer = tokenizer or ByteTokenizer()
    jsonl_paths = [os.fspath(p) for p in jsonl_paths]
    if not jsonl_paths:
        raise ValueError("build_indexed_dataset needs at least one JSONL file")
    for path in jsonl_paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"JSONL input {path} does not exist")
    output_prefix = os.fspath(output_prefix)
    out_dir = os.path.dirname(os.path.abspath(output_prefix))
    os.makedirs(out_dir, exist_ok=True)
    bin_path, idx_path, meta_path = _paths(output_prefix)
    tmp_prefix = os.path.join(out_dir, f".{os.path.basename(output_prefix)}.tmp-{os.getpid()}")
    tmp_bin, tmp_idx, tmp_meta = _paths(tmp_prefix)

    dtype = DType.optimal_dtype(tokenizer.vocab_size)
    committed = False
    try:
        builder = IndexedDatasetBuilder(tmp_bin, dtype=dtype)
        try:
            documents, tokens, skipped = _add_documents(builder, jsonl_paths, tokenizer, dtype,
                                                        append_eod=append_eod, json_key=json_key)
        except BaseException:
            builder.data_file.close()
            raise
        builder.finalize(tmp_idx)
        check = IndexedDataset(tmp_prefix, mmap=False)  # reads the pair back: counts must agree
        if len(check) != documents or int(check.sequence_lengths.sum()) != tokens:
            raise RuntimeError(f"indexed dataset {tmp_prefix} reads back {len(check)} sequences, "
                               f"expected {documents}")
        del check
        meta = {"fingerprint": _fingerprint(jsonl_paths, tokenizer, append_eod, json_key),
                "inputs": jsonl_paths, "tokenizer": dict(tokenizer.unique_identifiers),
                "append_eod": bool(append_eod), "json_key": json_key, "dtype": numpy.dtype(dtype).name,
                "documents": documents, "tokens": tokens, "skipped_empty_documents": skipped}
        with open(tmp_meta, "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1, sort_keys=True)
            f.write("\n")
        _commit(tmp_prefix, output_prefix)
        committed = True
    finally:
        if not committed:
            for tmp in (tmp_bin, tmp_idx, tmp_meta):
                if os.path.exists(tmp):
                    os.remove(tmp)
    return {"prefix": output_prefix, "bin": bin_path, "idx": idx_path, "meta": meta_path,
            "documents": documents, "tokens": tokens, "skipped_empty_documents": skipped,
            "dtype": numpy.dtype(dtype).name, "bin_bytes": os.path.getsize(bin_path),
            "idx_bytes": os.path.getsize(idx_path)}


def build_corpus_dataset(output_prefix: str = DEFAULT_CORPUS_PREFIX, tokenizer=None, *,
                         force: bool = False) -> Dict[str, object]:
    """The indexed dataset of the packaged corpus (all its JSONL files, in name order).

    Skips the work when the pair is up to date (same inputs, tokenizer and settings)
    and returns ``{"prefix", "up_to_date": True, ...}``.  In a torch.distributed job
    global rank 0 builds and every rank waits on a barrier, so call it on all ranks."""
    tokenizer = tokenizer or ByteTokenizer()
    files = corpus_files()
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    result = None
    if not distributed or torch.distributed.get_rank() == 0:
        if not force and indexed_dataset_is_current(files, output_prefix, tokenizer):
            with open(_paths(output_prefix)[2], "r", encoding="utf-8") as f:
                meta = json.load(f)
            result = {"prefix": output_prefix, "up_to_date": True, "documents": meta["documents"],
                      "tokens": meta["tokens"]}
        else:
            result = dict(build_indexed_dataset(files, output_prefix, tokenizer), up_to_date=False)
    if distributed:
        torch.distributed.barrier()
    return result or {"prefix": output_prefix, "up_to_date": True}


# ---------------------------------------------------------------------------------------------
# Megatron datasets from arguments
# ---------------------------------------------------------------------------------------------

def parse_data_path(data_path) -> Optional[Tuple[List[str], Optional[List[float]]]]:
    """Megatron's --data-path: ``PREFIX [PREFIX ...]`` or ``W1 PREFIX1 W2 PREFIX2 ...``.

    Returns megatron-core's blend ``(prefixes, weights or None)``, or None for no data path."""
    if data_path is None:
        return None
    tokens = data_path.split() if isinstance(data_path, str) else [str(t) for t in data_path]
    if not tokens:
        return None

    def number(t):
        try:
            return float(t)
        except ValueError:
            return None

    if len(tokens) % 2 == 0 and all(number(t) is not None for t in tokens[0::2]):
        weights = [number(t) for t in tokens[0::2]]
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"--data-path weights must be >= 0 with a positive sum, got {weights}")
        return list(tokens[1::2]), weights
    if any(number(t) is not None for t in tokens):
        raise ValueError("--data-path takes PREFIX [PREFIX ...] or pairs 'WEIGHT PREFIX ...', "
                         f"got {' '.join(tokens)!r}")
    return list(tokens), None


def padded_vocab(args, tokenizer) -> int:
    """The model's vocabulary (embedding rows) as Megatron-LM pads it: tokenizer.vocab_size rounded up to
    a multiple of --make-vocab-size-divisible-by (default 128) x --tensor-model-parallel-size."""
    return padded_vocab_size(tokenizer.vocab_size, int(_arg(args, "make_vocab_size_divisible_by") or 128),
                             int(_arg(args, "tensor_model_parallel_size") or 1))


def train_valid_test_num_samples(args) -> Tuple[int, Optional[int], int]:
    """Samples per split as Megatron-LM requests them.

    train: --train-samples or train_iters * global_batch_size; valid: eval_iters *
    (train_iters // eval_interval + 1) * global_batch_size (None with --full-validation;
    without --eval-interval only the final evaluation is counted); test: eval_iters *
    global_batch_size."""
    gbs = int(_arg(args, "global_batch_size") or _arg(args, "micro_batch_size"))
    train_iters = int(_arg(args, "train_iters") or 0)
    eval_iters = int(_arg(args, "eval_iters") or 0)
    train = _arg(args, "train_samples")
    train = int(train) if train else train_iters * gbs
    eval_interval = _arg(args, "eval_interval")
    evaluations = train_iters // int(eval_interval) + 1 if eval_interval else 1
    valid = None if _arg(args, "full_validation") else evaluations * eval_iters * gbs
    return train, valid, eval_iters * gbs


def gpt_dataset_config(args, tokenizer):
    """megatron-core's GPTDatasetConfig from Megatron-LM argument names (defaults as Megatron-LM)."""
    _quiet_megatron_import()
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig

    blend = None if _arg(args, "mock_data") else parse_data_path(_arg(args, "data_path"))
    cache = _arg(args, "data_cache_path")
    if cache is None and blend is not None:
        cache = os.path.join(os.path.dirname(os.path.abspath(blend[0][0])), "cache")
    return GPTDatasetConfig(
        random_seed=int(_arg(args, "seed")),
        sequence_length=int(_arg(args, "seq_length")),
        blend=blend,
        split=str(_arg(args, "split")),
        full_validation=bool(_arg(args, "full_validation")),
        num_dataset_builder_threads=int(_arg(args, "num_dataset_builder_threads")),
        path_to_cache=cache,
        mmap_bin_files=bool(_arg(args, "mmap_bin_files")),
        tokenizer=tokenizer,
        reset_position_ids=bool(_arg(args, "reset_position_ids")),
        reset_attention_mask=bool(_arg(args, "reset_attention_mask")),
        eod_mask_loss=bool(_arg(args, "eod_mask_loss")),
        create_attention_mask=bool(_arg(args, "create_attention_mask_in_dataloader")),
        drop_last_partial_validation_sequence=bool(_arg(args, "drop_last_partial_validation_sequence")),
        mid_level_dataset_surplus=float(_arg(args, "mid_level_dataset_surplus")),
        allow_ambiguous_pad_tokens=bool(_arg(args, "allow_ambiguous_pad_tokens")),
    )


def default_is_built_on_rank() -> bool:
    """True on ranks that feed the model: those holding the first or the last pipeline stage
    (every tensor-parallel rank reads its own copy: no broadcast needed).  True everywhere
    when megatron's parallel_state is not initialized."""
    from megatron.core import parallel_state as ps

    if not ps.model_parallel_is_initialized():
        return True
    return ps.is_pipeline_first_stage(ignore_virtual=True) or ps.is_pipeline_last_stage(ignore_virtual=True)


def _check_splits(config, sizes) -> None:
    """Refuse what megatron-core would hang on or fail on only on rank 0 (before any barrier)."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    prefixes, _ = config.blend
    for prefix in prefixes:
        for path in _paths(prefix)[:2]:
            if not os.path.isfile(path):
                raise FileNotFoundError(missing_dataset(prefix, path))
        n = len(IndexedDataset(prefix, mmap=False))
        for name, bookends, size in zip(("train", "valid", "test"), config.split_matrix, sizes):
            if bookends is None or size is None:
                continue
            if int(round(bookends[1] * n)) <= int(round(bookends[0] * n)):
                raise ValueError(f"--split {config.split} leaves the {name} split of --data-path {prefix} "
                                 f"({n} documents) without documents; give it a larger share or set it to 0")


def build_datasets(args, tokenizer=None, *, is_built_on_rank: Optional[Callable[[], bool]] = None):
    """(train, valid, test) megatron-core datasets for Megatron-LM style arguments.

    ``args``: a namespace or dict with ``seq_length``, ``micro_batch_size`` /
    ``global_batch_size``, ``train_iters``, ``eval_iters``, ``eval_interval``,
    and either ``data_path`` (Megatron syntax) or ``mock_data``; the other data
    options default as in Megatron-LM (``split`` "969, 30, 1", ``seed`` 1234,
    no reset of position ids / attention mask, no eod loss mask, attention mask
    created, mmap'ed .bin files, index cache in ``--data-cache-path`` or
    ``<directory of the first prefix>/cache``).  GPTDataset for real data,
    MockGPTDataset for ``mock_data``.  Call it on every rank of the default
    process group; a split is None where it has no share or is not built on this rank.
    """
    _quiet_megatron_import()
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, MockGPTDataset

    if isinstance(args, dict):
        args = SimpleNamespace(**args)
    if tokenizer is None:
        tokenizer = build_tokenizer_from_args(args)
    if not _arg(args, "mock_data") and parse_data_path(_arg(args, "data_path")) is None:
        raise ValueError("give --data-path PREFIX (a Megatron .bin/.idx dataset) or --mock-data")
    if _arg(args, "seq_length") is None:
        raise ValueError("--seq-length is required to build datasets")
    config = gpt_dataset_config(args, tokenizer)
    sizes = list(train_valid_test_num_samples(args))
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if not config.mock:
        _check_splits(config, sizes)
        if len(config.blend[0]) > 1 and not distributed:
            raise RuntimeError("a --data-path blend of several prefixes needs torch.distributed initialized "
                               "(megatron-core's BlendedDataset asks for the rank); a world of one will do")
    cls = MockGPTDataset if config.mock else GPTDataset
    builder = BlendedMegatronDatasetBuilder(cls, sizes, is_built_on_rank or default_is_built_on_rank, config)
    train, valid, test = builder.build()
    return train, valid, test


# ---------------------------------------------------------------------------------------------
# Microbatches
# ---------------------------------------------------------------------------------------------

def _collate(samples: List[dict]) -> Dict[str, Optional[torch.Tensor]]:
    batch = {}
    for key in BATCH_KEYS:
        values = [s.get(key) for s in samples]
        if any(v is None for v in values):
            batch[key] = None
            continue
        batch[key] = torch.stack([v if isinstance(v, torch.Tensor) else torch.as_tensor(v) for v in values])
    return batch


def batch_iterator(dataset, micro_batch_size: int, data_parallel_rank: int = 0, data_parallel_size: int = 1,
                   start_sample: int = 0) -> Optional[Iterator[Dict[str, Optional[torch.Tensor]]]]:
    """Microbatches of ``dataset`` for one data-parallel rank, as Megatron-LM's
    MegatronPretrainingSampler deals them.

    Sample indices from ``start_sample`` (the consumed-samples count of a
    resumed run) are grouped in runs of ``micro_batch_size * data_parallel_size``;
    rank r takes the r-th ``micro_batch_size`` slice of each run, so the
    data-parallel ranks' microbatches are disjoint and together cover every
    global batch.  Each microbatch is a dict of stacked tensors with the keys
    ``tokens, labels, loss_mask, attention_mask, position_ids`` (attention_mask
    None when the dataset does not create one).  Stops at the end of the
    dataset (an incomplete last run is dropped).  Returns None for a None
    dataset (a rank that builds no data)."""
    if dataset is None:
        return None
    for name, value, low in (("micro_batch_size", micro_batch_size, 1), ("data_parallel_size", data_parallel_size, 1),
                             ("start_sample", start_sample, 0)):
        if int(value) != value or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value}")
    if not 0 <= data_parallel_rank < data_parallel_size:
        raise ValueError(f"data_parallel_rank must be in [0, {data_parallel_size}), got {data_parallel_rank}")
    run = micro_batch_size * data_parallel_size
    if start_sample % run:
        raise ValueError(f"start_sample {start_sample} (consumed samples) must be a multiple of "
                         f"micro_batch_size x data_parallel_size = {run}")
    total = len(dataset)
    if start_sample > total:
        raise ValueError(f"start_sample {start_sample} is past the end of the dataset ({total} samples)")

    def generate():
        for first in range(start_sample, total - run + 1, run):
            lo = first + data_parallel_rank * micro_batch_size
            yield _collate([dataset[i] for i in range(lo, lo + micro_batch_size)])

    return generate()


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m primus_megatron.train.data",
                                description="Build Megatron .bin/.idx datasets for primus_megatron's examples.")
    p.add_argument("--build-corpus-dataset", nargs="?", const=DEFAULT_CORPUS_PREFIX, metavar="OUT_PREFIX",
                   help="tokenize the packaged corpus (primus_megatron/data/corpus/*.jsonl) with the "
                        f"ByteTokenizer into OUT_PREFIX.bin/.idx (default {DEFAULT_CORPUS_PREFIX})")
    p.add_argument("--force", action="store_true", help="rebuild even when the output is up to date")
    args = p.parse_args(argv)
    if args.build_corpus_dataset is None:
        p.print_help()
        return 2
    result = build_corpus_dataset(args.build_corpus_dataset, force=args.force)
    prefix = result["prefix"]
    if result.get("up_to_date"):
        print(f"up to date: {prefix}.bin / {prefix}.idx ({result['documents']} documents, "
              f"{result['tokens']} tokens)")
    else:
        print(f"wrote {result['documents']} documents, {result['tokens']} tokens ({result['dtype']}, ByteTokenizer, "
              f"eod appended):\n  {result['bin']} ({result['bin_bytes']} bytes)\n  {result['idx']} "
              f"({result['idx_bytes']} bytes)\n  {result['meta']}")
    print(f"use it with: --data-path {prefix} --tokenizer-type ByteTokenizer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
