"""Stand-in for TE v2.11 ``pytorch/module/base.py`` (commit c188b533): ``get_dummy_wgrad``
(lines 79-92), ``TransformerEngineBaseModule`` (601-1600: construction state 604-631, extra
state 806-923, activation dtype 925-944, TP group 946-957, ``init_fp8_metadata`` 971-1026,
``prepare_forward`` 1028-1079, ``grad_output_preprocess`` 1099-1195, parameter registration
and initialisation 1197-1317, the weight-gradient API 1463-1502, ``is_debug_iter`` 1503-1537), in plain torch on CPU.

FP8 (the per-tensor recipes, quantization.py): the module's recipe states and quantizers
(``set_meta_tensor`` 706-741, ``init_fp8_meta_tensors`` 767-772: three forward quantizers per
GEMM, input / weight / output, and two backward, grad_output / grad_input; current scaling's
per-layer customisation, ``linear.py`` 1595-1662), delayed scaling's registration in the global
amax buffers in ``prepare_forward`` (1058-1067) and the weight workspace cached across
microbatches (``get_weight_workspace`` 1322-1440).

Not reproduced: resizing an amax history (``adjust_amax_history_length``), FP8 extra state in
checkpoints, userbuffers, FSDP, CPU offload, TE's debug quantizers (debug mode itself is:
``debug/pytorch/debug_state.py``; with it on, a delayed layer's forward raises TE's sentence)."""
from __future__ import annotations

import pickle
from contextlib import contextmanager
from typing import Callable, NamedTuple, Optional

import torch

from ..distributed import gather_along_first_dim
from ..quantization import FP8GlobalStateManager, RecipeState
from ..quantized_tensor import QuantizedTensorStorage

_dummy_wgrads: dict = {}


def get_dummy_wgrad(shape: list, dtype: torch.dtype, zero: bool = False) -> torch.Tensor:
    """TE lines 79-92: one cached uninitialised tensor per (shape, dtype), zeroed on request."""
    assert len(shape) == 2
    key = (shape[0], shape[1], dtype)
    if key not in _dummy_wgrads:
        _dummy_wgrads[key] = torch.empty(shape, dtype=dtype, requires_grad=False)
    if zero:
        _dummy_wgrads[key].fill_(0)
    return _dummy_wgrads[key].detach()


class _ParameterInitMeta:
    def __init__(self, init_fn: Optional[Callable] = None, get_rng_state_tracker: Optional[Callable] = None,
                 fp8_meta_index: Optional[int] = None) -> None:
        self.init_fn = init_fn if init_fn is not None else (lambda w: torch.nn.init.normal_(w, mean=0.0, std=0.023))
        self.get_rng_state_tracker = get_rng_state_tracker
        self.fp8_meta_index = fp8_meta_index


def cpu_device(device):
    """Where a stand-in module puts its parameters: TE's default (and megatron-core's
    ``torch.cuda.current_device()``) is a CUDA device; on CPU, the CPU ("meta" is kept)."""
    if device is None or isinstance(device, int) or torch.device(device).type == "cuda":
        return torch.device("cpu")
    return torch.device(device)


class GemmQuantizers(NamedTuple):
    """The quantizers one GEMM's autograd function uses (``linear.py`` ``_get_quantizers``
    1482-1507, ``_get_weight_quantizers`` 1664-1670: index 0 input, 1 weight of the forward
    state, 0 grad_output of the backward state; all internal)."""
    input: object
    weight: object
    grad_output: object


class TransformerEngineBaseModule(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.name = None
        self.fp8_initialized = False
        self.fp8 = False
        self.fp8_calibration = False
        self.fp8_meta = {"fp8_checkpoint": False, "fp8_group": None}
        self.tp_group = None
        self.tp_size = 1
        self.sequence_parallel = False
        self.param_init_meta = {}
        self.primary_weights_in_fp8 = FP8GlobalStateManager.with_fp8_parameters()
        if self.primary_weights_in_fp8:
            raise NotImplementedError("the TransformerEngine stand-in has no quantized (FP8) parameters")
        self.activation_dtype: Optional[torch.dtype] = None
        self.wgrad_accumulation_and_reduce_hooks = []
        self.wgrad_store = None
        self.quantizers = {"scaling_fwd": [], "scaling_bwd": []}
        self.fp8_meta_tensors_initialized = False
        self._fp8_workspaces: dict = {}
        from ...debug.pytorch.debug_state import TEDebugState

        if not TEDebugState.debug_enabled:  # TE lines 630-631
            TEDebugState.initialize()

    # --- construction helpers (TE 946-957, 1081-1097, 1197-1317) ---
    def set_tensor_parallel_group(self, tp_group) -> None:
        self.tp_group = tp_group
        self.tp_group_initialized = True

    def set_nccl_overlap_warning_if_tp(self) -> None:
        pass  # a CUDA_DEVICE_MAX_CONNECTIONS warning in TE; nothing to overlap on CPU

    def register_parameter(self, name, param, **kwargs):
        super().register_parameter(name, param)
        if hasattr(self, "param_init_meta") and name not in self.param_init_meta:
            self.param_init_meta[name] = _ParameterInitMeta(**kwargs)

    def reset_parameters(self, defer_init: Optional[bool] = False) -> None:
        if defer_init:
            return
        for name, param in self.named_parameters(recurse=False):
            meta = self.param_init_meta[name]
            if meta.get_rng_state_tracker is None:
                meta.init_fn(param)
            else:
                tracker_name = getattr(self, "rng_tracker_name", None)
                with (meta.get_rng_state_tracker().fork(tracker_name) if tracker_name
                      else meta.get_rng_state_tracker().fork()):
                    meta.init_fn(param)
            setattr(self, name, torch.nn.Parameter(param))

    # --- extra state (TE 806-923): an empty uint8 tensor unless FP8 state is kept ---
    def get_extra_state(self) -> torch.Tensor:
        if not (self.fp8_meta["fp8_checkpoint"] or self.fp8 or self.fp8_calibration):
            return torch.empty(0, dtype=torch.uint8)
        state = {"recipe": self.fp8_meta.get("recipe"), "extra_fp8_variables": {
            k: v for k, v in self.fp8_meta.items() if isinstance(v, (bool, int, float, str, tuple, list))}}
        return torch.frombuffer(bytearray(pickle.dumps(state)), dtype=torch.uint8)

    def set_extra_state(self, state) -> None:
        if state is None or (isinstance(state, torch.Tensor) and state.numel() == 0):
            return
        if not isinstance(state, torch.Tensor):
            raise RuntimeError("Unsupported checkpoint format.")
        state = pickle.loads(state.detach().cpu().numpy().tobytes())
        if state is not None:
            self.fp8_meta.update(state["extra_fp8_variables"])
            self.fp8_meta["recipe"] = state["recipe"]

    # --- forward preparation (TE 925-944, 971-1079) ---
    def set_activation_dtype(self, inp: torch.Tensor) -> None:
        if torch.is_autocast_enabled("cpu"):
            self.activation_dtype = torch.get_autocast_dtype("cpu")
            return
        if self.activation_dtype == inp.dtype:
            return
        if not getattr(self, "allow_different_data_and_param_types", False):
            for name, param in self.named_parameters():
                if param is not None:
                    assert inp.dtype == param.dtype, (
                        "Data types for parameters must match when outside of autocasted region. "
                        f" Found input dtype: {inp.dtype} and {name!r} dtype: {param.dtype}")
        self.activation_dtype = inp.dtype

    def set_meta_tensor(self, fwd: bool, recipe) -> None:
        """TE 706-741: a recipe state (and its quantizers) per direction, kept while the recipe
        keeps its kind; then current scaling's per-layer settings (linear.py 1595-1662)."""
        key = "scaling_fwd" if fwd else "scaling_bwd"
        if self.fp8_meta_tensors_initialized:
            state = self.fp8_meta[key]
            if recipe.delayed() and state.recipe.delayed():
                if state.amax_history.shape[0] != recipe.amax_history_len:  # TE 653-704 resizes it
                    raise NotImplementedError("the TransformerEngine stand-in does not resize an amax history")
                return
            if recipe.float8_current_scaling() and state.recipe.float8_current_scaling():
                return
        num = self.fp8_meta["num_gemms"] * (3 if fwd else 2)
        self.fp8_meta[key] = RecipeState.create(recipe, mode="forward" if fwd else "backward", num_quantizers=num)
        self.quantizers[key] = self.fp8_meta[key].make_quantizers()
        if recipe.float8_current_scaling():
            self._customize_quantizers_float8_current_scaling(fwd, recipe)

    def _customize_quantizers_float8_current_scaling(self, fwd: bool, recipe) -> None:
        """linear.py 1595-1662 (layernorm_linear.py 1718-1785, the same): the recipe's power-of-2
        and epsilon settings; the input amax MAX-reduced across the tensor-parallel group before a
        column-parallel sequence-parallel all-gather, grad_output's before a row-parallel one."""
        if fwd:
            q_in, q_w = self.quantizers["scaling_fwd"][0], self.quantizers["scaling_fwd"][1]
            q_in.force_pow_2_scales, q_in.amax_epsilon = (recipe.fp8_quant_fwd_inp.power_2_scale,
                                                          recipe.fp8_quant_fwd_inp.amax_epsilon)
            q_w.force_pow_2_scales, q_w.amax_epsilon = (recipe.fp8_quant_fwd_weight.power_2_scale,
                                                        recipe.fp8_quant_fwd_weight.amax_epsilon)
            if self.sequence_parallel and self.parallel_mode == "column":
                q_in.with_amax_reduction, q_in.amax_reduction_group = True, self.tp_group
            return
        q_g = self.quantizers["scaling_bwd"][0]
        q_g.force_pow_2_scales, q_g.amax_epsilon = (recipe.fp8_quant_bwd_grad.power_2_scale,
                                                    recipe.fp8_quant_bwd_grad.amax_epsilon)
        if self.sequence_parallel and self.parallel_mode == "row":
            q_g.with_amax_reduction, q_g.amax_reduction_group = True, self.tp_group

    def init_fp8_metadata(self, num_gemms: int = 1) -> None:
        """TE 971-1026: the module follows the autocast state of its forward; its recipe states
        are (re)built when the recipe changed."""
        self.fp8 = FP8GlobalStateManager.is_fp8_enabled()
        self.fp8_calibration = FP8GlobalStateManager.is_fp8_calibration()
        self.fp8_meta["fp8_checkpoint"] = self.fp8 or self.fp8_calibration
        if not (self.fp8 or self.fp8_calibration):
            self.fp8_initialized = False
            return
        if self.fp8_initialized and FP8GlobalStateManager.get_fp8_recipe() == self.fp8_meta["recipe"]:
            return
        self.fp8_meta["recipe"] = FP8GlobalStateManager.get_fp8_recipe()
        self.fp8_meta["num_gemms"] = num_gemms
        self.fp8_meta["fp8_group"] = FP8GlobalStateManager.get_fp8_group()
        self.set_meta_tensor(True, self.fp8_meta["recipe"])
        self.set_meta_tensor(False, self.fp8_meta["recipe"])
        self.fp8_meta_tensors_initialized = True
        self.fp8_initialized = True

    def get_gemm_quantizers(self, is_grad_enabled: bool) -> Optional[GemmQuantizers]:
        """linear.py 1482-1507 and 1664-1670 (layernorm_linear.py the same)."""
        if not self.fp8:
            return None
        q_in, q_w = self.quantizers["scaling_fwd"][0], self.quantizers["scaling_fwd"][1]
        q_in.internal = q_w.internal = True
        q_g = None
        if is_grad_enabled:
            q_g = self.quantizers["scaling_bwd"][0]
            q_g.internal = True
        return GemmQuantizers(q_in, q_w, q_g)

    def get_weight_workspace(self, *, tensor: torch.Tensor, quantizer, cache_name: Optional[str],
                             update_workspace: bool, skip_update_flag: Optional[torch.Tensor] = None,
                             workspace_dtype: Optional[torch.dtype] = None):
        """TE 1322-1440: the quantized weight, cached under ``cache_name`` (is_first_microbatch
        given) and re-cast in place only when ``update_workspace`` (is_first_microbatch None or
        True); a cached one without the transpose now needed is dropped (1377-1395)."""
        if skip_update_flag is not None:  # a CUDA-graph flag (1431-1432); workspace_dtype: debug workspaces only
            raise NotImplementedError("the TransformerEngine stand-in has no skip_update_flag (CUDA graphs)")
        out = self._fp8_workspaces.get(cache_name) if cache_name is not None else None
        if out is not None and quantizer.columnwise_usage and out._transpose is None:
            out = None
            del self._fp8_workspaces[cache_name]
        if out is None:
            internal = quantizer.internal
            if cache_name is not None:
                # lines 1415-1427: a workspace that persists beyond one forward is cast as not internal, a
                # Float8Tensor (a torch.Tensor), which prepare_for_saving hands to save_for_backward as it is
                # instead of emptying it (an internal storage would be emptied, quantized_tensor.py:124-143)
                quantizer.internal = False
            out = quantizer(tensor)
            quantizer.internal = internal
            if cache_name is not None:
                self._fp8_workspaces[cache_name] = out
            return out
        if update_workspace:
            quantizer.update_quantized(tensor, out)
        return out

    @contextmanager
    def prepare_forward(self, inp: torch.Tensor, num_gemms: int = 1, allow_non_contiguous: bool = False,
                        allow_different_data_and_param_types: bool = False):
        self.allow_different_data_and_param_types = allow_different_data_and_param_types
        self.forwarded_at_least_once = True
        # TE asserts inp.is_cuda ("TransformerEngine needs CUDA."); the stand-in runs on CPU
        if self.tp_size > 1:
            assert self.tp_group_initialized, "TP group not initialized."
        self.set_activation_dtype(inp)
        self.init_fp8_metadata(num_gemms=num_gemms)
        if self.fp8 and self.fp8_meta["recipe"].delayed():  # TE 1058-1067
            if self.sequence_parallel:
                assert self.fp8_meta["recipe"].reduce_amax, (
                    "Amax reduction across tensor parallel group is necessary when using sequence parallelism with FP8.")
            if not FP8GlobalStateManager.fp8_graph_capturing():
                FP8GlobalStateManager.add_fp8_tensors_to_global_buffer(self.fp8_meta)
        if not allow_non_contiguous and not inp.is_contiguous():
            inp = inp.contiguous()
        yield inp

    def is_debug_iter(self) -> bool:
        """TE lines 1503-1537: off unless debug mode is on (nvdlfw_inspect; here TEDebugState set by a
        test), and then a layer with delayed weight gradients is refused in its forward (1533-1536)."""
        from ...debug.pytorch.debug_state import TEDebugState

        if not TEDebugState.debug_enabled:
            return False
        if self.wgrad_store is not None and self.wgrad_store.delay_wgrad_compute():
            raise RuntimeError("Delayed wgrad compute is not supported in debug mode.")
        raise NotImplementedError("the TransformerEngine stand-in does not reproduce TE's debug quantizers")

    # --- backward helper (TE 1099-1195) ---
    @staticmethod
    def grad_output_preprocess(ctx, grad_output: torch.Tensor, row_parallel_mode: bool, quantizer):
        """Returns (grad_output for the GEMMs, bias gradient or None). Without FP8 (and debug) the
        bias gradient is left to the wgrad GEMM (None here); under FP8 it is computed now, in B,
        from the high-precision gradient, and grad_output is quantized."""
        grad_output = grad_output.reshape((-1, grad_output.shape[-1])).contiguous()
        gather_grad_output = row_parallel_mode and ctx.sequence_parallel
        if not ctx.fp8 and not ctx.debug:
            if gather_grad_output:
                grad_output, _ = gather_along_first_dim(grad_output, ctx.tp_group)
            return grad_output, None
        if gather_grad_output:  # FP8 with all-gather: unfused bgrad on the local gradient (TE 1129-1161)
            grad_bias = grad_output.view(-1, grad_output.shape[-1]).sum(dim=0) if ctx.use_bias else None
            grad_output, _ = gather_along_first_dim(grad_output, ctx.tp_group, quantizer=quantizer)
            return grad_output, grad_bias
        grad_bias = None  # FP8 without all-gather: bgrad fused with the cast (TE 1174-1195)
        if ctx.use_bias:
            grad_bias = grad_output.view(-1, grad_output.shape[-1]).sum(dim=0)
        if not isinstance(grad_output, QuantizedTensorStorage):
            grad_output = quantizer(grad_output)
        return grad_output, grad_bias

    # --- the weight-gradient API (TE 1463-1502) ---
    def register_wgrad_accumulation_and_reduce_hooks(self, wgrad_accumulation_and_reduce_hook) -> None:
        self.wgrad_accumulation_and_reduce_hooks.append(wgrad_accumulation_and_reduce_hook)

    def need_backward_dw(self) -> bool:
        return self.wgrad_store is not None and self.wgrad_store.delay_wgrad_compute()

    def backward_dw(self) -> None:
        """The oldest delayed weight gradient: the weight's .grad replaced when not fused, the
        bias's .grad set only when empty, then every registered hook."""
        if not self.need_backward_dw():
            return
        (wgrad, bgrad), _ = self.wgrad_store.pop()
        if not self.fuse_wgrad_accumulation:
            weight = getattr(self, self.weight_names[0])
            weight.grad = wgrad.to(weight.dtype)
        if self.use_bias:
            bias = getattr(self, self.bias_names[0])
            if bias.grad is None:
                bias.grad = bgrad.to(bias.dtype)
        del wgrad, bgrad
        for hook in self.wgrad_accumulation_and_reduce_hooks:
            hook()

    def _mark_delayed_params(self) -> None:
        # what the constructors do when delayed (linear.py 1306-1309): DDP then hooks the module
        if self.wgrad_store.delay_wgrad_compute():
            for name, param in self.named_parameters():
                if name in self.weight_names or name in self.bias_names:
                    param.skip_backward_post_hook = True
