"""TransformerEngine's quantized tensors, as activation offload and the profiler meet them.

Under FP8 TE keeps its quantized data in two kinds of object (TE v2.11, commit c188b533,
`transformer_engine/pytorch/quantized_tensor.py`):

- a *storage* (`QuantizedTensorStorage`, 29-121: `Float8TensorStorage` and its kin), a plain Python
  object holding its buffers (`tensor/storage/float8_tensor_storage.py`: row-wise `_data`, the
  column-wise `_transpose`, `_scale_inv`). What a quantizer marked `internal` makes: Linear's and
  LayerNormLinear's inputs and grad outputs (`module/linear.py:1490-1496`,
  `module/layernorm_linear.py:1621-1627`), GroupedLinear's grad outputs (`grouped_linear.py:962`).
  `save_for_backward` takes tensors only, so TE's `prepare_for_saving` (124-143) hands it each
  storage's buffers, as plain tensors (`float8_tensor_storage.py:117-123` empties the object; ctx
  keeps it and `restore_from_saved`, 146-166 and 125-132, puts them back): saved-tensor hooks see
  plain float8 tensors and move them like any other. A storage reaches offload as an object only in
  what B keeps for W (`wgrad_store.put([inputmat_total, grad_output], ...)`, `linear.py:899`).
- a *wrapper* (`QuantizedTensor`, 333-364: `Float8Tensor`, a `torch.Tensor` wrapper subclass with no
  storage of its own, whose data are the storage class's buffers). `prepare_for_saving` passes any
  torch.Tensor to `save_for_backward` as it is (its `isinstance(tensor, torch.Tensor)` branch, 135),
  so saved-tensor hooks get the wrapper itself: GroupedLinear's inputs (its input quantizers are not
  internal, `grouped_linear.py:951-953`; saved at 250-256) and a module's cached FP8 weight
  (`base.py:1415-1423` makes that one not internal so that saving it does not empty it).

Both kinds save themselves through the same protocol, which every TE quantized format implements:
`prepare_for_saving()` -> (buffers, the emptied object), `restore_from_saved(buffers)`. `split`
and `rebuilt` use it, so offload moves the buffers and rebuilds the object around their copies.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

import torch


def is_quantized(value: Any) -> bool:
    """TE quantized data: an object that saves itself through prepare_for_saving / restore_from_saved."""
    return callable(getattr(value, "prepare_for_saving", None)) and callable(getattr(value, "restore_from_saved", None))


def split(value: Any) -> tuple[Any, list]:
    """(shell, buffers) of quantized `value`: the buffers (tensors or None, in TE's order) and an object
    emptied of them that `rebuilt` puts them back into. A wrapper is detached first (a new wrapper over the
    same buffers: `Float8Tensor.detach`, float8_tensor.py:521-523), so only that copy is emptied and
    whoever else holds `value` (a module's cached weight) keeps it whole; a storage object is emptied
    itself, as TE's own saving does (its holder hands it over: what B keeps for W)."""
    shell = value.detach() if isinstance(value, torch.Tensor) else value
    buffers, shell = shell.prepare_for_saving()
    return shell, list(buffers)


def rebuilt(shell: Any, buffers: list) -> Any:
    """The quantized value `shell` was split from, on `buffers`. A wrapper comes back as a new wrapper and
    the shell is emptied again, so that reading a saved tensor (autograd may unpack it more than once: a
    graph walk does) leaves no reference to the buffers in the shell; a storage is restored in place."""
    shell.restore_from_saved(list(buffers))
    if not isinstance(shell, torch.Tensor):
        return shell
    out = shell.detach()
    shell.prepare_for_saving()
    return out


def buffers(item: Any) -> Optional[list]:
    """The tensors a quantized wrapper or storage keeps alive, `item` left as it is; None when it is not TE's
    quantized data. Every tensor its `get_metadata()` names (TE v2.11 `tensor/storage/float8_tensor_storage.py:
    107-115`: row-wise data, column-wise transpose, scale-inverse; `mxfp8_tensor_storage.py:102-111`,
    `float8_blockwise_tensor_storage.py:80-91`, `nvfp4_tensor_storage.py:123-134` likewise, NVFP4's amaxes
    too): the tensors its `prepare_for_saving` saves (117-123). A usage TE dropped (`update_usage`, 189-227:
    the input's row-wise data once the forward GEMM ran, linear.py:398-399) is None there and not counted;
    every quantize makes its own scale-inverse (`csrc/quantizer.cpp:116, 348-353`), counted with it. The
    storages have `get_metadata` since TE 2.7 (`tensor/_internal/*_base.py`), the oldest TE we split."""
    metadata = getattr(item, "get_metadata", None)
    if not callable(metadata):
        return None
    return [t for t in metadata().values() if isinstance(t, torch.Tensor)]


def expanded(items: Iterable) -> list:
    """`items` with each quantized value replaced by its buffers (`buffers`); None dropped."""
    out = []
    for item in items:
        parts = buffers(item)
        if parts is not None:
            out.extend(parts)
        elif item is not None:
            out.append(item)
    return out


def cached_weights(chunks: Iterable[torch.nn.Module]) -> set[int]:
    """Data pointers of the buffers of the FP8 weights TE modules in `chunks` cache across microbatches
    (`_fp8_workspaces`, TE v2.11 base.py:625, filled at 1415-1427 when the forward is given
    `is_first_microbatch`, as megatron's TE layers are): copies of weights, not activations, though every F
    saves them for its backward and B frees nothing of them."""
    return {t.untyped_storage().data_ptr()
            for chunk in chunks for module in chunk.modules()
            for t in expanded((getattr(module, "_fp8_workspaces", None) or {}).values())}
