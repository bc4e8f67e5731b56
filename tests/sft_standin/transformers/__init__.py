"""Test-only stand-in for Hugging Face `transformers` (README.md beside it): AutoTokenizer only, a
character-level tokenizer over DIR/vocab.json with jinja2 chat templates."""
import json
import os
import re

import jinja2
import numpy as np

__version__ = "0.0.0+primus-test-standin"


class _CharTokenizer:
    def __init__(self, vocab: dict, eos: str) -> None:
        self.vocab = dict(vocab)
        self.inverse = {i: t for t, i in self.vocab.items()}
        specials = sorted((t for t in self.vocab if len(t) > 1), key=len, reverse=True)
        self._pattern = re.compile("|".join([re.escape(t) for t in specials] + ["."]), re.S)
        self.eos_token_id = self.vocab[eos]
        self.bos_token_id = None
        self.pad_token_id = None
        self.chat_template = None

    def __len__(self) -> int:
        return len(self.vocab)

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            return self.vocab.get(tokens, self.vocab["<unk>"])
        return [self.convert_tokens_to_ids(t) for t in tokens]

    def encode(self, text: str) -> list:
        return [self.convert_tokens_to_ids(t) for t in self._pattern.findall(text)]

    def decode(self, ids) -> str:
        return "".join(self.inverse.get(int(i), "<unk>") for i in ids)

    def get_added_vocab(self) -> dict:
        return {t: i for t, i in self.vocab.items() if len(t) > 1}

    def apply_chat_template(self, conversation, tokenize=True, add_generation_prompt=False, chat_template=None,
                            return_tensors=None, **_ignored):
        text = jinja2.Environment().from_string(chat_template or self.chat_template).render(
            messages=conversation, add_generation_prompt=add_generation_prompt)
        if not tokenize:
            return text
        ids = self.encode(text)
        return np.array([ids]) if return_tensors == "np" else ids


class AutoTokenizer:
    @staticmethod
    def from_pretrained(pretrained_model_name_or_path, **_ignored):
        with open(os.path.join(pretrained_model_name_or_path, "vocab.json")) as f:
            spec = json.load(f)
        return _CharTokenizer(spec["vocab"], spec["eos"])
