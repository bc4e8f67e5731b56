"""The torch side: executor, p2p, deferred weight gradients, placement.

Imports megatron-core; the planner (`primus_megatron.schedules`) does not.
"""
from .forward_backward import PipelineRunner, ScheduleMismatch, get_forward_backward_func
from .p2p import PipelineTimeout
from .placement import build_model
from .wgrad_store import WeightGradStoreError, get_store

__all__ = ["PipelineRunner", "ScheduleMismatch", "get_forward_backward_func", "build_model", "PipelineTimeout", "WeightGradStoreError",
           "get_store"]
