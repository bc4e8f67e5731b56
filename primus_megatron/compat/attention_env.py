"""The attention backend that agrees with TransformerEngine's NVTE_*_ATTN variables.

megatron-core asserts, when a language model is built, that each of NVTE_FLASH_ATTN,
NVTE_FUSED_ATTN and NVTE_UNFUSED_ATTN is unset or equal to what its `attention_backend` implies
(0.16.1 `models/common/language_module/language_module.py:92-126`: auto 1/1/1, flash 1/0/0, fused
0/1/0, unfused 0/0/1, local 0/0/0). AMD's Primus images export NVTE_FLASH_ATTN=0 and
NVTE_FUSED_ATTN=1 (ROCm's TransformerEngine runs its fused CK/aotriton attention), which the default
`auto` fails on before the first step. `backend_for(environ)` names the backend every set variable
agrees with (auto first, where all allow it); None when none is set. `config_fields()` is that
backend as TransformerConfig keyword arguments, for every model we build (the training script,
the GPU kit's blocks, the throughput benchmark and the GPU check's model).
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

VARIABLES = ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN")
# megatron-core's AttnBackend names and the values it sets each variable to (language_module.py:107-126)
EXPECTED = (("auto", ("1", "1", "1")), ("flash", ("1", "0", "0")), ("fused", ("0", "1", "0")),
            ("unfused", ("0", "0", "1")), ("local", ("0", "0", "0")))


class AttentionEnvError(ValueError):
    """The NVTE_*_ATTN variables ask for no backend megatron-core has (one sentence)."""


def backend_for(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The megatron-core attention backend the NVTE_*_ATTN variables set in `environ` agree with,
    or None when none is set; AttentionEnvError when they agree with none."""
    environ = os.environ if environ is None else environ
    given = tuple(environ.get(name) for name in VARIABLES)
    if all(v is None for v in given):
        return None
    for name, values in EXPECTED:
        if all(g is None or g == v for g, v in zip(given, values)):
            return name
    shown = ", ".join(f"{n}={v}" for n, v in zip(VARIABLES, given) if v is not None)
    raise AttentionEnvError(f"{shown} match no attention backend of megatron-core (flash 1/0/0, fused 0/1/0, "
                            f"unfused 0/0/1, local 0/0/0, auto 1/1/1 for FLASH/FUSED/UNFUSED): unset them or "
                            f"set one of those combinations")


def config_fields(environ: Optional[Mapping[str, str]] = None) -> dict:
    """`{"attention_backend": AttnBackend[...]}` for a TransformerConfig, empty when no variable is set
    (megatron-core's default then)."""
    from megatron.core.transformer.enums import AttnBackend

    name = backend_for(environ)
    return {} if name is None else {"attention_backend": AttnBackend[name]}
