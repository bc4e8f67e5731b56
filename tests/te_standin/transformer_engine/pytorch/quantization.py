"""Stand-in for TE v2.11 ``pytorch/quantization.py`` (commit c188b533): the FP8 global state
(``FP8GlobalStateManager``, lines 234-670, with delayed scaling's global amax buffers 360-411,
``reduce_and_update_fp8_tensors`` 496-548 and the forward update at autocast exit 600-610),
the autocast contexts (``fp8_autocast`` 766-797, ``autocast`` 800-862), the support checks
(48-116, 161-232), the padding size of grouped GEMMs (118-124), the FP8 dtype / max helpers (127-158), the unfused amax and scale update
(865-964) and the recipe states that make a module's quantizers (``RecipeState`` 977-1036,
``DelayedScalingRecipeState`` 1049-1096, ``Float8CurrentScalingRecipeState`` 1099-1137).

A CPU has no FP8 GEMMs: the support checks answer as TE does on a device below compute
capability 8.9 (line 53), so ``autocast(enabled=True)`` fails TE's own assertion in
``check_recipe_support`` (90-100). ``emulate_fp8_device()`` (stand-in only, for tests; or
``TE_STANDIN_EMULATE_FP8_DEVICE`` in the environment of a process a test starts) makes
them answer as on an FP8 device, Hopper (``"sm90"``: OCP float8_e4m3fn / float8_e5m2, TN-only
FP8 GEMMs) or MI300 (``"gfx942"``: the FNUZ formats float8_e4m3fnuz / float8_e5m2fnuz, E4M3's
maximum 240, as ROCm's TE fork picks them: ROCm/TransformerEngine ``common/recipe/__init__.py``
``_FormatMaxVals`` (commit 0285870) and ``pytorch/quantization.py`` ``get_fp8_torch_dtype``
(commit 030b792)). FP8 is then real: values are cast to the float8 dtype with the recipe's
scale (tensor/float8_tensor.py) and the GEMMs multiply the float8 data (cpp_extensions/gemm.py).

The per-tensor recipes run: ``DelayedScaling`` (``--fp8-recipe delayed``) and
``Float8CurrentScaling`` (``tensorwise``), formats E4M3 and HYBRID. The others raise where TE
builds their quantizers (``RecipeState.create``): ``MXFP8BlockScaling`` already fails TE's
support check on the emulated Hopper / gfx942 (as TE does there), ``Float8BlockScaling``
(``blockwise``), ``NVFP4BlockScaling`` and ``CustomRecipe`` raise NotImplementedError naming the
stand-in.
"""
from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from typing import Any, Dict, List, Optional, Tuple

import torch


from transformer_engine.common.recipe import (  # noqa: F401
    CustomRecipe, DelayedScaling, Float8BlockScaling, Float8CurrentScaling, Format, MXFP8BlockScaling,
    NVFP4BlockScaling, Recipe)

_NO_FP8 = "Device compute capability 8.9 or higher required for FP8 execution."  # TE line 53
_EMULATED = {"fp8": False, "platform": None}
_PLATFORMS = ("sm90", "gfx942")
# Stand-in only: the same switch for a process a test starts (Megatron-LM's pretrain_gpt.py ranks,
# tests/megatron_lm_harness.run(fp8_device=...)), which no context manager of the test reaches. Read at
# every check, not at import: the harness's import-once process imports TE before a rank's environment is set.
EMULATE_ENV = "TE_STANDIN_EMULATE_FP8_DEVICE"


def _emulated_platform() -> Optional[str]:
    """The FP8 device emulated now: emulate_fp8_device()'s, else EMULATE_ENV's, else None (a CPU)."""
    if _EMULATED["fp8"]:
        return _EMULATED["platform"]
    platform = os.environ.get(EMULATE_ENV) or None
    if platform is not None and platform not in _PLATFORMS:
        raise ValueError(f"{EMULATE_ENV} must be one of {_PLATFORMS}, not {platform!r}")
    return platform


@contextmanager
def emulate_fp8_device(platform: str = "sm90"):
    """Stand-in only: answer the support checks as an FP8 device would, for a test: a Hopper
    ("sm90") or an MI300 ("gfx942", the FNUZ float8 formats)."""
    if platform not in _PLATFORMS:
        raise ValueError(f"emulate_fp8_device: platform must be one of {_PLATFORMS}, not {platform!r}")
    before = dict(_EMULATED)
    _EMULATED.update(fp8=True, platform=platform)
    try:
        yield
    finally:
        _EMULATED.update(before)


def is_fp8_fnuz() -> bool:
    """ROCm TE's ``is_fp8_fnuz()``: the emulated device is gfx942 (MI300)."""
    return _emulated_platform() == "gfx942"


def get_align_size_for_quantization(recipe: Recipe) -> int:
    """TE lines 118-124: the row multiple a grouped FP8/FP4 GEMM's splits are padded to (Fp8Padding)."""
    if recipe.mxfp8():
        return 32
    if recipe.nvfp4():
        return 64
    return 16


def _forward_format(fp8_recipe: Recipe, fprop_tensor: bool) -> bool:
    return fp8_recipe.fp8_format == Format.E4M3 or (fp8_recipe.fp8_format == Format.HYBRID and fprop_tensor)


def get_fp8_torch_dtype(fp8_recipe: Recipe, fprop_tensor: bool = True) -> torch.dtype:
    """TE lines 127-133 (ROCm's fork: the FNUZ dtypes on gfx942). The stand-in names TE's
    ``tex.DType.kFloat8E4M3`` / ``kFloat8E5M2`` by these torch dtypes (get_fp8_te_dtype)."""
    if _forward_format(fp8_recipe, fprop_tensor):
        return torch.float8_e4m3fnuz if is_fp8_fnuz() else torch.float8_e4m3fn
    return torch.float8_e5m2fnuz if is_fp8_fnuz() else torch.float8_e5m2


get_fp8_te_dtype = get_fp8_torch_dtype  # TE lines 136-142


def get_fp8_max(fp8_recipe: Recipe, fprop_tensor: bool = True) -> float:
    """TE lines 152-158: the format's largest value (E4M3: 448, 240 in FNUZ; E5M2: 57344)."""
    return float(torch.finfo(get_fp8_torch_dtype(fp8_recipe, fprop_tensor)).max)


def check_fp8_support() -> Tuple[bool, str]:
    return (True, "") if _emulated_platform() else (False, _NO_FP8)


def check_mxfp8_support() -> Tuple[bool, str]:
    return False, "Device compute capability 10.0 or higher required for MXFP8 execution."  # TE 68


def check_nvfp4_support() -> Tuple[bool, str]:
    return False, "Device compute capability 10.0 or higher required for NVFP4 execution."  # TE 76


def check_fp8_block_scaling_support() -> Tuple[bool, str]:
    if _emulated_platform() == "sm90":  # TE 83-84: a Hopper with CUDA >= 12.9 has it (refused in RecipeState)
        return True, ""
    if is_fp8_fnuz():  # ROCm's fork: not on ROCm
        return False, "FP8 block scaled gemm not yet supported for ROCm"
    return False, "FP8 block scaled GEMM requires compute capability 9.0 or higher and CUDA >= 12.9."  # TE 84-87


def check_recipe_support(recipe: Optional[Recipe]) -> None:
    """TE lines 90-100 (a None recipe passes, as there)."""
    supported, reason = True, ""
    if isinstance(recipe, (DelayedScaling, Float8CurrentScaling)):
        supported, reason = check_fp8_support()
    elif isinstance(recipe, Float8BlockScaling):
        supported, reason = check_fp8_block_scaling_support()
    elif isinstance(recipe, MXFP8BlockScaling):
        supported, reason = check_mxfp8_support()
    assert supported, reason


def get_default_fp8_recipe() -> Recipe:
    return DelayedScaling()  # TE 103-110 on a device without MXFP8, below compute capability 12.0


get_default_recipe = get_default_fp8_recipe


def _available(check, return_reason: bool):
    return check() if return_reason else check()[0]


def is_fp8_available(return_reason: bool = False):
    return _available(check_fp8_support, return_reason)


def is_mxfp8_available(return_reason: bool = False):
    return _available(check_mxfp8_support, return_reason)


def is_fp8_block_scaling_available(return_reason: bool = False):
    return _available(check_fp8_block_scaling_support, return_reason)


def is_nvfp4_available(return_reason: bool = False):
    return _available(check_nvfp4_support, return_reason)


class FP8GlobalStateManager:
    """The class-level state TE keeps (lines 234-262) and the accessors megatron-core calls."""

    FP8_ENABLED = False
    FP8_CALIBRATION = False
    FP8_RECIPE = None
    FP8_DISTRIBUTED_GROUP = None
    FP8_PARAMETERS = False
    HIGH_PRECISION_INIT_VAL = False
    IS_FIRST_FP8_MODULE = False
    FP8_GRAPH_CAPTURING = False
    AUTOCAST_DEPTH = 0
    global_amax_buffer: Dict[str, List[torch.Tensor]] = {}
    global_amax_history_buffer: Dict[str, List[torch.Tensor]] = {}
    global_scale_buffer: Dict[str, List[torch.Tensor]] = {}
    autocast_arguments: Dict[str, Tuple[Recipe, Any]] = {}
    skip_fp8_weight_update_tensor = None

    @classmethod
    def reset(cls) -> None:
        cls.FP8_ENABLED = cls.FP8_CALIBRATION = cls.FP8_PARAMETERS = cls.HIGH_PRECISION_INIT_VAL = False
        cls.IS_FIRST_FP8_MODULE = cls.FP8_GRAPH_CAPTURING = False
        cls.FP8_RECIPE = cls.FP8_DISTRIBUTED_GROUP = cls.skip_fp8_weight_update_tensor = None
        cls.AUTOCAST_DEPTH = 0
        cls.global_amax_buffer, cls.global_amax_history_buffer, cls.global_scale_buffer = {}, {}, {}
        cls.autocast_arguments = {}

    # --- delayed scaling's global amax buffers (TE lines 320-411, 496-560) ---
    @classmethod
    def get_unique_autocast_key(cls, recipe: Optional[Recipe] = None, group=None) -> str:
        return f"{str(recipe)}:{hash(group)}"

    @classmethod
    def get_key_in_buffer(cls, forward: bool, fp8_recipe: Recipe, fp8_group) -> str:
        return f"{'forward' if forward else 'backward'}_{cls.get_unique_autocast_key(fp8_recipe, fp8_group)}"

    @classmethod
    def add_fp8_tensors_to_global_buffer(cls, fp8_meta: Dict[str, Any]) -> None:
        """TE lines 360-411: once per module, its amax history row 0 (a view), history and scale
        join the buffers of its autocast key, forward and backward separately."""
        if not fp8_meta["recipe"].delayed() or "buffer_index_and_autocast_key" in fp8_meta:
            return
        fp8_meta["buffer_index_and_autocast_key"] = []
        for forward in (True, False):
            state = fp8_meta["scaling_fwd" if forward else "scaling_bwd"]
            key = cls.get_key_in_buffer(forward, fp8_meta["recipe"], fp8_meta["fp8_group"])
            cls.global_amax_buffer.setdefault(key, []).append(state.amax_history[0])
            cls.global_amax_history_buffer.setdefault(key, []).append(state.amax_history)
            cls.global_scale_buffer.setdefault(key, []).append(state.scale)
            fp8_meta["buffer_index_and_autocast_key"] += [len(cls.global_amax_buffer[key]) - 1, key]

    @classmethod
    def reduce_and_update_fp8_tensors(cls, forward: bool = True) -> None:
        """TE lines 496-548: per autocast key, the amaxes concatenated, MAX-reduced across the
        amax group (when distributed, reduce_amax, group > 1), then every history and scale updated."""
        for buffer_key, amax_buffer in cls.global_amax_buffer.items():
            fwd_update, autocast_key = buffer_key.split("_", 1)
            if (fwd_update == "forward") != forward or len(amax_buffer) == 0:
                continue
            recipe, group = cls.autocast_arguments[autocast_key]
            contiguous_amax = torch.cat(amax_buffer)
            if (recipe.reduce_amax and torch.distributed.is_initialized()
                    and torch.distributed.get_world_size(group=group) > 1):
                torch.distributed.all_reduce(contiguous_amax, op=torch.distributed.ReduceOp.MAX, group=group)
            unfused = (bool(int(os.getenv("NVTE_UNFUSED_FP8_UPDATE", "0"))) or callable(recipe.amax_compute_algo)
                       or callable(recipe.scaling_factor_compute_algo))
            histories, scales = cls.global_amax_history_buffer[buffer_key], cls.global_scale_buffer[buffer_key]
            fp8_max = get_fp8_max(recipe, forward)
            if not unfused:
                fused_amax_and_scale_update_after_reduction(contiguous_amax, histories, scales,
                                                            recipe.amax_compute_algo, fp8_max, recipe.margin)
                continue
            torch._foreach_copy_(amax_buffer, contiguous_amax.split([x.numel() for x in amax_buffer]))
            for amax_history, scale in zip(histories, scales):
                _amax_and_scale_update(amax_history, scale, fp8_max, recipe)

    @classmethod
    def get_skip_fp8_weight_update_tensor(cls):
        return cls.skip_fp8_weight_update_tensor

    @classmethod
    def is_fp8_available(cls) -> Tuple[bool, str]:
        return check_fp8_support()

    @classmethod
    def is_mxfp8_available(cls) -> Tuple[bool, str]:
        return check_mxfp8_support()

    @classmethod
    def is_fp8_block_scaling_available(cls) -> Tuple[bool, str]:
        return check_fp8_block_scaling_support()

    @classmethod
    def is_nvfp4_available(cls) -> Tuple[bool, str]:
        return check_nvfp4_support()

    @classmethod
    def is_fp8_enabled(cls) -> bool:
        return cls.FP8_ENABLED

    @classmethod
    def is_fp8_calibration(cls) -> bool:
        return cls.FP8_CALIBRATION

    @classmethod
    def with_fp8_parameters(cls) -> bool:
        return cls.FP8_PARAMETERS

    @classmethod
    def with_high_precision_init_val(cls) -> bool:
        return cls.HIGH_PRECISION_INIT_VAL

    @classmethod
    def fp8_graph_capturing(cls) -> bool:
        return cls.FP8_GRAPH_CAPTURING  # TE also asks torch.cuda.is_current_stream_capturing(): never on CPU

    @classmethod
    def is_first_fp8_module(cls) -> bool:
        tmp, cls.IS_FIRST_FP8_MODULE = cls.IS_FIRST_FP8_MODULE, False
        return tmp

    @classmethod
    def get_fp8_recipe(cls) -> Recipe:
        return cls.FP8_RECIPE if cls.FP8_RECIPE is not None else get_default_fp8_recipe()

    @classmethod
    def get_fp8_group(cls):
        return cls.FP8_DISTRIBUTED_GROUP

    @classmethod
    def get_autocast_state(cls):
        return (cls.FP8_ENABLED, cls.FP8_CALIBRATION, cls.FP8_RECIPE, cls.FP8_DISTRIBUTED_GROUP,
                cls.IS_FIRST_FP8_MODULE, cls.FP8_GRAPH_CAPTURING)

    @classmethod
    def set_autocast_state(cls, state) -> None:
        (cls.FP8_ENABLED, cls.FP8_CALIBRATION, cls.FP8_RECIPE, cls.FP8_DISTRIBUTED_GROUP,
         cls.IS_FIRST_FP8_MODULE, cls.FP8_GRAPH_CAPTURING) = state

    @classmethod
    def autocast_enter(cls, enabled: bool = False, calibrating: bool = False, fp8_recipe: Optional[Recipe] = None,
                       fp8_group=None, _graph: bool = False) -> None:
        """TE lines 563-599."""
        fp8_recipe = get_default_fp8_recipe() if fp8_recipe is None else fp8_recipe
        cls.autocast_arguments[cls.get_unique_autocast_key(fp8_recipe, fp8_group)] = (fp8_recipe, fp8_group)
        cls.FP8_ENABLED, cls.FP8_CALIBRATION, cls.FP8_RECIPE = enabled, calibrating, fp8_recipe
        cls.FP8_DISTRIBUTED_GROUP, cls.FP8_GRAPH_CAPTURING = fp8_group, _graph
        if cls.AUTOCAST_DEPTH == 0:
            cls.IS_FIRST_FP8_MODULE = True
        cls.AUTOCAST_DEPTH += 1
        if enabled:
            available, reason = cls.is_fp8_available()
            assert available, reason
            for kind, check in ((MXFP8BlockScaling, check_mxfp8_support), (Float8BlockScaling,
                                check_fp8_block_scaling_support), (NVFP4BlockScaling, check_nvfp4_support)):
                if isinstance(fp8_recipe, kind):
                    ok, why = check()
                    assert ok, why

    @classmethod
    def autocast_exit(cls, enabled: bool, _graph: bool) -> None:
        """TE lines 600-610: leaving the outermost autocast (grad enabled) updates the forward
        tensors' amax histories and scales (delayed scaling; a no-op otherwise: no buffers)."""
        cls.AUTOCAST_DEPTH -= 1
        if enabled and cls.AUTOCAST_DEPTH == 0 and not _graph and torch.is_grad_enabled():
            cls.reduce_and_update_fp8_tensors(forward=True)


@contextmanager
def autocast(enabled: bool = True, calibrating: bool = False, recipe: Optional[Recipe] = None,
             amax_reduction_group=None, _graph: bool = False):
    """TE lines 800-862."""
    if enabled:
        check_recipe_support(recipe)
    state = FP8GlobalStateManager.get_autocast_state()
    FP8GlobalStateManager.autocast_enter(enabled=enabled, calibrating=calibrating, fp8_recipe=recipe,
                                         fp8_group=amax_reduction_group, _graph=_graph)
    try:
        yield
    finally:
        FP8GlobalStateManager.set_autocast_state(state)
        FP8GlobalStateManager.autocast_exit(enabled, _graph=_graph)


@contextmanager
def fp8_autocast(enabled: bool = True, calibrating: bool = False, fp8_recipe: Optional[Recipe] = None,
                 fp8_group=None, _graph: bool = False):
    """TE lines 766-797: deprecated alias of autocast."""
    warnings.warn("fp8_autocast is deprecated and will be removed in a future release. "
                  "Use autocast(enabled=..., calibrating=..., recipe=..., group=..., _graph=...) instead.",
                  category=DeprecationWarning, stacklevel=2)
    with autocast(enabled=enabled, calibrating=calibrating, recipe=fp8_recipe, amax_reduction_group=fp8_group,
                  _graph=_graph):
        yield


@contextmanager
def quantized_model_init(enabled: bool = True, recipe: Optional[Recipe] = None, preserve_high_precision_init_val=False):
    """TE lines 703-763: parameters stored quantized; not reproduced by the stand-in."""
    if enabled:
        raise NotImplementedError("the TransformerEngine stand-in has no quantized (FP8) parameters")
    yield


@contextmanager
def fp8_model_init(enabled: bool = True, recipe: Optional[Recipe] = None, preserve_high_precision_init_val=False):
    with quantized_model_init(enabled=enabled, recipe=recipe):
        yield




# --- delayed scaling's amax and scale update --------------------------------------------------

_FP32_MAX = torch.finfo(torch.float32).max


def fused_amax_and_scale_update_after_reduction(amax_reduction_buffer: torch.Tensor, amax_histories: list,
                                                scales: list, amax_compute_algo: str, fp8_max: float,
                                                margin: float) -> None:
    """``tex.fused_amax_and_scale_update_after_reduction``: TE ``common/recipe/delayed_scaling.cu``
    ``kernel_bulk`` (lines 162-253) and its launcher (313-388), per quantizer (a history column):
    the latest amax is the reduced one when non-zero, else history row 0; when it is zero (no cast
    since the last update) history and scale stay; else the history rolls (row 0 zeroed, the latest
    amax last), amax is the max over the rolled window (``max``) or the latest (``most_recent``),
    and scale = fp8_max * 2^-margin / amax when amax is finite and positive (else kept), FP32_MAX
    where that overflows. fmaxf ignores NaN, as ``nan_to_num`` does here."""
    if amax_compute_algo not in ("max", "most_recent"):
        raise RuntimeError(f"Unsupported amax compute algorithm ({amax_compute_algo})")  # lines 321-328
    scaled_max = torch.tensor(fp8_max, dtype=torch.float32) * torch.tensor(2.0 ** -margin, dtype=torch.float32)
    offset = 0
    for history, scale in zip(amax_histories, scales):
        n = history.shape[1]
        reduced = amax_reduction_buffer[offset:offset + n]
        offset += n
        last = torch.where(reduced != 0, reduced, history[0])
        active = last != 0
        window = torch.cat([history[1:], last[None]], dim=0)  # a_i of line 191
        if amax_compute_algo == "max":
            amax = torch.nan_to_num(window, nan=0.0).amax(dim=0)
        else:
            amax = last.clone()
        amax = torch.where(active, amax, torch.zeros_like(amax))
        rolled = window.clone()
        rolled[0] = 0
        history.copy_(torch.where(active[None], rolled, history))
        new_scale = torch.where(torch.isfinite(amax) & (amax > 0), scaled_max / amax, scale)
        scale.copy_(torch.where(torch.isinf(new_scale), torch.full_like(new_scale, _FP32_MAX), new_scale))


def _amax_and_scale_update(amax_history: torch.Tensor, scale: torch.Tensor, fp8_max: float, recipe) -> None:
    """TE lines 865-964, the unfused update (NVTE_UNFUSED_FP8_UPDATE=1 or callable algorithms):
    amax from the whole history (before the roll), the history rolled and row 0 zeroed, then the
    scale from ``scaling_factor_compute_algo`` or the default (909-914)."""
    algo = recipe.amax_compute_algo
    if callable(algo):
        amax = algo(amax_history)
    elif algo == "max":
        amax = torch.max(amax_history, dim=0).values
    else:
        amax = amax_history[0].clone()
    if amax_history.shape[0] > 1:
        amax_history.copy_(torch.roll(amax_history, -1, 0))
    amax_history[0].fill_(0.0)
    if recipe.scaling_factor_compute_algo is not None:
        new_scale = recipe.scaling_factor_compute_algo(amax, scale, fp8_max, recipe)
    else:
        sf = (fp8_max / amax) / (2 ** recipe.margin)
        sf = torch.where(amax > 0.0, sf, scale)
        sf = torch.where(torch.isfinite(amax), sf, scale)
        new_scale = torch.where(torch.isinf(sf), torch.full_like(sf, _FP32_MAX), sf)
    scale.copy_(new_scale)


# --- recipe states: the quantizers of a module (TE lines 977-1137) -------------------------------

_REFUSED = {
    MXFP8BlockScaling: "the TransformerEngine stand-in does not reproduce the MXFP8BlockScaling recipe "
                       "(--fp8-recipe mxfp8): its E8M0 scales per 32-element block are not emulated",
    Float8BlockScaling: "the TransformerEngine stand-in does not reproduce the Float8BlockScaling recipe "
                        "(--fp8-recipe blockwise): its 1x128 and 128x128 block scales are not emulated",
    NVFP4BlockScaling: "the TransformerEngine stand-in does not reproduce the NVFP4BlockScaling recipe: "
                       "FP4 is not emulated",
    CustomRecipe: "the TransformerEngine stand-in does not reproduce CustomRecipe: its quantizer factory "
                  "is not run",
}


class RecipeState:
    """TE lines 977-1046: builds the quantizers of one module and one direction."""

    @staticmethod
    def create(recipe: Recipe, *, mode: str, num_quantizers: int = 1, device=None) -> "RecipeState":
        if recipe.delayed():
            return DelayedScalingRecipeState(recipe, mode=mode, num_quantizers=num_quantizers)
        if recipe.float8_current_scaling():
            return Float8CurrentScalingRecipeState(recipe, mode=mode, num_quantizers=num_quantizers)
        if type(recipe) in _REFUSED:
            raise NotImplementedError(_REFUSED[type(recipe)])
        raise ValueError(f"{recipe.__class__.__name__} is not supported")


class DelayedScalingRecipeState(RecipeState):
    """TE lines 1049-1096: scales (ones) and an amax history (zeros, amax_history_len rows, one
    column per quantizer); quantizer i scales with ``scale[i]`` and records into history row 0."""

    def __init__(self, recipe: DelayedScaling, *, mode: str, num_quantizers: int = 1) -> None:
        self.recipe, self.mode, self.num_quantizers = recipe, mode, num_quantizers
        self.dtype = get_fp8_te_dtype(recipe, mode == "forward")
        self.scale = torch.ones(num_quantizers, dtype=torch.float32)
        self.amax_history = torch.zeros(recipe.amax_history_len, num_quantizers, dtype=torch.float32)

    def make_quantizers(self) -> list:
        from .tensor.float8_tensor import Float8Quantizer

        return [Float8Quantizer(self.scale[i], self.amax_history[0][i].reshape((1,)), self.dtype)
                for i in range(self.num_quantizers)]


class Float8CurrentScalingRecipeState(RecipeState):
    """TE lines 1099-1137: no state; each quantizer scales by its tensor's own amax."""

    def __init__(self, recipe: Float8CurrentScaling, *, mode: str, num_quantizers: int = 1) -> None:
        self.recipe, self.mode, self.num_quantizers = recipe, mode, num_quantizers
        self.dtype = get_fp8_te_dtype(recipe, mode == "forward")

    def make_quantizers(self) -> list:
        from .tensor.float8_tensor import Float8CurrentScalingQuantizer

        return [Float8CurrentScalingQuantizer(self.dtype, force_pow_2_scales=self.recipe.use_power_2_scales)
                for _ in range(self.num_quantizers)]
