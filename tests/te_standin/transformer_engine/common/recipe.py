"""Stand-in for TE v2.11 ``transformer_engine/common/recipe/__init__.py`` (commit c188b533):
the FP8/FP4 formats (``Format``, lines 23-44) and the recipe dataclasses with the fields and
predicates megatron-core uses (``Recipe`` 86-117, ``DelayedScaling`` 120-220,
``Float8CurrentScaling`` 223-262, ``MXFP8BlockScaling`` 264-303, ``Float8BlockScaling``
305-384, ``NVFP4BlockScaling`` 386-481, ``CustomRecipe`` 483-520), with ``QParams`` / ``MMParams``
(47-83) and the ``__repr__`` of the per-tensor recipes (part of TE's autocast key). Building a
recipe works on CPU as in TE; the per-tensor ones run on the emulated FP8 device, the others are
refused (quantization.py). TE declares the recipes as pydantic dataclasses (line 11), whose
``__init__`` ignores keyword arguments it has no field for (pydantic's default ``extra='ignore'``):
megatron-core 0.16.1's ``TEDelayedScaling`` passes ``override_linear_precision``, a field TE 2.0
removed (``extensions/transformer_engine.py`` 2217-2224), and real TE 2.11 drops it silently;
``_ignore_extra`` does the same here."""
from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, NamedTuple, Optional


class _FormatHelper(NamedTuple):
    max_fwd: float
    max_bwd: float


class Format(Enum):
    E2M1 = _FormatHelper(max_fwd=6, max_bwd=6)
    E4M3 = _FormatHelper(max_fwd=448, max_bwd=448)
    E5M2 = _FormatHelper(max_fwd=57344, max_bwd=57344)
    HYBRID = _FormatHelper(max_fwd=448, max_bwd=57344)


@dataclass(frozen=True)
class MMParams:
    """TE lines 47-58."""
    use_split_accumulator: bool = True


@dataclass(frozen=True)
class QParams:
    """TE lines 61-83 (the FP4-only fields left out)."""
    power_2_scale: bool = False
    amax_epsilon: float = 0.0


class Recipe:
    def nvfp4(self):
        return isinstance(self, NVFP4BlockScaling)

    def mxfp8(self):
        return isinstance(self, MXFP8BlockScaling)

    def delayed(self):
        return isinstance(self, DelayedScaling)

    def float8_current_scaling(self):
        return isinstance(self, Float8CurrentScaling)

    def float8_per_tensor_scaling(self):
        return isinstance(self, (DelayedScaling, Float8CurrentScaling))

    def float8_block_scaling(self):
        return isinstance(self, Float8BlockScaling)

    def custom(self):
        return isinstance(self, CustomRecipe)


def _ignore_extra(cls):
    """A recipe dataclass whose constructor drops unknown keyword arguments, as pydantic's does."""
    import dataclasses
    import functools

    init = cls.__init__
    names = {f.name for f in dataclasses.fields(cls)}

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **{k: v for k, v in kwargs.items() if k in names})

    cls.__init__ = __init__
    return cls


@_ignore_extra
@dataclass()
class DelayedScaling(Recipe):
    margin: int = 0
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: Any = "max"
    scaling_factor_compute_algo: Optional[Callable] = None
    reduce_amax: bool = True
    fp8_dpa: bool = False
    fp8_mha: bool = False

    def __post_init__(self) -> None:
        # TE line 208-209
        assert self.fp8_format != Format.E5M2, "Pure E5M2 training is not supported."

    def __repr__(self) -> str:  # TE lines 211-220 (part of the autocast key: quantization.py)
        return (f"recipe_type={self.__class__.__name__}, margin={self.margin}, "
                f"format={str(self.fp8_format).split('.')[1]}, amax_history_len={self.amax_history_len}, "
                f"reduce_amax={self.reduce_amax}, fp8_dpa={self.fp8_dpa}, fp8_mha={self.fp8_mha}")


@_ignore_extra
@dataclass()
class Float8CurrentScaling(Recipe):
    """TE lines 223-262."""
    use_power_2_scales: bool = os.getenv("NVTE_FP8_CURRENT_SCALING_POWER_2_SCALES", "0") == "1"
    fp8_format: Format = Format.HYBRID
    fp8_quant_fwd_inp = QParams(power_2_scale=use_power_2_scales, amax_epsilon=0.0)
    fp8_quant_fwd_weight = QParams(power_2_scale=use_power_2_scales, amax_epsilon=0.0)
    fp8_quant_bwd_grad = QParams(power_2_scale=use_power_2_scales, amax_epsilon=0.0)
    fp8_gemm_fprop: MMParams = MMParams(use_split_accumulator=False)
    fp8_gemm_dgrad: MMParams = MMParams(use_split_accumulator=True)
    fp8_gemm_wgrad: MMParams = MMParams(use_split_accumulator=True)
    fp8_dpa: bool = False
    fp8_mha: bool = False

    def __post_init__(self) -> None:
        assert self.fp8_format != Format.E5M2, "Pure E5M2 training is not supported."

    def __repr__(self) -> str:
        return (f"recipe_type={self.__class__.__name__}, format={str(self.fp8_format).split('.')[1]}, "
                f"fp8_quant_fwd_inp={self.fp8_quant_fwd_inp}, fp8_quant_fwd_weight={self.fp8_quant_fwd_weight}, "
                f"fp8_quant_bwd_grad={self.fp8_quant_bwd_grad}, fp8_dpa={self.fp8_dpa}, fp8_mha={self.fp8_mha}")


@_ignore_extra
@dataclass()
class MXFP8BlockScaling(Recipe):
    margin: int = 0
    fp8_format: Format = Format.E4M3
    fp8_dpa: bool = False
    fp8_mha: bool = False


@_ignore_extra
@dataclass()
class Float8BlockScaling(Recipe):
    fp8_format: Format = Format.E4M3
    x_block_scaling_dim: int = 1
    w_block_scaling_dim: int = 2
    grad_block_scaling_dim: int = 1
    fp8_dpa: bool = False
    fp8_mha: bool = False


@_ignore_extra
@dataclass()
class NVFP4BlockScaling(Recipe):
    fp4_format: Format = Format.E2M1
    fp8_format: Format = Format.E4M3
    fp8_dpa: bool = False
    fp8_mha: bool = False


@_ignore_extra
@dataclass()
class CustomRecipe(Recipe):
    qfactory: Callable[..., Any] = None
    fp8_dpa: bool = False
    fp8_mha: bool = False
