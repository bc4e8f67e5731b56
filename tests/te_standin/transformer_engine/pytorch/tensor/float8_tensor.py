"""Stand-in for TE v2.11 ``pytorch/tensor/float8_tensor.py`` (commit c188b533): the quantizers of
the per-tensor recipes (``Float8Quantizer`` for delayed scaling, ``Float8CurrentScalingQuantizer``),
emulated (storage/float8_tensor_storage.py: exact values). A module's own quantizers are
``internal`` (TE ``linear.py`` ``_get_quantizers``, lines 1482-1507, sets it) and return a ``Float8TensorStorage``;
a non-internal one would return a ``Float8Tensor`` (a torch.Tensor subclass), which the
stand-in does not make."""
from __future__ import annotations

import torch

from ..quantized_tensor import QuantizedTensor, Quantizer
from .storage.float8_tensor_storage import Float8TensorStorage


class Float8Quantizer(Quantizer):
    def __init__(self, scale=None, amax=None, fp8_dtype=None, *, rowwise: bool = True, columnwise: bool = True):
        super().__init__(rowwise=rowwise, columnwise=columnwise)
        self.scale = torch.ones(1) if scale is None else scale
        self.amax = torch.zeros(1) if amax is None else amax
        self.dtype = fp8_dtype

    def quantize_impl(self, tensor: torch.Tensor):
        if not self.internal:
            raise NotImplementedError("the TransformerEngine stand-in makes no Float8Tensor (only internal storages)")
        data = tensor.detach().clone()  # TE: a new FP8 buffer (cast); here the same values
        out = Float8TensorStorage(data=data, fp8_scale_inv=torch.ones(1), fp8_dtype=self.dtype, quantizer=self)
        out.update_usage(rowwise_usage=self.rowwise_usage, columnwise_usage=self.columnwise_usage)
        return out


class Float8CurrentScalingQuantizer(Float8Quantizer):
    pass


class Float8Tensor(Float8TensorStorage, QuantizedTensor):
    """Never instantiated by the stand-in (see the module doc)."""
