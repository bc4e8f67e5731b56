"""SFT data made by the tests for Megatron-LM's `--sft` path: a jsonl of conversations whose lengths
have a long tail (most short, a few past --seq-length, which SFTDataset truncates; some lines hold two
conversations, i.e. two documents in one sample's cu_seqlens), and a tiny character-level tokenizer
(tests/sft_standin: the test-only `transformers` stand-in reads its vocab.json). Megatron-LM's
SFTTokenizer runs on it with its default prompt format, nemotron-h-aligned, which masks the system and
user turns out of the loss."""
from __future__ import annotations

import json
import os
import random
import string

SPECIALS = ["<unk>", "</s>", "<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_233>"]  # the prompt format's and pad
CHARS = string.ascii_letters + " \n"


def _text(rng: random.Random, mean_chars: float) -> str:
    n = max(1, min(400, int(rng.lognormvariate(0, 1.1) * mean_chars)))  # log-normal: a long tail
    words, size = [], 0
    while size < n:
        word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 6)))
        words.append(word)
        size += len(word) + 1
    return " ".join(words)


def _conversation(rng: random.Random) -> list:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": _text(rng, 6)},
            {"role": "assistant", "content": _text(rng, 14)}]


def write(folder: str, lines: int = 48, seed: int = 58) -> tuple[str, str]:
    """(the jsonl's path, the tokenizer's folder) under `folder`, the same for the same arguments."""
    os.makedirs(os.path.join(folder, "tokenizer"), exist_ok=True)
    vocab = {t: i for i, t in enumerate(SPECIALS + list(CHARS))}
    with open(os.path.join(folder, "tokenizer", "vocab.json"), "w") as f:
        json.dump({"vocab": vocab, "eos": "</s>"}, f)
    rng = random.Random(seed)
    path = os.path.join(folder, "conversations.jsonl")
    with open(path, "w") as f:
        for _ in range(lines):
            messages = _conversation(rng) + (_conversation(rng) if rng.random() < 0.25 else [])
            f.write(json.dumps({"messages": messages}) + "\n")
    return path, os.path.join(folder, "tokenizer")


def args(folder: str) -> list:
    """Megatron-LM's options for that data: --sft over the jsonl with its tokenizer, per-token loss."""
    path, tokenizer = write(folder)
    return ["--sft", "--data-path", path, "--tokenizer-type", "SFTTokenizer", "--tokenizer-model", tokenizer,
            "--split", "100,0,0", "--calculate-per-token-loss", "--seq-length", "64",
            "--max-position-embeddings", "64", "--no-create-attention-mask-in-dataloader"]
