"""Stand-in for TE v2.11 ``pytorch/cpp_extensions``: ``general_gemm`` and ``general_grouped_gemm``,
and (``cast.py``) the ``transformer_engine_torch`` casts GroupedLinear calls."""
from .gemm import general_gemm, general_grouped_gemm  # noqa: F401
from .cast import bgrad_quantize, split_quantize  # noqa: F401
