"""Megatron-LM integration: the --pipeline-schedule arguments and install().

In Megatron-LM's pretrain_gpt.py (see patches/)::

    from primus_megatron import megatron_lm as primus
    primus.install()
    pretrain(..., extra_args_provider=primus.extra_args_provider(existing_provider), ...)
"""
from .args import add_args
from .plugin import extra_args_provider, forward_backward_func_for, install, placed_provider

__all__ = ["add_args", "extra_args_provider", "install", "forward_backward_func_for", "placed_provider"]
