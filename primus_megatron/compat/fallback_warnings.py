"""megatron-core's warnings that TransformerEngine, apex or absl is missing, once.

On a machine without them (CPU mode: the demo, the tests, a laptop dry-run)
megatron-core warns at import time of several modules, in every rank
process, that it falls back to torch's norms, optimizers and multi-tensor
ops: about twenty lines before the first iteration. `silence()` filters
exactly those messages (every other warning still shows) and returns one
line that says the same once, for rank 0 to log.
"""
from __future__ import annotations

import warnings

# the messages megatron-core 0.16.1 issues when TE / apex are absent (models/backends.py,
# models/gpt/gpt_layer_specs.py, optimizer/{__init__,optimizer,clip_grads}.py,
# distributed/fsdp/.../mixed_precision.py)
# and hyper_comm_grid.py's about absl.logging (it then logs through Python's logging)
_MESSAGES = (r"Transformer Engine and Apex are not installed", r"Apex is not installed",
             r"absl\.logging is not installed")

SUMMARY = ("TransformerEngine and apex are not installed: megatron-core uses its torch fallbacks (norms, optimizers, "
           "multi-tensor ops; Python's logging for absl's); its warnings about it are shown here once")


def silence() -> str:
    """Filter megatron-core's missing-TE/apex/absl warnings in this process; returns the one-line summary."""
    for message in _MESSAGES:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
    return SUMMARY
