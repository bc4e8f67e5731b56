"""Stand-in for ``transformer_engine.pytorch.module``."""

from .grouped_linear import GroupedLinear  # noqa: F401
from .layernorm_linear import LayerNormLinear  # noqa: F401
from .linear import Linear  # noqa: F401
