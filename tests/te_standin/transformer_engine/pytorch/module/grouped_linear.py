"""Stand-in for TE v2.11 ``pytorch/module/grouped_linear.py`` (commit c188b533) in plain torch on CPU:
``GroupedLinear`` (constructor 588-711 with TE's signature, ``reset_parameters`` 726-749, forward
752-847, ``backward_dw`` 849-872) and ``_GroupedLinear`` (forward 66-303, backward 305-525) without
FP8: per-group GEMMs through ``general_grouped_gemm``, ``fuse_wgrad_accumulation`` into each
weight's ``main_grad`` (the first microbatch overwriting it, 373-378 and 461-465), megatron's
``grad_added_to_main_grad`` dummy (480-507), biases (in the GEMM, or returned with ``return_bias``),
``save_original_input`` and the delayed weight gradient: ``put([inputmats, grad_output,
wgrad_list], grouped_gemm_wgrad)`` (466-468), after which autograd is still handed ``wgrad_list``
(504-507): unfused, tensors only the delayed GEMM fills (TE allocates them with ``torch.empty``,
422-425; here they hold NaN until then, so a gradient read before its GEMM ran shows), and no bias
gradient (511-516). Not reproduced (raise): tensor parallelism over more than one rank, FP8, debug
quantizers, CPU offload."""
from __future__ import annotations

import functools
from typing import Callable, Optional, Union

import torch

from ..cpp_extensions import general_grouped_gemm
from ..distributed import get_distributed_world_size, set_tensor_model_parallel_attributes
from ._common import WeightGradStore
from .base import TransformerEngineBaseModule, cpu_device, get_dummy_wgrad

GemmParallelModes = ("row", "column", None)  # TE constants.py


class _GroupedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp: torch.Tensor, non_tensor_args: tuple, *weights_and_biases) -> torch.Tensor:
        (m_splits, use_bias, is_first_microbatch, fp8, wgrad_store, fuse_wgrad_accumulation, activation_dtype,
         is_grad_enabled, save_original_input) = non_tensor_args
        if fp8:
            raise NotImplementedError("the TransformerEngine stand-in's GroupedLinear has no FP8")
        num_gemms = len(m_splits)
        weights, biases = weights_and_biases[:num_gemms], weights_and_biases[num_gemms:]
        in_features = weights[0].size(-1)
        if inp.size(-1) != in_features:  # lines 133-138
            raise ValueError(f"Input tensor (shape={tuple(inp.size())}) is not compatible with "
                             f"weight tensor (shape={tuple(weights[0].size())})")
        inp_view = inp.reshape(-1, in_features)
        inputmats = torch.split(inp_view.to(activation_dtype), m_splits)  # line 147
        weights_c = [w.to(activation_dtype) for w in weights]  # line 171
        biases = [b.to(activation_dtype) for b in biases] if use_bias else biases  # lines 174-177
        out = torch.empty([sum(m_splits), weights_c[0].size(0)], dtype=activation_dtype, device=inp.device)
        general_grouped_gemm(weights_c, inputmats, [out], [None] * num_gemms, activation_dtype, single_output=True,
                             m_splits=m_splits, bias=biases, use_bias=use_bias)  # lines 193-204
        if is_grad_enabled:
            ctx.weights_shape_1 = weights[0].shape[1]
            if weights[0].requires_grad:
                if save_original_input:  # lines 227-229
                    inputmats = [None] * num_gemms
                    inputmats[0] = inp
            else:
                inputmats = [None] * num_gemms
            ctx.save_for_backward(*inputmats, *weights_c, *weights, *biases)
            ctx.weights_requires_grad = weights[0].requires_grad
            if fuse_wgrad_accumulation and ctx.weights_requires_grad:  # lines 264-276
                ctx.main_grad_funcs = [lambda j=i: weights[j].main_grad for i in range(num_gemms)]
            else:
                ctx.main_grad_funcs = [lambda: None for _ in range(num_gemms)]
            ctx.device = inp.device
            ctx.m_splits = m_splits
            ctx.num_gemms = num_gemms
            ctx.activation_dtype = activation_dtype
            ctx.fp8 = fp8
            ctx.fuse_wgrad_accumulation = fuse_wgrad_accumulation
            ctx.is_first_microbatch = is_first_microbatch
            ctx.use_bias = use_bias
            ctx.inp_shape = inp.shape
            ctx.requires_dgrad = inp.requires_grad
            ctx.wgrad_store = wgrad_store
            ctx.save_original_input = save_original_input
        return out.view(-1, *inp.shape[1:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        saved = ctx.saved_tensors
        n = ctx.num_gemms
        inputmats = list(saved[:n])
        weights = saved[n:2 * n]
        origin_weights = list(saved[2 * n:3 * n])
        biases = saved[3 * n:4 * n]
        main_grads = [main_grad_func() for main_grad_func in ctx.main_grad_funcs]
        if ctx.fuse_wgrad_accumulation:  # lines 320-322
            for i in range(n):
                origin_weights[i].main_grad = main_grads[i]
        grad_output_view = grad_output.contiguous().view(-1, grad_output.shape[-1])
        grad_biases = [None] * n
        # without FP8 the grad output is only split; the bias gradient is fused with the wgrad GEMM (365-371)
        grad_output = torch.split(grad_output_view.to(ctx.activation_dtype), ctx.m_splits)
        if ctx.is_first_microbatch is not None:  # lines 373-378
            accumulate_wgrad_into_param_main_grad = ctx.fuse_wgrad_accumulation and not ctx.is_first_microbatch
        else:
            accumulate_wgrad_into_param_main_grad = ctx.fuse_wgrad_accumulation
        dgrad = None
        if ctx.requires_dgrad:  # lines 380-409
            dgrad = torch.empty((sum(ctx.m_splits), ctx.weights_shape_1), dtype=ctx.activation_dtype,
                                device=ctx.device)
            general_grouped_gemm(weights, grad_output, [dgrad], [None] * n, ctx.activation_dtype, single_output=True,
                                 layout="NN", m_splits=ctx.m_splits, grad=True)
        if ctx.weights_requires_grad:
            if ctx.fuse_wgrad_accumulation:  # lines 419-425
                wgrad_list = main_grads
            else:  # uninitialised in TE (torch.empty): NaN here until the GEMM fills them
                wgrad_list = [torch.full(w.size(), float("nan"), dtype=ctx.activation_dtype, device=ctx.device)
                              for w in weights]
            if ctx.save_original_input:  # lines 427-449
                inp = inputmats[0]
                inputmats = torch.split(inp.reshape(-1, inp.shape[-1]).to(ctx.activation_dtype), ctx.m_splits)
            grouped_gemm_wgrad = functools.partial(  # lines 450-465
                general_grouped_gemm, quantization_params=[None] * n, out_dtype=ctx.activation_dtype,
                layout="NT", grad=True, m_splits=ctx.m_splits,
                use_bias=ctx.use_bias if grad_biases[0] is None else None, bias=biases,
                accumulate=(accumulate_wgrad_into_param_main_grad
                            if not getattr(weights[0], "overwrite_main_grad", False) else False))
            if ctx.wgrad_store is not None and ctx.wgrad_store.delay_wgrad_compute():  # lines 466-478
                ctx.wgrad_store.put([inputmats, grad_output, wgrad_list], grouped_gemm_wgrad)
            else:
                _, grad_biases_, _ = grouped_gemm_wgrad(inputmats, grad_output, wgrad_list)
                for i in range(n):
                    if grad_biases[i] is None:
                        grad_biases[i] = grad_biases_[i]
                del grad_biases_

            def handle_custom_ddp_from_mcore(weight, wgrad):  # lines 480-502
                if ctx.weights_requires_grad:
                    if ctx.fuse_wgrad_accumulation and hasattr(weight, "grad_added_to_main_grad"):
                        weight.grad_added_to_main_grad = True
                        wgrad = get_dummy_wgrad(list(weight.main_grad.shape), weight.dtype,
                                                zero=getattr(weight, "zero_out_wgrad", False))
                    elif ctx.fuse_wgrad_accumulation:
                        wgrad = None
                else:
                    wgrad = None
                return wgrad

            wgrad_list = [handle_custom_ddp_from_mcore(w, g) for w, g in zip(origin_weights, wgrad_list)]  # 504-507
        else:
            wgrad_list = [None] * n
        if not ctx.use_bias or (ctx.wgrad_store is not None and ctx.wgrad_store.delay_wgrad_compute()
                                and not ctx.fp8):  # lines 511-516
            grad_biases = [None] * n
        return (dgrad.view(ctx.inp_shape) if ctx.requires_dgrad else None, None, *wgrad_list, *grad_biases)


class GroupedLinear(TransformerEngineBaseModule):
    def __init__(self, num_gemms: int, in_features: int, out_features: int, sequence_parallel: bool = False,
                 fuse_wgrad_accumulation: bool = False, tp_group=None, tp_size: int = 1,
                 get_rng_state_tracker: Optional[Callable] = None, rng_tracker_name: Optional[str] = None,
                 init_method: Optional[Callable] = None, bias: bool = True, return_bias: bool = False,
                 params_dtype: Optional[torch.dtype] = None, parallel_mode: Optional[str] = None,
                 device: Union[torch.device, str] = "cuda", ub_overlap_rs: bool = False,
                 ub_overlap_ag: bool = False, ub_name: Optional[str] = None, delay_wgrad_compute: bool = False,
                 save_original_input: bool = False, name: Optional[str] = None) -> None:
        """TE's signature (lines 588-611)."""
        super().__init__()
        device = cpu_device(device)
        params_dtype = torch.get_default_dtype() if params_dtype is None else params_dtype
        self.num_gemms = num_gemms
        self.in_features, self.out_features = in_features, out_features
        self.fuse_wgrad_accumulation = fuse_wgrad_accumulation
        self.use_bias = bias
        self.return_bias = return_bias
        self.apply_bias = bias and not return_bias  # lines 619-621
        self.ub_overlap_rs, self.ub_overlap_ag, self.ub_name = ub_overlap_rs, ub_overlap_ag, ub_name
        self.save_original_input = save_original_input
        assert not ub_overlap_rs and not ub_overlap_ag, "GroupedLinear doesn't support Userbuffer overlap."  # 626-628
        self.get_rng_state_tracker = get_rng_state_tracker
        self.rng_tracker_name = rng_tracker_name
        self.name = name
        self.wgrad_store = WeightGradStore(delay_wgrad_compute)  # line 633
        if tp_group is None:  # lines 636-645
            self.tp_size = tp_size
            if tp_size == 1:
                self.set_tensor_parallel_group(tp_group)
        else:
            self.tp_size = get_distributed_world_size(tp_group)
            self.set_tensor_parallel_group(tp_group)
        if self.tp_size > 1:
            raise NotImplementedError("the TransformerEngine stand-in's GroupedLinear has no tensor parallelism")
        self.parallel_mode = parallel_mode
        assert self.parallel_mode in GemmParallelModes, f"parallel_mode {parallel_mode} not supported"
        self.sequence_parallel = (self.tp_size > 1) and sequence_parallel
        for i in range(self.num_gemms):  # lines 668-700
            self.register_parameter(f"weight{i}", torch.nn.Parameter(
                torch.empty(self.out_features, self.in_features, device=device, dtype=params_dtype)),
                init_fn=init_method, get_rng_state_tracker=get_rng_state_tracker)
            if self.use_bias:
                self.register_parameter(f"bias{i}", torch.nn.Parameter(
                    torch.empty(self.out_features, device=device, dtype=params_dtype)),
                    init_fn=lambda t: torch.nn.init.zeros_(t))  # init_method_constant(0.0)
            else:
                setattr(self, f"bias{i}", torch.Tensor().to(dtype=params_dtype, device=device))
        self.reset_parameters(defer_init=device.type == "meta")
        if self.wgrad_store.delay_wgrad_compute():  # lines 707-711
            for pname, param in self.named_parameters():
                for i in range(self.num_gemms):
                    if pname in (f"weight{i}", f"bias{i}"):
                        param.skip_backward_post_hook = True

    def reset_parameters(self, defer_init=False):
        """lines 726-749: the tensor-parallel attributes megatron-core reads."""
        super().reset_parameters(defer_init=defer_init)
        if defer_init:
            return
        for i in range(self.num_gemms):
            set_tensor_model_parallel_attributes(getattr(self, f"weight{i}"), True,
                                                 1 if self.parallel_mode == "row" else 0, 1)
        if self.use_bias:
            for i in range(self.num_gemms):
                if self.parallel_mode == "row":
                    setattr(getattr(self, f"bias{i}"), "sequence_parallel", self.sequence_parallel)
                elif self.parallel_mode == "column":
                    set_tensor_model_parallel_attributes(getattr(self, f"bias{i}"), True, 0, 1)

    def forward(self, inp: torch.Tensor, m_splits: list, is_first_microbatch: Optional[bool] = None):
        debug = self.is_debug_iter()
        assert not debug
        assert len(m_splits) == self.num_gemms, "Number of splits should match number of GEMMs."  # line 786
        is_grad_enabled = torch.is_grad_enabled()
        with self.prepare_forward(inp, num_gemms=self.num_gemms) as inp:
            weight_tensors = [getattr(self, f"weight{i}") for i in range(self.num_gemms)]
            bias_tensors = [getattr(self, f"bias{i}") for i in range(self.num_gemms)]
            non_tensor_args = (m_splits, self.apply_bias, is_first_microbatch, self.fp8, self.wgrad_store,
                               self.fuse_wgrad_accumulation, self.activation_dtype, is_grad_enabled,
                               self.save_original_input)
            if is_grad_enabled:
                out = _GroupedLinear.apply(inp, non_tensor_args, *weight_tensors, *bias_tensors)
            else:
                out = _GroupedLinear.forward(None, inp, non_tensor_args, *weight_tensors, *bias_tensors)
        if self.return_bias:  # lines 845-847
            return out, [b.to(self.activation_dtype) for b in bias_tensors]
        return out

    def backward_dw(self) -> None:
        """lines 849-872: the oldest delayed GEMM; each weight's .grad replaced when not fused, each
        bias's .grad set only when empty, then every registered hook."""
        if not self.need_backward_dw():
            return
        (_, grad_biases_, _), tensor_list = self.wgrad_store.pop()
        wgrad_list = tensor_list[2]
        weight_params = [getattr(self, f"weight{i}") for i in range(self.num_gemms)]
        bias_params = [getattr(self, f"bias{i}") for i in range(self.num_gemms)]
        if not self.fuse_wgrad_accumulation:
            for i in range(self.num_gemms):
                weight_params[i].grad = wgrad_list[i].to(weight_params[i].dtype)
        if self.use_bias:
            for i in range(self.num_gemms):
                if bias_params[i].grad is None:
                    bias_params[i].grad = grad_biases_[i].to(bias_params[i].dtype)
        del grad_biases_, wgrad_list, tensor_list
        for hook in self.wgrad_accumulation_and_reduce_hooks:
            hook()
