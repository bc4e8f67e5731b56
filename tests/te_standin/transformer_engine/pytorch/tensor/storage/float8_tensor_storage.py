"""Stand-in for TE v2.11 ``pytorch/tensor/storage/float8_tensor_storage.py`` (commit c188b533):
``Float8TensorStorage`` (lines 53-236), a plain object (not a torch.Tensor) holding row-wise data
and a column-wise transpose, each made or dropped by ``update_usage`` as on a device whose FP8
GEMMs take only the TN layout (Hopper: ``is_non_tn_fp8_gemm_supported()`` false), and saved for
backward through ``prepare_for_saving`` / ``restore_from_saved``.

Emulated, not quantized: the data keep the source's dtype and values (a CPU has no FP8 GEMM, and
exact values let a test compare a schedule with W ops against one without), so ``dequantize``
is exact; what is TE's is the object's type, its API and which of its buffers exist when."""
from __future__ import annotations

from typing import Optional

import torch

from ...quantized_tensor import QuantizedTensorStorage


class Float8TensorStorage(QuantizedTensorStorage):
    def __new__(cls, *args, data: Optional[torch.Tensor], fp8_scale_inv: torch.Tensor, fp8_dtype=None,
                data_transpose: Optional[torch.Tensor] = None, quantizer=None, **kwargs):
        instance = object.__new__(cls)
        instance._data = data
        instance._quantizer = quantizer
        instance._fp8_dtype = fp8_dtype
        instance._scale_inv = fp8_scale_inv
        instance._transpose = data_transpose
        instance._transpose_invalid = data_transpose is None
        return instance

    def prepare_for_saving(self):
        tensors = [self._data, self._transpose, self._scale_inv]
        self._data = self._transpose = self._scale_inv = None
        return tensors, self

    def restore_from_saved(self, tensors):
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

    def dequantize(self, *, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        data = self._data if self._data is not None else self._transpose.t()
        return data if dtype is None else data.to(dtype)

    def size(self, *args, **kwargs):
        if self._data is not None:
            return self._data.size(*args, **kwargs)
        size = self._transpose.size()
        return torch.Size([size[-1], size[0]]) if not args else torch.Size([size[-1], size[0]])[args[0]]

    @property
    def shape(self):
        return self.size()

    def view(self, shape):
        return Float8TensorStorage(data=self._data.view(shape), fp8_scale_inv=self._scale_inv,
                                   fp8_dtype=self._fp8_dtype, quantizer=self._quantizer)

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
        return f"Float8TensorStorage(emulated, data={self.dequantize()})"
