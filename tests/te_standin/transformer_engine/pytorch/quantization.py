"""Stand-in for TE v2.11 ``pytorch/quantization.py`` (commit c188b533): the FP8 global state
(``FP8GlobalStateManager``, lines 234-670), the autocast contexts (``fp8_autocast`` 766-797,
``autocast`` 800-862) and the support checks (48-116, 161-232).

A CPU has no FP8 GEMMs: the support checks answer as TE does on a device below compute
capability 8.9 (line 53), so ``autocast(enabled=True)`` fails TE's own assertion in
``check_recipe_support`` (90-100). ``emulate_fp8_device()`` (stand-in only, for tests) makes
them answer as on an FP8 device: TE's FP8 code paths then run with quantizers that keep the
data in high precision (tensor/float8_tensor.py), so what TE does differently under FP8 (the
bias gradient in B, quantized storages handed to ``put``) runs on CPU with exact numbers.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Optional, Tuple


from transformer_engine.common.recipe import (  # noqa: F401
    CustomRecipe, DelayedScaling, Float8BlockScaling, Float8CurrentScaling, Format, MXFP8BlockScaling,
    NVFP4BlockScaling, Recipe)

_NO_FP8 = "Device compute capability 8.9 or higher required for FP8 execution."  # TE line 53
_EMULATED = {"fp8": False}


@contextmanager
def emulate_fp8_device():
    """Stand-in only: answer the support checks as an FP8 (Hopper) device would, for a test."""
    before = _EMULATED["fp8"]
    _EMULATED["fp8"] = True
    try:
        yield
    finally:
        _EMULATED["fp8"] = before


def check_fp8_support() -> Tuple[bool, str]:
    return (True, "") if _EMULATED["fp8"] else (False, _NO_FP8)


def check_mxfp8_support() -> Tuple[bool, str]:
    return False, "Device compute capability 10.0 or higher required for MXFP8 execution."  # TE 68


def check_nvfp4_support() -> Tuple[bool, str]:
    return False, "Device compute capability 10.0 or higher required for NVFP4 execution."  # TE 76


def check_fp8_block_scaling_support() -> Tuple[bool, str]:
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
    skip_fp8_weight_update_tensor = None

    @classmethod
    def reset(cls) -> None:
        cls.FP8_ENABLED = cls.FP8_CALIBRATION = cls.FP8_PARAMETERS = cls.HIGH_PRECISION_INIT_VAL = False
        cls.IS_FIRST_FP8_MODULE = cls.FP8_GRAPH_CAPTURING = False
        cls.FP8_RECIPE = cls.FP8_DISTRIBUTED_GROUP = cls.skip_fp8_weight_update_tensor = None
        cls.AUTOCAST_DEPTH = 0

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
        """TE lines 563-599 (without the amax bookkeeping of delayed scaling)."""
        fp8_recipe = get_default_fp8_recipe() if fp8_recipe is None else fp8_recipe
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
        cls.AUTOCAST_DEPTH -= 1


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


