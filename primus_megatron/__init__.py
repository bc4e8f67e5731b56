"""primus_megatron: zero-bubble pipeline schedules behind Megatron's forward_backward_func.

`primus_megatron.schedules` is pure Python; the torch-facing API is imported
lazily so that the planner runs without torch.
"""
__version__ = "0.1.0"

_LAZY = {
    "get_forward_backward_func": "primus_megatron.runtime",
    "build_model": "primus_megatron.runtime",
    "PipelineSpec": "primus_megatron.options",
}


_SUBMODULES = ("schedules", "balancing", "options", "runtime", "compat", "train", "megatron_lm", "cli")


def __getattr__(name: str):
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'primus_megatron' has no attribute {name!r}")
