"""What --data-path expects, said where a prefix's files are missing (argument check and data loader)."""
from __future__ import annotations

import os

DEFAULT_CORPUS_PREFIX = os.path.join("out", "data", "corpus_text_document")  # the bundled toy corpus, built


def missing_dataset(prefix: str, path: str) -> str:
    """One sentence for a --data-path prefix whose .bin or .idx file `path` is missing: what the option
    takes, how such files are made, and the build command only for the bundled corpus's own prefix
    (building the toy corpus at a user's dataset path would train on the wrong data)."""
    text = (f"--data-path {prefix}: {path} does not exist; --data-path takes the prefix of a Megatron indexed "
            f"dataset, the files PREFIX.bin and PREFIX.idx (Megatron-LM's tools/preprocess_data.py writes them "
            f"from JSON lines as OUTPUT_PREFIX_text_document.bin/.idx)")
    if os.path.normpath(prefix).endswith(DEFAULT_CORPUS_PREFIX):
        return (f"{text}; {prefix} is the bundled corpus's prefix: build it with "
                f"`python -m primus_megatron.train.data --build-corpus-dataset {prefix}`")
    return f"{text}; --mock-data trains on synthetic tokens instead"
