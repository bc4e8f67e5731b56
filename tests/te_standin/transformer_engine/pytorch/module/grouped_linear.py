"""Stand-in for TE v2.11 ``pytorch/module/grouped_linear.py`` (commit c188b533),
constructor only as far as the weight-gradient API goes: parameters
``weight{i}``/``bias{i}``, a ``WeightGradStore`` (line 633) and the
``skip_backward_post_hook`` marking when delayed (lines 707-711). Its forward
and backward are plain autograd (weight gradients in the backward); its
delayed backward (lines 450-520, which hands autograd an unfilled weight
gradient and relies on ``backward_dw`` to overwrite ``.grad``) is not
reproduced: primus_megatron refuses delayed GroupedLinear layers."""
from __future__ import annotations

from typing import Optional

import torch

from ._common import WeightGradStore
from .base import TransformerEngineBaseModule


class GroupedLinear(TransformerEngineBaseModule):
    def __init__(self, num_gemms: int, in_features: int, out_features: int, bias: bool = True, *,
                 params_dtype: Optional[torch.dtype] = None, fuse_wgrad_accumulation: bool = False,
                 delay_wgrad_compute: bool = False, device="cpu") -> None:
        super().__init__()
        params_dtype = torch.get_default_dtype() if params_dtype is None else params_dtype
        self.num_gemms = num_gemms
        self.use_bias = bias
        self.fuse_wgrad_accumulation = fuse_wgrad_accumulation
        self.wgrad_store = WeightGradStore(delay_wgrad_compute)
        for i in range(num_gemms):
            w = torch.nn.Parameter(torch.empty(out_features, in_features, dtype=params_dtype, device=device))
            torch.nn.init.normal_(w.data, std=0.023)
            self.register_parameter(f"weight{i}", w)
            if bias:
                self.register_parameter(f"bias{i}", torch.nn.Parameter(torch.zeros(out_features, dtype=params_dtype,
                                                                                   device=device)))
        if self.wgrad_store.delay_wgrad_compute():
            for name, param in self.named_parameters():
                if name in [f"weight{i}" for i in range(num_gemms)] + [f"bias{i}" for i in range(num_gemms)]:
                    param.skip_backward_post_hook = True

    def forward(self, inp: torch.Tensor, m_splits: list[int]):
        if self.wgrad_store.delay_wgrad_compute():
            raise NotImplementedError("the stand-in does not reproduce GroupedLinear's delayed backward")
        outs = []
        for i, x in enumerate(torch.split(inp, m_splits)):
            y = x.matmul(getattr(self, f"weight{i}").t())
            outs.append(y + getattr(self, f"bias{i}") if self.use_bias else y)
        return torch.cat(outs)
