"""``torch`` as megatron's patched modules see it in CPU mode: CUDA placements land on the CPU,
and CUDA streams and events are ones that order nothing (CPU work runs in program order).

Shared by ``compat.cpu`` (megatron-core) and ``compat.cpu_training`` (Megatron-LM's training loop),
which extends these proxies; neither imports the other for them.
"""
from __future__ import annotations

import contextlib
import types

import torch

CPU = torch.device("cpu")


def cpu_device(device):
    """Map a CUDA device spec (``"cuda"``, ``"cuda:1"``, an int, a cuda device) to CPU."""
    if device is None:
        return None
    if isinstance(device, int) or torch.device(device).type == "cuda":
        return CPU
    return device


def on_cpu(factory):
    """Wrap a tensor factory so that a CUDA ``device=`` argument lands on CPU."""

    def wrapper(*args, **kwargs):
        if "device" in kwargs:
            kwargs["device"] = cpu_device(kwargs["device"])
        if kwargs.get("pin_memory") and not torch.cuda.is_available():
            kwargs["pin_memory"] = False  # staging for a copy to a GPU there is not: CPU-only torch refuses it
        return factory(*args, **kwargs)

    wrapper.__name__ = getattr(factory, "__name__", "factory")
    return wrapper


class CudaOnCpu(types.ModuleType):
    """``torch.cuda`` as seen by a patched megatron module."""

    def __init__(self):
        super().__init__("torch.cuda")

    @staticmethod
    def current_device():
        # megatron passes this as ``device=``; a CPU device is accepted everywhere it is used
        return CPU

    @staticmethod
    def synchronize(device=None):
        # gloo work is complete once its request is waited on: nothing to synchronise
        return None

    # CPU ops run in program order: one stream, whose events are complete when recorded
    @staticmethod
    def Stream(*args, **kwargs):
        return _STREAM

    @staticmethod
    def current_stream(*args, **kwargs):
        return _STREAM

    @staticmethod
    def stream(stream):
        return contextlib.nullcontext()

    @staticmethod
    def Event(*args, **kwargs):
        # megatron's combined 1F1B makes one event per microbatch's schedule plan
        # (model_chunk_schedule_plan.py:310 at core_v0.16.1); CPU-only torch refuses to build one
        return _Event()

    # nvtx ranges mark a profile; CPU-only torch raises on them ("NVTX functions not installed")
    nvtx = types.SimpleNamespace(range_push=lambda *a, **k: None, range_pop=lambda *a, **k: None,
                                 range=lambda *a, **k: contextlib.nullcontext())

    def __getattr__(self, name):
        return getattr(torch.cuda, name)


class _Event:
    """A CUDA event on the CPU: complete when recorded."""

    def record(self, stream=None) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def wait(self, stream=None) -> None:
        return None

    def query(self) -> bool:
        return True


class _Stream:
    """A CUDA stream that orders nothing: CPU work runs in program order."""

    def wait_stream(self, other) -> None:
        return None

    def wait_event(self, event) -> None:
        return None

    def record_event(self, event=None) -> _Event:
        return _Event()

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True


_STREAM = _Stream()


class TorchOnCpu(types.ModuleType):
    """``torch`` as seen by a patched megatron module: CUDA placements go to CPU."""

    def __init__(self):
        super().__init__("torch")
        self.cuda = CudaOnCpu()
        for name in ("empty", "zeros", "ones", "full", "tensor"):
            setattr(self, name, on_cpu(getattr(torch, name)))

    @staticmethod
    def autocast(device_type, *args, **kwargs):
        # config.enable_autocast makes schedules.forward_step open autocast("cuda")
        return torch.autocast("cpu" if device_type == "cuda" else device_type, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(torch, name)
