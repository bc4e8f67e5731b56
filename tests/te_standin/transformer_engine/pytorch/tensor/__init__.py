"""Stand-in for TE v2.11 ``pytorch/tensor/__init__.py``: the quantized tensor classes megatron-core
imports (``QuantizedTensor`` for its FP8 checks), the per-tensor FP8 quantizers and storage."""
from ..quantized_tensor import (  # noqa: F401
    QuantizedTensor, QuantizedTensorStorage, Quantizer, prepare_for_saving, restore_from_saved)
from .float8_tensor import Float8CurrentScalingQuantizer, Float8Quantizer, Float8Tensor  # noqa: F401
from .storage.float8_tensor_storage import Float8TensorStorage  # noqa: F401
