"""Stand-in for ``transformer_engine.pytorch`` (see the package docstring)."""

from transformer_engine.pytorch.module import GroupedLinear, LayerNormLinear, Linear  # noqa: F401
