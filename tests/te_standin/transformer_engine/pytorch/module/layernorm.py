"""Stand-in for TE v2.11 ``pytorch/module/layernorm.py`` and ``rmsnorm.py`` (commit c188b533):
``LayerNorm`` / ``RMSNorm`` (constructors with TE's signature, layernorm.py 59-100, rmsnorm.py
63-100: ``hidden_size`` the deprecated spelling of ``normalized_shape``, ``params_dtype`` of
``dtype``, the legacy ``sequence_parallel`` attribute set on the parameters), built like TE's
operation ``ops.LayerNorm`` / ``ops.RMSNorm`` (``ops/basic/layer_norm.py`` 70-175: parameters
``weight`` (ones, or zeros with ``zero_centered_gamma``) and ``bias`` (zeros), plain autograd)."""
from __future__ import annotations

import warnings
from typing import Optional

import torch

from .base import cpu_device


class _Norm(torch.nn.Module):
    _has_bias = True

    def __init__(self, normalized_shape=None, eps: float = 1e-5, sequence_parallel: Optional[bool] = None,
                 params_dtype: Optional[torch.dtype] = None, zero_centered_gamma: bool = False,
                 hidden_size: Optional[int] = None, device=None, dtype: Optional[torch.dtype] = None,
                 sm_margin=0) -> None:
        super().__init__()
        if normalized_shape is None:
            if hidden_size is None:
                raise RuntimeError("Neither `normalized_shape` nor `hidden_size` (deprecated) args are provided")
            warnings.warn("`hidden_size` arg has been renamed to `normalized_shape` for compatibility with "
                          "`torch.nn.LayerNorm`.", DeprecationWarning, stacklevel=2)
            normalized_shape = hidden_size
        elif hidden_size is not None:
            raise RuntimeError("Both `normalized_shape` and `hidden_size` (deprecated) args are provided")
        if params_dtype is not None:
            if dtype is not None:
                raise RuntimeError("Both `dtype` and `params_dtype` (deprecated) kwargs are provided")
            dtype = params_dtype
        dtype = torch.get_default_dtype() if dtype is None else dtype
        device = cpu_device(device)
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps, self.zero_centered_gamma = shape, eps, zero_centered_gamma
        self.sequence_parallel = sequence_parallel
        self.weight = torch.nn.Parameter(torch.empty(shape, device=device, dtype=dtype))
        if self._has_bias:
            self.bias = torch.nn.Parameter(torch.empty(shape, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self, defer_init: Optional[bool] = None) -> None:
        with torch.no_grad():
            if self.zero_centered_gamma:
                self.weight.zero_()
            else:
                self.weight.fill_(1.0)
            if self._has_bias:
                self.bias.zero_()
        if self.sequence_parallel is not None:
            self.weight.sequence_parallel = self.sequence_parallel
            if self._has_bias:
                self.bias.sequence_parallel = self.sequence_parallel

    def _gamma(self) -> torch.Tensor:
        return self.weight + 1 if self.zero_centered_gamma else self.weight


class LayerNorm(_Norm):
    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(inp, self.normalized_shape, self._gamma(), self.bias, self.eps)


class RMSNorm(_Norm):
    _has_bias = False

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        dims = tuple(range(-len(self.normalized_shape), 0))
        return inp * torch.rsqrt(inp.pow(2).mean(dims, keepdim=True) + self.eps) * self._gamma()
