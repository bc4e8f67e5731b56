"""Stand-in for TE v2.11 ``pytorch/attention/__init__.py``: ``DotProductAttention``. (TE 2.11 has no
``_SplitAlongDim`` here, so megatron-core's ``SplitAlongDim`` is None with it, as with this.)"""
from .dot_product_attention import DotProductAttention  # noqa: F401
