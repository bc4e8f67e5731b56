"""Stand-in for TE v2.11 ``pytorch/tensor/storage``."""
from .float8_tensor_storage import Float8TensorStorage  # noqa: F401
