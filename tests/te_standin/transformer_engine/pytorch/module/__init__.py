"""Stand-in for ``transformer_engine.pytorch.module`` (TE v2.11)."""
from .base import get_dummy_wgrad  # noqa: F401
from .fp8_padding import Fp8Padding, Fp8Unpadding  # noqa: F401
from .grouped_linear import GroupedLinear  # noqa: F401
from .layernorm import LayerNorm, RMSNorm  # noqa: F401
from .layernorm_linear import LayerNormLinear  # noqa: F401
from .layernorm_mlp import LayerNormMLP  # noqa: F401
from .linear import Linear  # noqa: F401
