"""megatron-core's combined 1F1B step (``--overlap-moe-expert-parallel-comm``) on CPU.

What it replaces (megatron-core 0.16.1, under ``megatron/core/``): on GPU a pair's nodes (attention,
MoE dispatch, experts, combine, of one microbatch's forward and another's backward) each run on one
of two CUDA streams, the computation stream (the current one) and a communication stream that
``set_streams`` creates (pipeline_parallel/utils.py:324-339); ``ScheduleNode._forward`` /
``_backward`` wait on the microbatch's event before a node and record it after
(``stream_acquire_context``, utils.py:119-126), so the nodes of one microbatch stay in order across
the streams while the other microbatch's nodes overlap them; ``record_stream`` (utils.py:237,270,
models/gpt/fine_grained_callables.py:576) tells CUDA's caching allocator that a tensor made on one
stream is used on another.

On CPU every op runs when issued, in program order: the stand-in streams are one stream that
orders nothing and the events are complete when recorded (compat.cpu_torch), so the plan's nodes
run one after another in the order ``TransformerLayerSchedulePlan.run`` issues them
(models/common/model_chunk_schedule_plan.py:215-253): one valid serialisation of what the two GPU
streams do, with no overlap. ``record_stream`` has no CPU kernel ('aten::record_stream' is not
registered for CPU) and CPU memory has no per-stream allocator: it is a no-op while a combined step
runs (a scoped swap, as compat.cpu's ``Tensor.cuda`` one).
"""
from __future__ import annotations

import contextlib
import functools
import importlib

import torch

# megatron modules of the combined step whose global ``torch`` becomes compat.cpu's proxy
MODULES = (
    # set_streams' torch.cuda.Stream / current_stream, ScheduleNode's nvtx ranges (:212,:254)
    "megatron.core.pipeline_parallel.utils",
    # the loss node on torch.cuda.current_stream() (combined_1f1b.py:404)
    "megatron.core.pipeline_parallel.combined_1f1b",
    # torch.cuda.Event per plan (:310), current_stream (:376,381), nvtx (:476-504), stream (:509)
    "megatron.core.models.common.model_chunk_schedule_plan",
    # nvtx (:319), record_stream on current_stream (:576)
    "megatron.core.models.gpt.fine_grained_callables",
)


@contextlib.contextmanager
def _record_stream_is_a_no_op():
    original = torch.Tensor.record_stream
    torch.Tensor.record_stream = lambda self, stream: None
    try:
        yield
    finally:
        torch.Tensor.record_stream = original


def _wrap_combined_step(combined_1f1b) -> None:
    step = combined_1f1b.combined_forward_backward_step
    if getattr(step, "_primus_cpu", False):
        return

    @functools.wraps(step)
    def on_cpu(*args, **kwargs):
        with _record_stream_is_a_no_op():
            return step(*args, **kwargs)

    on_cpu._primus_cpu = True
    # megatron's interleaved schedule calls it through this module's global (combined_1f1b.py:201)
    combined_1f1b.combined_forward_backward_step = on_cpu


def enable(proxy) -> None:
    """Give the combined step's modules compat.cpu's ``torch`` proxy; scope ``record_stream``."""
    for name in MODULES:
        importlib.import_module(name).torch = proxy
    _wrap_combined_step(importlib.import_module("megatron.core.pipeline_parallel.combined_1f1b"))

