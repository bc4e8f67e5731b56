"""A CPU stand-in for TransformerEngine v2.11, for tests only.

TransformerEngine v2.11 (tag v2.11, commit c188b533cc3721ca9c6bbfd26148f5cf60108c25) is the
newest release megatron-core 0.16.1 accepts (its ``dev`` extra pins transformer-engine
>=2.9.0a0,<2.12.0). This package reproduces, in our own code and in plain torch on CPU, what
Megatron-LM's TransformerEngine layer spec reaches in it (megatron-core 0.16.1 and 0.19.x,
``megatron/core/extensions/transformer_engine.py`` and the modules that import TE at import
time), each module citing the TE file and lines it follows:

* the weight-gradient API: ``pytorch/module/_common.py`` ``WeightGradStore``,
  ``pytorch/module/base.py`` (``wgrad_store``, hooks, ``backward_dw``, ``get_dummy_wgrad``);
* ``Linear`` / ``LayerNormLinear`` (forward, backward, the wgrad GEMM closure and what it
  hands ``put``), ``LayerNorm`` / ``RMSNorm``, ``DotProductAttention`` (TE's unfused
  backend), ``GroupedLinear`` (constructor), ``_SplitAlongDim``;
* ``pytorch/quantization.py`` (``FP8GlobalStateManager``, ``fp8_autocast``), ``common/recipe``,
  ``pytorch/distributed.py`` (``CudaRNGStatesTracker``, ``checkpoint``,
  ``activation_recompute_forward``), ``pytorch/quantized_tensor.py``.

There is no FP8 on CPU: the stand-in answers as TE does on a device without FP8 support
(``fp8_autocast(enabled=True)`` fails TE's own assertion). What it does not reproduce raises
NotImplementedError naming the stand-in, never a silent fallback. The version comes from the
distribution metadata beside this package (``transformer_engine-2.11.0.dist-info``), as TE's
``__init__.py`` reads it (line 67).

Never importable by the test session itself: tests put ``tests/te_standin`` first on the
PYTHONPATH of the processes they start only (megatron-core decides at import whether
TransformerEngine is installed).
"""
from importlib import metadata

import transformer_engine.common  # noqa: F401  (TE's __init__.py:11)

from . import pytorch  # noqa: F401  (TE's __init__.py:13-16)

__version__ = str(metadata.version("transformer_engine"))
