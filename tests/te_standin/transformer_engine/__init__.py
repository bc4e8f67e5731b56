"""A CPU stand-in for TransformerEngine v2.11, for tests only.

TransformerEngine v2.11 (tag v2.11, commit c188b533cc3721ca9c6bbfd26148f5cf60108c25) is the
newest release megatron-core 0.16.1 accepts (its ``dev`` extra pins transformer-engine
>=2.9.0a0,<2.12.0). This package reproduces, in our own code and in plain torch on CPU, what
Megatron-LM's TransformerEngine layer spec reaches in it (megatron-core 0.16.1 and 0.19.x,
``megatron/core/extensions/transformer_engine.py`` and the modules that import TE at import
time), each module citing the TE file and lines it follows:

* the weight-gradient API: ``pytorch/module/_common.py`` ``WeightGradStore``,
  ``pytorch/module/base.py`` (``wgrad_store``, hooks, ``backward_dw``, ``get_dummy_wgrad``);
* ``Linear`` / ``LayerNormLinear`` with TE's constructor signatures (forward, backward, the wgrad
  GEMM closure and what it hands ``put``; column / row tensor parallelism with and without
  sequence parallelism), ``LayerNorm`` / ``RMSNorm``, ``DotProductAttention`` (the math of TE's
  unfused backend; with context parallelism TE's p2p, a2a and all_gather implementations,
  ``pytorch/attention/context_parallel.py``, for fp16/bf16 only as TE; packed sequences in the
  ``thd`` format without context parallelism, as TE's fused (fp16/bf16) and unfused (fp32) backends
  place them), ``GroupedLinear`` (megatron's grouped experts: forward, backward and the delayed
  weight gradient, in FP8 too) with ``Fp8Padding`` / ``Fp8Unpadding``;
* ``pytorch/quantization.py`` (``FP8GlobalStateManager``, ``autocast``, ``fp8_autocast``, the
  support checks), ``common/recipe``, ``pytorch/distributed.py`` (``CudaRNGStatesTracker``,
  ``activation_recompute_forward``, the tensor-parallel collectives), ``cpp_extensions``
  ``general_gemm``, ``pytorch/quantized_tensor.py`` and ``Float8TensorStorage``.

There is no FP8 device on CPU: the stand-in answers as TE does on a device without FP8 support
(``fp8_autocast(enabled=True)`` fails TE's own assertion). For tests,
``pytorch.quantization.emulate_fp8_device(platform)`` makes it answer as an FP8 device (a Hopper,
or gfx942 with the FNUZ formats; in processes a test starts, such as Megatron-LM's ranks, the
environment variable ``TE_STANDIN_EMULATE_FP8_DEVICE=sm90|gfx942``), and FP8 is then real for the per-tensor recipes (delayed and
current scaling, E4M3 and HYBRID) in Linear, LayerNormLinear and GroupedLinear: float8 casts with
TE's scales and amax bookkeeping, the quantized weight cached across microbatches, the GEMMs on
float8 data with cuBLASLt's alignment checks (``pytorch/quantization.py``, ``tensor/``,
``module/_gemms.py``, ``module/grouped_linear.py``, ``cpp_extensions/``). The block-scaled recipes
and FP4, FP8 in DotProductAttention, FP8 parameters and FP8 extra state in checkpoints raise
NotImplementedError; so does ``LayerNormMLP``, which megatron-core (0.16.1, 0.19) never builds.
What it does not reproduce raises NotImplementedError naming the stand-in, never a silent
fallback. The version comes from the distribution metadata beside this package
(``transformer_engine-2.11.0.dist-info``), as TE's ``__init__.py`` reads it (line 67).

Absent on purpose (megatron-core imports these under ``try`` and falls back, or a dense GPT never
reaches them): ``pytorch.optimizers`` (megatron-core then uses torch's Adam: the optimizer is not
part of the layer spec), ``cpu_offload``, fused RoPE (``attention.rope``),
``permutation`` (MoE), ``cross_entropy``, ``tensor.utils`` (FP8 parameter gathers),
``module.base.get_workspace``, TE's ``checkpoint`` (raises), the operation fuser ``ops`` (its
class names exist for megatron-core's annotations; building one raises) and the MoE ``router``
(raises). TE 2.11 has no ``attention._SplitAlongDim``, so megatron-core's ``SplitAlongDim`` is
None with it as with this.

Never importable by the test session itself: tests put ``tests/te_standin`` on the path of the
processes they start only (megatron-core decides at import whether TransformerEngine is
installed): megatron_lm_harness.run(te=True), test_te_wgrad.py's and
test_te_standin_context_parallel.py's spawned ranks, test_te_standin_conformance.py's subprocess.
"""
from importlib import metadata

import transformer_engine.common  # noqa: F401  (TE's __init__.py:11)

from . import pytorch  # noqa: F401  (TE's __init__.py:13-16)

__version__ = str(metadata.version("transformer_engine"))
