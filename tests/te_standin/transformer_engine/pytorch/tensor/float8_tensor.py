"""Stand-in for TE v2.11 ``pytorch/tensor/float8_tensor.py`` (commit c188b533): the quantizers of
the per-tensor recipes, ``Float8Quantizer`` (delayed scaling, lines 37-214) and
``Float8CurrentScalingQuantizer`` (217-443), casting for real to the float8 dtype (storage/).

The cast is TE's kernel's (``common/cast/fp8/quantize_fp8.cuh`` lines 172-229): each element
``x * scale`` in fp32, converted to the float8 type saturating to its largest finite value (the
CUDA ``__nv_fp8_*`` conversion is ``__NV_SATFINITE``; torch's cast would make E5M2 overflow
infinite, hence the clamp), round to nearest even; ``scale_inv`` = 1 / scale. Delayed scaling
records the tensor's amax into the quantizer's ``amax`` (history row 0 of its recipe state) as an
atomic max over what was cast since the last update (lines 217-224); current scaling
(``csrc/quantizer.cpp`` 497-536, ``common/recipe/current_scaling.cu``) computes the amax first
(zeroed, then max), MAX-reduces it across ``amax_reduction_group`` when asked, and derives the
scale with ``compute_scale_from_amax`` (``common/recipe/recipe_common.cuh`` 14-49: amax floored
at ``amax_epsilon``, scale 1 for a zero / inf / NaN amax, FP32_MAX when the division overflows, the
mantissa cut with ``force_pow_2_scales``). The amax ignores NaN (fmaxf).

A module's quantizers are mostly ``internal`` (TE ``linear.py`` ``_get_quantizers``, 1482-1507) and
return a ``Float8TensorStorage``; a non-internal one returns a ``Float8Tensor`` (a torch.Tensor
subclass over the same buffers): GroupedLinear's input quantizers (grouped_linear.py 951-953), and a
module's weight workspace cached across microbatches (``base.py`` 1415-1427: cast as not internal so
that saving it for backward does not empty the cache)."""
from __future__ import annotations

from typing import Optional

import torch

from ..quantized_tensor import QuantizedTensor, Quantizer
from .storage.float8_tensor_storage import Float8TensorStorage

_FP32_MAX = torch.finfo(torch.float32).max


def _amax(tensor: torch.Tensor) -> torch.Tensor:
    """max |x| in fp32, NaN ignored (fmaxf), 0 for an empty tensor."""
    if tensor.numel() == 0:
        return torch.zeros(1)
    return torch.nan_to_num(tensor.detach().float().abs(), nan=0.0).amax().reshape(1)


def cast_to_fp8(tensor: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype) -> torch.Tensor:
    fp8_max = torch.finfo(fp8_dtype).max
    return (tensor.detach().float() * scale.float()).clamp(-fp8_max, fp8_max).to(fp8_dtype)


def compute_scale_from_amax(amax: torch.Tensor, fp8_max: float, force_pow_2_scales: bool,
                            epsilon: float) -> torch.Tensor:
    """``common/recipe/recipe_common.cuh`` lines 14-49."""
    amax = torch.where(amax < epsilon, torch.full_like(amax, epsilon), amax)
    bad = torch.isinf(amax) | (amax == 0) | torch.isnan(amax)
    scale = torch.tensor(fp8_max, dtype=torch.float32) / torch.where(bad, torch.ones_like(amax), amax)
    scale = torch.where(torch.isinf(scale), torch.full_like(scale, _FP32_MAX), scale)
    if force_pow_2_scales:
        scale = (scale.view(torch.int32) & torch.tensor(0xFF800000 - (1 << 32), dtype=torch.int32)).view(torch.float32)
    return torch.where(bad, torch.ones_like(scale), scale)


class _PerTensorQuantizer(Quantizer):
    """What both per-tensor quantizers share: the cast with a scale into a Float8TensorStorage."""

    def supports_only_rowwise_all_gather(self) -> bool:
        return True  # lines 210-214, 439-443: FP8 is all-gathered row-wise, transposed after

    def _storage(self, tensor: torch.Tensor, scale: torch.Tensor) -> Float8TensorStorage:
        """csrc/quantizer.cpp create_tensor (Float8Quantizer 226-274): an internal quantizer makes a
        Float8TensorStorage, another a Float8Tensor of the input's dtype and shape."""
        data = cast_to_fp8(tensor, scale, self.dtype)
        meta = dict(data=data, fp8_scale_inv=scale.float().reciprocal().reshape(1), fp8_dtype=self.dtype,
                    quantizer=self)
        out = (Float8TensorStorage(**meta) if self.internal
               else Float8Tensor(shape=tensor.shape, dtype=tensor.dtype, device=tensor.device, **meta))
        out.update_usage(rowwise_usage=self.rowwise_usage, columnwise_usage=self.columnwise_usage)
        return out

    def update_quantized(self, src: torch.Tensor, dst: Float8TensorStorage) -> Float8TensorStorage:
        """Re-cast ``src`` into ``dst``'s buffers in place (TE's ``tex.quantize(tensor, quantizer,
        out)``, base.py 1436-1439): no autograd version bump, as a kernel writing them."""
        internal, self.internal = self.internal, True
        fresh = self.quantize_impl(src)
        self.internal = internal
        dst._data.data.copy_(fresh._data)  # (the weight workspace always keeps its row-wise data)
        dst._scale_inv.data.copy_(fresh._scale_inv)
        if dst._transpose is not None and not dst._transpose_invalid:
            dst._transpose.data.copy_(fresh._data.reshape(-1, fresh._data.shape[-1]).t())
        return dst


class Float8Quantizer(_PerTensorQuantizer):
    def __init__(self, scale=None, amax=None, fp8_dtype=None, *, rowwise: bool = True, columnwise: bool = True):
        super().__init__(rowwise=rowwise, columnwise=columnwise)
        self.scale = torch.ones(1) if scale is None else scale
        self.amax = torch.zeros(1) if amax is None else amax
        self.dtype = fp8_dtype

    def copy(self) -> "Float8Quantizer":
        """TE lines 69-81: a new quantizer sharing scale and amax."""
        out = Float8Quantizer(self.scale, self.amax, self.dtype, rowwise=self.rowwise_usage,
                              columnwise=self.columnwise_usage)
        out.internal = self.internal
        return out

    def quantize_impl(self, tensor: torch.Tensor):
        out = self._storage(tensor, self.scale)
        if tensor.numel() > 0:  # csrc/quantizer.cpp 276-288: nothing cast, no amax
            self.amax.copy_(torch.maximum(self.amax, _amax(tensor)))
        return out

    def calibrate(self, tensor: torch.Tensor) -> None:
        amin, amax = tensor.aminmax()  # lines 153-155
        self.amax.copy_(torch.max(-amin, amax))


class Float8CurrentScalingQuantizer(_PerTensorQuantizer):
    def __init__(self, fp8_dtype=None, device=None, *, rowwise: bool = True, columnwise: bool = True,
                 use_existing_amax: bool = False, with_amax_reduction: bool = False,
                 amax_reduction_group=None, force_pow_2_scales: bool = False, amax_epsilon: float = 0.0,
                 scale: Optional[torch.Tensor] = None, amax: Optional[torch.Tensor] = None) -> None:
        super().__init__(rowwise=rowwise, columnwise=columnwise)
        self.scale = torch.empty(1, dtype=torch.float32) if scale is None else scale
        self.amax = torch.empty(1, dtype=torch.float32) if amax is None else amax
        self.dtype = fp8_dtype
        self.use_existing_amax = use_existing_amax
        self.with_amax_reduction = with_amax_reduction
        self.amax_reduction_group = amax_reduction_group
        self.force_pow_2_scales = force_pow_2_scales
        self.amax_epsilon = amax_epsilon

    def copy(self) -> "Float8CurrentScalingQuantizer":
        out = Float8CurrentScalingQuantizer(
            self.dtype, rowwise=self.rowwise_usage, columnwise=self.columnwise_usage,
            use_existing_amax=self.use_existing_amax, with_amax_reduction=self.with_amax_reduction,
            amax_reduction_group=self.amax_reduction_group, force_pow_2_scales=self.force_pow_2_scales,
            amax_epsilon=self.amax_epsilon, scale=self.scale, amax=self.amax)
        out.internal = self.internal
        return out

    def quantize_impl(self, tensor: torch.Tensor):
        if tensor.numel() > 0:
            self.amax.copy_(_amax(tensor))
            if self.with_amax_reduction and torch.distributed.is_initialized():
                torch.distributed.all_reduce(self.amax, op=torch.distributed.ReduceOp.MAX,
                                             group=self.amax_reduction_group)
            self.scale.copy_(compute_scale_from_amax(self.amax, torch.finfo(self.dtype).max,
                                                     self.force_pow_2_scales, self.amax_epsilon))
        return self._storage(tensor, self.scale)

class Float8Tensor(Float8TensorStorage, QuantizedTensor):
    """TE lines 446-990: FP8 data presented as a torch.Tensor of the nominal dtype and shape (what a
    quantizer that is not ``internal`` returns). The stand-in's has what its modules use: the
    storage's buffers and usages, ``dequantize`` to the nominal dtype (486-499), ``detach`` as a new
    wrapper over the same buffers (521-523, ``make_like`` 583-609); other ops dequantize
    (quantized_tensor.py). The storage's ``shape`` / ``device`` helpers give way to torch.Tensor's."""

    shape = torch._C.TensorBase.shape
    device = torch._C.TensorBase.device

    def dequantize(self, *, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        return Float8TensorStorage.dequantize(self, dtype=self.dtype if dtype is None else dtype)

    def detach(self) -> "Float8Tensor":
        out = Float8Tensor(shape=self.shape, dtype=self.dtype, requires_grad=False, **self.get_metadata())
        out._transpose_invalid = self._transpose_invalid
        return out

    def __repr__(self, *, tensor_contents=None):
        return f"Float8Tensor(fp8_dtype={self._fp8_dtype}, scale_inv={self._scale_inv.item()}, " \
               f"data={self.dequantize(dtype=self.dtype)})"
