"""Stand-in for TE v2.11 ``pytorch/quantized_tensor.py`` (commit c188b533): the base classes of
TE's quantized data (``QuantizedTensorStorage`` 29-121: a plain object, not a torch.Tensor;
``QuantizedTensor`` 333-600: a torch.Tensor subclass), ``Quantizer`` (169-330) and the
save/restore helpers autograd functions use (``prepare_for_saving`` 124-143,
``restore_from_saved`` 146-166)."""
from __future__ import annotations

from typing import Optional

import torch


class QuantizedTensorStorage:
    _quantizer = None

    def update_usage(self, rowwise_usage: Optional[bool] = None, columnwise_usage: Optional[bool] = None):
        raise NotImplementedError(f"{self.__class__.__name__} class does not implement update_usage function")

    def prepare_for_saving(self):
        raise NotImplementedError(f"{self.__class__.__name__} class does not implement prepare_for_saving function")

    def restore_from_saved(self, tensors):
        raise NotImplementedError(f"{self.__class__.__name__} class does not implement restore_from_saved function")


class QuantizedTensor(torch.Tensor):
    """The torch.Tensor face of quantized data. The stand-in never makes one (its quantizers are
    internal: they return storages, as TE's do for a module's own inputs and gradients)."""

    def dequantize(self, *, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        raise NotImplementedError("the TransformerEngine stand-in has no QuantizedTensor instances")


class Quantizer:
    def __init__(self, *, rowwise: bool, columnwise: bool) -> None:
        self.rowwise_usage = rowwise
        self.columnwise_usage = columnwise
        self.internal = False

    def set_usage(self, *, rowwise: Optional[bool] = None, columnwise: Optional[bool] = None) -> None:
        if rowwise is not None:
            self.rowwise_usage = rowwise
        if columnwise is not None:
            self.columnwise_usage = columnwise

    def __call__(self, tensor: torch.Tensor):
        return self.quantize_impl(tensor)

    def quantize_impl(self, tensor: torch.Tensor):
        raise NotImplementedError

    def supports_only_rowwise_all_gather(self) -> bool:
        return False

    def calibrate(self, tensor: torch.Tensor) -> None:
        pass


def prepare_for_saving(*tensors):
    tensor_list, objects = [], []
    for tensor in tensors:
        if tensor is None or isinstance(tensor, torch.Tensor):
            tensor_list.append(tensor)
            objects.append(None)
        else:
            saved, obj = tensor.prepare_for_saving()
            tensor_list.extend(saved)
            objects.append(obj)
    return tensor_list, objects


def restore_from_saved(tensors, saved_tensors, return_saved_tensors: bool = False):
    out = []
    for tensor in tensors:
        if tensor is None or isinstance(tensor, torch.Tensor):
            out.append(saved_tensors[0])
            saved_tensors = saved_tensors[1:]
        else:
            saved_tensors = tensor.restore_from_saved(saved_tensors)
            out.append(tensor)
    return (out, saved_tensors) if return_saved_tensors else out
