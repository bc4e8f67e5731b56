"""Stand-in for TE v2.11 ``pytorch/module/grouped_linear.py`` (commit c188b533),
constructor only as far as the weight-gradient API goes: parameters
``weight{i}``/``bias{i}``, a ``WeightGradStore`` (line 633) and the
``skip_backward_post_hook`` marking when delayed (lines 707-711). Its forward
and backward are plain autograd (weight gradients in the backward); its
delayed backward (lines 460-525: ``put`` at 468, then autograd is handed weight gradients
that only ``backward_dw`` fills) is not
reproduced: primus_megatron refuses delayed GroupedLinear layers."""
from __future__ import annotations

from typing import Callable, Optional, Union

import torch

from ._common import WeightGradStore
from .base import TransformerEngineBaseModule, cpu_device


class GroupedLinear(TransformerEngineBaseModule):
    def __init__(self, num_gemms: int, in_features: int, out_features: int, sequence_parallel: bool = False,
                 fuse_wgrad_accumulation: bool = False, tp_group=None, tp_size: int = 1,
                 get_rng_state_tracker: Optional[Callable] = None, rng_tracker_name: Optional[str] = None,
                 init_method: Optional[Callable] = None, bias: bool = True, return_bias: bool = False,
                 params_dtype: Optional[torch.dtype] = None, parallel_mode: Optional[str] = None,
                 device: Union[torch.device, str] = "cuda", ub_overlap_rs: bool = False,
                 ub_overlap_ag: bool = False, ub_name: Optional[str] = None, delay_wgrad_compute: bool = False,
                 save_original_input: bool = False, name: Optional[str] = None) -> None:
        """TE's signature (lines 588-611); tensor parallelism, userbuffers and return_bias are not
        reproduced (they raise)."""
        super().__init__()
        if tp_size != 1 or parallel_mode is not None or ub_overlap_rs or ub_overlap_ag or return_bias:
            raise NotImplementedError("the TransformerEngine stand-in's GroupedLinear has no tensor parallelism, "
                                      "userbuffers or return_bias")
        device = cpu_device(device)
        params_dtype = torch.get_default_dtype() if params_dtype is None else params_dtype
        self.num_gemms = num_gemms
        self.in_features, self.out_features = in_features, out_features
        self.use_bias = bias
        self.fuse_wgrad_accumulation = fuse_wgrad_accumulation
        self.wgrad_store = WeightGradStore(delay_wgrad_compute)  # line 633
        for i in range(num_gemms):
            w = torch.nn.Parameter(torch.empty(out_features, in_features, dtype=params_dtype, device=device))
            (init_method or (lambda t: torch.nn.init.normal_(t, std=0.023)))(w.data)
            self.register_parameter(f"weight{i}", w)
            if bias:
                self.register_parameter(f"bias{i}", torch.nn.Parameter(torch.zeros(out_features, dtype=params_dtype,
                                                                                   device=device)))
        if self.wgrad_store.delay_wgrad_compute():  # lines 707-711
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
