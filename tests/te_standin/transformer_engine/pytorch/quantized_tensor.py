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
    """The torch.Tensor face of quantized data (TE lines 333-600): a wrapper subclass with the nominal
    (high-precision) dtype and shape and no storage of its own (343-364); its data are the storage
    class's buffers. ``detach`` makes another wrapper over the same buffers (428-429); any other op
    runs on the dequantized values (530-535), as TE's does. TE's in-place, copy, view and empty_like
    handling (431-495) and its CPU op check (537-552) are not reproduced: the stand-in's modules
    make these only for GroupedLinear's inputs (grouped_linear.py) and cached weight workspaces (base.py),
    which no op but the GEMMs and the quantizer's in-place update reads."""

    def __new__(cls, shape, dtype: torch.dtype, *, requires_grad: bool = False, device=None):
        shape = tuple(shape)
        strides, step = [], 1
        for size in reversed(shape):  # contiguous strides (TE's _stride_from_shape)
            strides.insert(0, step)
            step *= max(size, 1)
        return torch.Tensor._make_wrapper_subclass(cls, shape, strides=tuple(strides), storage_offset=0, dtype=dtype,
                                                   layout=torch.strided, requires_grad=requires_grad,
                                                   device=torch.device("cpu") if device is None else device)

    def dequantize(self, *, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        raise NotImplementedError(f"{self.__class__.__name__} class does not implement dequantize function")

    def detach(self):
        raise NotImplementedError(f"{self.__class__.__name__} class does not implement detach function")

    def float(self) -> torch.Tensor:
        return self.dequantize(dtype=torch.float32)

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs=None):
        if func == torch.ops.aten.detach.default:
            return args[0].detach()

        def unwrap(arg):
            return arg.dequantize(dtype=arg.dtype) if isinstance(arg, QuantizedTensor) else arg

        from torch.utils._pytree import tree_map

        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))

    __torch_function__ = torch._C._disabled_torch_function_impl


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
