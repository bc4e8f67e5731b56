"""Stand-in for TE v2.11 ``pytorch/fp8.py``: the deprecated alias of quantization.py (lines 1-60),
with its DeprecationWarning."""
import warnings

warnings.warn("Using deprecated internal API from Transformer Engine. transformer_engine.pytorch.fp8 will be "
              "removed in a future release.", DeprecationWarning, stacklevel=2)

from transformer_engine.common.recipe import (  # noqa: E402,F401
    CustomRecipe, DelayedScaling, Float8BlockScaling, Float8CurrentScaling, Format, MXFP8BlockScaling,
    NVFP4BlockScaling, Recipe)

from .quantization import (  # noqa: E402,F401
    FP8GlobalStateManager, autocast, check_fp8_block_scaling_support, check_fp8_support, check_mxfp8_support,
    check_nvfp4_support, check_recipe_support, fp8_autocast, fp8_model_init, get_default_fp8_recipe)
