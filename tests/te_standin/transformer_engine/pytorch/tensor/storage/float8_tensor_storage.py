"""Stand-in for TE v2.11 ``pytorch/tensor/storage/float8_tensor_storage.py`` (commit c188b533):
``Float8TensorStorage`` (lines 53-236), a plain object (not a torch.Tensor) holding FP8 data:
row-wise ``_data`` and the column-wise ``_transpose`` (the same float8 values transposed, TE's
``tex.fp8_transpose``, line 186), each made or dropped by ``update_usage`` as on a device whose
FP8 GEMMs take only the TN layout (Hopper, gfx942: ``is_non_tn_fp8_gemm_supported()`` false),
with ``_scale_inv`` (1 / the scale it was cast with, fixed at the cast) and saved for backward
through ``prepare_for_saving`` / ``restore_from_saved``. The data are torch float8 tensors
(float8_e4m3fn / float8_e5m2, the FNUZ ones on gfx942); ``dequantize`` is TE's (data times
scale_inv in fp32, then the dtype asked for: ``cast/fp8/dequantize_fp8.cuh``)."""
from __future__ import annotations

from typing import Optional

import torch

from ...quantized_tensor import QuantizedTensorStorage


class Float8TensorStorage(QuantizedTensorStorage):
    def __new__(cls, *args, data: Optional[torch.Tensor], fp8_scale_inv: torch.Tensor, fp8_dtype=None,
                data_transpose: Optional[torch.Tensor] = None, quantizer=None, **kwargs):
        # lines 82-85: the storage itself is a plain object; Float8Tensor goes on to QuantizedTensor.__new__
        instance = object.__new__(cls) if cls is Float8TensorStorage else super().__new__(cls, *args, **kwargs)
        instance._data = data
        instance._quantizer = quantizer.copy() if quantizer is not None else None  # line 87
        instance._fp8_dtype = fp8_dtype
        instance._scale_inv = fp8_scale_inv
        instance._transpose = data_transpose
        instance._transpose_invalid = data_transpose is None
        return instance

    def get_metadata(self) -> dict:
        """Lines 107-115: the constructor's keywords; its tensors are what the storage keeps alive."""
        return {"data": self._data, "fp8_scale_inv": self._scale_inv, "fp8_dtype": self._fp8_dtype,
                "data_transpose": self._transpose, "quantizer": self._quantizer}

    def prepare_for_saving(self):
        """Lines 117-123: the buffers, for save_for_backward; the object keeps none of them."""
        tensors = [self._data, self._transpose, self._scale_inv]
        self._data = self._transpose = self._scale_inv = None
        return tensors, self

    def restore_from_saved(self, tensors):
        """Lines 125-132."""
        self._data, self._transpose, self._scale_inv = tensors[0], tensors[1], tensors[2]
        return tensors[3:]

    def get_data_tensors(self, rowwise_data: bool = True, columnwise_data: bool = True):
        if rowwise_data and columnwise_data:
            return self._data, self._transpose
        if rowwise_data:
            return self._data
        if columnwise_data:
            return self._transpose
        raise ValueError("No data to get, both rowwise_data and columnwise_data are False")

    def dequantize(self, *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        data = self._data if self._data is not None else self._transpose.t()
        return (data.float() * self._scale_inv).to(dtype)

    def size(self, *args, **kwargs):
        if self._data is not None:
            return self._data.size(*args, **kwargs)
        size = self._transpose.size()
        full = torch.Size([size[-1], size[0]])
        return full if not args else full[args[0]]

    @property
    def shape(self):
        return self.size()

    @property
    def device(self) -> torch.device:
        return (self._data if self._data is not None else self._transpose).device

    def view(self, shape):
        transpose = None if self._transpose_invalid else self._transpose
        if transpose is not None and (transpose.shape[0] != shape[-1] or tuple(transpose.shape[1:]) != tuple(shape[:-1])):
            transpose = None  # lines 155-170
        return Float8TensorStorage(data=self._data.view(shape), fp8_scale_inv=self._scale_inv,
                                   fp8_dtype=self._fp8_dtype, data_transpose=transpose, quantizer=self._quantizer)

    def update_usage(self, rowwise_usage: Optional[bool] = None, columnwise_usage: Optional[bool] = None):
        """TE lines 189-227 on a TN-only device."""
        has_data = self._data is not None
        has_transpose = self._transpose is not None and not self._transpose_invalid
        needs_data = has_data if rowwise_usage is None else rowwise_usage
        needs_transpose = has_transpose if columnwise_usage is None else columnwise_usage
        if needs_data and not has_data:
            raise RuntimeError("Cannot generate FP8 data, even from FP8 data transpose")
        if needs_transpose and not has_transpose:
            if not has_data:
                raise RuntimeError("FP8 data is required to generate FP8 data transpose")
            self._transpose = self._data.reshape(-1, self._data.shape[-1]).t().contiguous()
            self._transpose_invalid = False
        if not needs_data:
            self._data = None
        if not needs_transpose:
            self._transpose = None
            self._transpose_invalid = True

    def get_usages(self):
        return {"rowwise": self._data is not None,
                "columnwise": self._transpose is not None and not self._transpose_invalid}

    def __repr__(self):
        return f"Float8TensorStorage(fp8_dtype={self._fp8_dtype}, scale_inv={self._scale_inv.item()}, " \
               f"data={self.dequantize()})"
