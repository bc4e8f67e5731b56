"""Stand-in for ``transformer_engine.pytorch`` (TE v2.11 ``pytorch/__init__.py``): the names
megatron-core reaches (see the package docstring); TE's other exports are absent."""
from transformer_engine.pytorch import ops  # noqa: F401
from transformer_engine.pytorch.attention import DotProductAttention  # noqa: F401
from transformer_engine.pytorch.distributed import CudaRNGStatesTracker, checkpoint  # noqa: F401
from transformer_engine.pytorch.module import (  # noqa: F401
    Fp8Padding, Fp8Unpadding, GroupedLinear, LayerNorm, LayerNormLinear, LayerNormMLP, Linear, RMSNorm)
from transformer_engine.pytorch.quantization import (  # noqa: F401
    autocast, fp8_autocast, fp8_model_init, get_default_recipe, is_fp8_available, is_fp8_block_scaling_available,
    is_mxfp8_available, is_nvfp4_available, quantized_model_init)
from transformer_engine.pytorch.quantized_tensor import QuantizedTensor, QuantizedTensorStorage, Quantizer  # noqa: F401
