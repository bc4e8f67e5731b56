"""Stand-in for TE v2.11 ``pytorch/cpp_extensions``: ``general_gemm`` and ``general_grouped_gemm``."""
from .gemm import general_gemm, general_grouped_gemm  # noqa: F401
