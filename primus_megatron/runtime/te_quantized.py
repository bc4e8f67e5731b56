"""TransformerEngine's quantized tensors as the measured activation memory sees them.

Under FP8 a TE layer keeps quantized data where bf16 keeps tensors: a `Float8TensorStorage` (a plain
object, not a torch.Tensor) or a `Float8Tensor` (a torch.Tensor wrapper subclass with no storage of
its own), and the block-scaled kin of both. What one keeps alive is every tensor its `get_metadata()`
names (TE v2.11, commit c188b533, `pytorch/tensor/storage/float8_tensor_storage.py:107-115`: the
row-wise data, the column-wise transpose and the scale-inverse; `mxfp8_tensor_storage.py:102-111`,
`float8_blockwise_tensor_storage.py:80-91`, `nvfp4_tensor_storage.py:123-134`: row-wise and
column-wise data and scale-inverses, and NVFP4's amaxes), the same tensors its `prepare_for_saving`
saves for backward (float8_tensor_storage.py:117-123). A usage TE dropped (`update_usage`, 189-227:
the input's row-wise data once the forward GEMM has run, linear.py:398-399) is None there and not
counted; every quantize makes its own scale-inverse (`csrc/quantizer.cpp:116, 147-150, 348-353`),
counted with it. The storages have had `get_metadata` since TE 2.7 (`tensor/_internal/*_base.py`), the
oldest TE whose layers our W ops split.

A module's cached FP8 weights (`_fp8_workspaces`, base.py:625, filled at 1415-1427 when its forward is
given `is_first_microbatch`, as megatron's TE layers are) stay from one microbatch to the next, as
the parameters do: F saves them for backward, but B frees nothing of them, so they are not a
microbatch's activations.
"""
from __future__ import annotations

from typing import Iterable, Optional

import torch


def buffers(item) -> Optional[list]:
    """The tensors a TE quantized tensor (or storage) keeps alive; None when `item` is not one."""
    metadata = getattr(item, "get_metadata", None)
    if not callable(metadata):
        return None
    return [t for t in metadata().values() if isinstance(t, torch.Tensor)]


def expanded(items: Iterable) -> list:
    """`items` with each quantized tensor replaced by its buffers (`buffers`); None dropped."""
    out = []
    for item in items:
        parts = buffers(item)
        if parts is not None:
            out.extend(parts)
        elif item is not None:
            out.append(item)
    return out


def cached_weights(modules: Iterable[torch.nn.Module]) -> list:
    """The buffers of the FP8 weights `modules` (TE modules among them) keep cached across microbatches."""
    cached = []
    for module in modules:
        workspaces = getattr(module, "_fp8_workspaces", None)
        if isinstance(workspaces, dict):
            cached.extend(expanded(workspaces.values()))
    return cached
