"""Stand-in for TE v2.11 ``pytorch/cpp_extensions``: ``general_gemm`` only."""
from .gemm import general_gemm  # noqa: F401
