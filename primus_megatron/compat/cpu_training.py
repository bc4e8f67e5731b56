"""CPU mode for Megatron-LM's training loop (``megatron.training``), on top of
``compat.cpu``.

``compat.cpu.enable(training=True)`` calls ``enable()`` here. It makes
Megatron-LM's own ``pretrain()`` (``pretrain_gpt.py`` at tag core_v0.16.1 or
core_v0.19.0) run on
CPU processes with gloo, so that a user can dry-run their real command line on a
laptop, and our tests can train Megatron-LM's loop in CI. The patched
``pretrain_gpt.py`` (``patches/``) turns it on with ``--cpu``, or when CUDA is
absent and ``--distributed-backend gloo`` is given.

What it covers, besides megatron-core (``compat.cpu``):

* the modules of Megatron-LM's training path that call ``torch.cuda`` see a
  ``torch`` whose CUDA device is the CPU (``_TRAINING_MODULES``): CUDA "is
  available" with one device (``initialize_megatron`` asserts it, and only
  initialises model parallelism and the model-parallel RNG with a device),
  ``set_device``, ``empty_cache``, streams and memory statistics do nothing or
  report zero, ``current_device()`` is the CPU, tensors asked for on "cuda"
  (``torch.tensor/zeros/rand(..., device="cuda")``, the JIT warm-up) are
  created on CPU, and the CUDA RNG state is the CPU generator's (it is saved in
  checkpoints and restored from its own ``torch_rng_state`` entry);
* ``Tensor.cuda()`` (and so ``Module.cuda()``) returns the tensor itself, for
  the whole process: Megatron-LM moves the model and every batch with it;
* the fused-kernel build (``megatron.legacy.fused_kernels.load``, which runs
  nvcc) is skipped: on CPU the unfused paths run;
* ``torch.compile`` is off (``torch._dynamo.config.disable``): megatron's
  fused bias-GeLU / bias-dropout-add functions run eagerly instead of being
  compiled by inductor on the first call (about 8 s of a dry run's start-up
  on 2 cores, for kernels that matter only on GPUs); set
  ``PRIMUS_CPU_TORCH_COMPILE=1`` to keep it;
* torch_dist checkpoints are written in the rank's own process: megatron-core's
  writer otherwise starts a results-queue manager (a spawned interpreter that
  re-imports the training script, about 10 s per save) and forks a writer per
  bucket.

Whole-process changes are acceptable here because a Megatron-LM process in CPU
mode has no other use for CUDA; megatron-core's own CPU mode (``compat.cpu``
without ``training``) stays scoped as before. Megatron-LM still needs its
start-up dependencies (triton, pybind11, ...; see requirements-megatron-lm.txt);
``megatron_lm.install()`` in CPU mode also sets ``--distributed-backend gloo``,
``--transformer-impl local``, ``--no-persist-layer-norm``, ``--no-rope-fusion`` with rope,
``--no-masked-softmax-fusion`` with 16-bit inputs, ``--num-workers 0``, and no FP8, userbuffers overlap
or CUDA graphs (megatron_lm/cpu_mode.py, which first says what of these the GPU run would refuse).
"""
from __future__ import annotations

import importlib
import os
import sys

import torch

from . import cpu_torch

_enabled = False

# Megatron-LM modules (and the two megatron-core ones only its loop uses) whose global
# ``torch`` becomes the training proxy (and why).
_TRAINING_MODULES = (
    # is_available assert, device_count > 0, set_device, torch.rand(device="cuda") in the JIT
    # warm-up, empty_cache
    "megatron.training.initialize",
    # model.cuda(current_device()), ddp side stream, flags/losses/eval counts on "cuda",
    # empty_cache, memory_stats
    "megatron.training.training",
    # norm buffers on "cuda", memory report, current_device for batch broadcasts (core_v0.16.1: a
    # module; core_v0.19.0: a package, the calls in its common_utils)
    "megatron.training.utils",
    "megatron.training.utils.common_utils",
    # core_v0.19.0 builds the model chunks here: model.cuda(current_device()), a DDP side stream
    "megatron.training.models.dist_utils",
    # iteration all-reduce on "cuda", CUDA RNG state in checkpoints, empty_cache
    "megatron.training.checkpointing",
    # synchronize around timed regions; the all-gather of timings on current_device()
    "megatron.core.timers",
    # validation flags on "cuda", current_device, CUDA RNG state for reruns
    "megatron.core.rerun_state_machine",
    # --moe-grouped-gemm asks torch.cuda.get_device_capability() >= 8 for the GroupedGEMM kernels
    # (arguments.py:852-854 at core_v0.16.1)
    "megatron.training.arguments",
    # core_v0.19.0's get_batch_on_this_tp_rank, which pretrain_gpt.py's get_batch calls: the cu_seqlens of
    # packed (--sft) batches broadcast from a tensor on current_device() (utils.py:2189, 2268-2300)
    "megatron.core.utils",
)


def _nothing(*args, **kwargs) -> None:
    return None


def _zero(*args, **kwargs) -> int:
    return 0


class _CpuDeviceProperties:
    """What `torch.cuda.get_device_properties` reports in CPU mode: the capability above, the host."""

    name = "CPU (primus_megatron CPU mode)"
    major, minor = 9, 0
    multi_processor_count = os.cpu_count() or 1
    total_memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


_CPU_PROPERTIES = _CpuDeviceProperties()


def _make_proxy():
    class _CudaForTraining(cpu_torch.CudaOnCpu):
        """``torch.cuda`` as seen by Megatron-LM's training modules in CPU mode."""

        is_available = staticmethod(lambda: True)
        device_count = staticmethod(lambda: 1)
        set_device = staticmethod(_nothing)
        empty_cache = staticmethod(_nothing)
        memory_allocated = max_memory_allocated = memory_reserved = max_memory_reserved = staticmethod(_zero)
        device_memory_used = staticmethod(_zero)
        memory_stats = staticmethod(lambda *args, **kwargs: {})
        reset_peak_memory_stats = staticmethod(_nothing)
        set_stream = staticmethod(_nothing)  # Stream, current_stream, stream: compat.cpu's (one stream)
        # the CPU generator is checkpointed as torch_rng_state already: report it, restore nothing
        get_rng_state = staticmethod(lambda *args, **kwargs: torch.get_rng_state())
        set_rng_state = staticmethod(_nothing)
        manual_seed = staticmethod(_nothing)
        # no CUDA kernel runs in CPU mode: none of their compute-capability gates applies
        get_device_capability = staticmethod(lambda *args, **kwargs: (9, 0))
        # the same answer through the properties (get_device_arch_version: utils.py:448 at core_v0.16.1,
        # utils/common_utils.py:502 at core_v0.19.0, asked with tensor or context parallelism)
        get_device_properties = staticmethod(lambda *args, **kwargs: _CPU_PROPERTIES)

    class _TorchForTraining(cpu_torch.TorchOnCpu):
        def __init__(self):
            super().__init__()
            self.cuda = _CudaForTraining()
            for name in ("rand", "randn", "empty_like", "zeros_like", "ones_like", "arange"):
                setattr(self, name, cpu_torch.on_cpu(getattr(torch, name)))

        @staticmethod
        def device(kind, *args):
            # core_v0.19.0's update_seqlen_stats_from_cu_seqlens (--sft) builds
            # torch.device(f"cuda:{torch.cuda.current_device()}") once is_available says yes (training.py:327)
            if isinstance(kind, str) and kind.startswith("cuda"):
                return torch.device("cpu")
            return torch.device(kind, *args)

    return _TorchForTraining()


def _tensor_cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
    # CPU mode: the tensor stays where it is (Megatron-LM moves the model and every batch)
    return self


def _skip_fused_kernels() -> None:
    try:
        fused_kernels = importlib.import_module("megatron.legacy.fused_kernels")
    except ImportError:  # not a Megatron-LM checkout: nothing to build
        return
    fused_kernels.load = _nothing  # it would compile CUDA sources with nvcc


def enable() -> None:
    """Patch Megatron-LM's training path for CPU/gloo (after ``compat.cpu.enable()``).
    Idempotent. Modules of the list that are not importable (megatron-core alone,
    without Megatron-LM's ``megatron.training``) are left alone."""
    global _enabled
    if _enabled:
        return
    proxy = _make_proxy()
    for name in _TRAINING_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            if name.startswith("megatron.core."):
                raise
            continue  # megatron-core alone: no Megatron-LM training loop to patch
        module.torch = proxy
    torch.Tensor.cuda = _tensor_cuda
    _skip_fused_kernels()
    from . import checkpoint_writer

    checkpoint_writer.write_in_process()
    if os.environ.get("PRIMUS_CPU_TORCH_COMPILE") != "1":
        importlib.import_module("torch._dynamo").config.disable = True
    _enabled = True


def is_enabled() -> bool:
    """Whether ``enable()`` has run in this process."""
    return _enabled


def requested(argv=None) -> bool:
    """Whether a Megatron-LM command line asks for CPU mode: ``--cpu``, or
    ``--distributed-backend gloo`` on a machine without CUDA."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--cpu" in argv:
        return True
    backend = None
    for i, a in enumerate(argv):
        if a == "--distributed-backend" and i + 1 < len(argv):
            backend = argv[i + 1]
        elif a.startswith("--distributed-backend="):
            backend = a.split("=", 1)[1]
    return backend == "gloo" and not torch.cuda.is_available()
