"""Megatron-LM integration: the --pipeline-schedule arguments and install().

In Megatron-LM's pretrain_gpt.py (see patches/)::

    from primus_megatron import megatron_lm as primus
    primus.install()
    pretrain(..., extra_args_provider=primus.extra_args_provider(existing_provider), ...)
    primus.finish()  # CPU mode: gloo's process groups shut down before the interpreter exits
"""
from ..options import add_args
from .plugin import extra_args_provider, finish, forward_backward_func_for, install, placed_provider

__all__ = ["add_args", "extra_args_provider", "install", "finish", "forward_backward_func_for", "placed_provider"]
