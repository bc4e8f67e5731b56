"""Tokenizers for examples/pretrain_gpt.py that need no download.

``ByteTokenizer``: UTF-8 bytes are the ids 0..255, id 256 is the end-of-document
token; ``vocab_size`` 257.  It exposes what megatron-core's datasets read from a
tokenizer (megatron/core/datasets/gpt_dataset.py, megatron_dataset.py):

* ``eod``: appended to each document by the indexed-dataset builder; the loss
  mask and reset position ids / attention mask look for it.
* ``vocab_size``: GPTDatasetConfig picks the token dtype code from it, and
  MockGPTLowLevelDataset draws ids below it.
* ``unique_identifiers``: serialised into every dataset's description, whose
  MD5 names the cached index files; a different tokenizer gives new caches.
* ``pad``: absent (raises NotImplementedError, like Megatron-LM's legacy
  tokenizers).  MegatronDataset then pads with its sentinel -1, an id that
  never occurs in the data, so the eod token is never mistaken for padding.

``NullTokenizer(V)`` is Megatron-LM's tokenizer for --mock-data with
--vocab-size V: ids 0..V-1 plus eod = V (``vocab_size`` V + 1).

``HuggingFaceTokenizer(path)`` wraps ``transformers.AutoTokenizer`` when
transformers is installed (``--tokenizer-type HuggingFaceTokenizer
--tokenizer-model PATH``).

``padded_vocab_size(vocab, divisible_by, tp)`` is the embedding size Megatron-LM
allocates: the vocabulary rounded up to a multiple of
``--make-vocab-size-divisible-by`` x tensor-parallel size.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, List, Optional, Sequence

TOKENIZER_TYPES = ("ByteTokenizer", "HuggingFaceTokenizer", "NullTokenizer")


def padded_vocab_size(vocab_size: int, divisible_by: int = 128, tp: int = 1) -> int:
    """Megatron-LM's padded vocabulary: the smallest multiple of divisible_by * tp >= vocab_size."""
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    if divisible_by < 1:
        raise ValueError(f"--make-vocab-size-divisible-by must be >= 1, got {divisible_by}")
    if tp < 1:
        raise ValueError(f"--tensor-model-parallel-size must be >= 1, got {tp}")
    multiple = divisible_by * tp
    return -(-vocab_size // multiple) * multiple


class _TokenizerBase:
    """What megatron-core's datasets and our training script use from a tokenizer."""

    def __init__(self, **identifiers) -> None:
        self.unique_identifiers = OrderedDict()
        self.unique_identifiers["class"] = type(self).__name__
        for key, value in identifiers.items():
            self.unique_identifiers[key] = str(value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size}, eod={self.eod})"

    @property
    def pad(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} has no pad token")

    def tokenize(self, text: str) -> List[int]:  # pragma: no cover - abstract
        raise NotImplementedError

    def detokenize(self, ids: Iterable[int]) -> str:  # pragma: no cover - abstract
        raise NotImplementedError


class ByteTokenizer(_TokenizerBase):
    """UTF-8 bytes 0..255 plus an end-of-document token 256."""

    EOD = 256

    def __init__(self) -> None:
        super().__init__(encoding="utf-8", eod=self.EOD)

    @property
    def vocab_size(self) -> int:
        return 257

    @property
    def eod(self) -> int:
        return self.EOD

    @property
    def eos(self) -> int:
        return self.EOD

    @property
    def vocab(self) -> dict:
        vocab = {bytes([i]).decode("latin-1"): i for i in range(256)}
        vocab["<eod>"] = self.EOD
        return vocab

    @property
    def inv_vocab(self) -> dict:
        return {i: tok for tok, i in self.vocab.items()}

    def tokenize(self, text: str) -> List[int]:
        return list(text.encode("utf-8"))

    def detokenize(self, ids: Iterable[int], *, errors: str = "replace") -> str:
        """Text of the byte ids; end-of-document tokens are dropped."""
        data = bytearray()
        for i in ids:
            i = int(i)
            if 0 <= i < 256:
                data.append(i)
            elif i != self.EOD:
                raise ValueError(f"id {i} is outside ByteTokenizer's vocabulary 0..256")
        return data.decode("utf-8", errors=errors)


class NullTokenizer(_TokenizerBase):
    """Megatron-LM's NullTokenizer: ids are given as text ("1 2 3"); eod = vocab_size_without_eod."""

    def __init__(self, vocab_size: int) -> None:
        if vocab_size < 1:
            raise ValueError(f"--vocab-size must be >= 1, got {vocab_size}")
        self._eod = int(vocab_size)
        super().__init__(vocab_size=vocab_size)

    @property
    def vocab_size(self) -> int:
        return self._eod + 1

    @property
    def eod(self) -> int:
        return self._eod

    def tokenize(self, text: str) -> List[int]:
        return [int(x) for x in text.split()]

    def detokenize(self, ids: Iterable[int]) -> str:
        return " ".join(str(int(i)) for i in ids)


class HuggingFaceTokenizer(_TokenizerBase):
    """transformers.AutoTokenizer.from_pretrained(path); eod is its eos token."""

    def __init__(self, path: str, **kwargs) -> None:
        try:
            import transformers
        except ImportError:
            raise ImportError("--tokenizer-type HuggingFaceTokenizer needs the transformers package "
                              "(pip install transformers); use --tokenizer-type ByteTokenizer otherwise") from None
        self._tok = transformers.AutoTokenizer.from_pretrained(path, **kwargs)
        if self._tok.eos_token_id is None:
            raise ValueError(f"--tokenizer-model {path}: the tokenizer has no eos token to use as end of document")
        super().__init__(tokenizer_path=path, **kwargs)

    @property
    def vocab_size(self) -> int:
        return len(self._tok)

    @property
    def eod(self) -> int:
        return self._tok.eos_token_id

    @property
    def eos(self) -> int:
        return self._tok.eos_token_id

    @property
    def pad(self) -> int:
        if self._tok.pad_token_id is None:
            raise NotImplementedError("the HuggingFace tokenizer has no pad token")
        return self._tok.pad_token_id

    @property
    def vocab(self) -> dict:
        return self._tok.get_vocab()

    @property
    def inv_vocab(self) -> dict:
        return {i: t for t, i in self._tok.get_vocab().items()}

    def tokenize(self, text: str) -> List[int]:
        return self._tok(text, add_special_tokens=False)["input_ids"]

    def detokenize(self, ids: Sequence[int]) -> str:
        return self._tok.decode([int(i) for i in ids])


def build_tokenizer(tokenizer_type="ByteTokenizer", tokenizer_model: Optional[str] = None,
                    vocab_size: Optional[int] = None):
    """The tokenizer named by --tokenizer-type (--tokenizer-model for HuggingFace, --vocab-size for Null).

    ``tokenizer_type`` may also be an argparse namespace with Megatron-LM's names: see
    ``build_tokenizer_from_args``."""
    if not isinstance(tokenizer_type, str):
        return build_tokenizer_from_args(tokenizer_type)
    if tokenizer_type == "ByteTokenizer":
        return ByteTokenizer()
    if tokenizer_type == "HuggingFaceTokenizer":
        if not tokenizer_model:
            raise ValueError("--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model PATH")
        return HuggingFaceTokenizer(tokenizer_model)
    if tokenizer_type == "NullTokenizer":
        if vocab_size is None:
            raise ValueError("--tokenizer-type NullTokenizer needs --vocab-size")
        return NullTokenizer(vocab_size)
    raise ValueError(f"--tokenizer-type must be one of {', '.join(TOKENIZER_TYPES)}, got {tokenizer_type!r}")


def build_tokenizer_from_args(args):
    """Tokenizer for an argparse namespace with Megatron-LM's names.

    --mock-data with --vocab-size V uses NullTokenizer(V) (mock ids 0..V-1, eod V) as Megatron-LM
    does; otherwise --tokenizer-type decides (default ByteTokenizer)."""
    tokenizer_type = getattr(args, "tokenizer_type", None) or "ByteTokenizer"
    vocab_size = getattr(args, "vocab_size", None)
    if getattr(args, "mock_data", False) and vocab_size is not None and tokenizer_type == "ByteTokenizer":
        tokenizer_type = "NullTokenizer"
    return build_tokenizer(tokenizer_type, getattr(args, "tokenizer_model", None), vocab_size)
