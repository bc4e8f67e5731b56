"""Stand-in for TE v2.11 ``pytorch/distributed.py`` (commit c188b533): the RNG tracker
(``CudaRNGStatesTracker``, lines 776-884), ``activation_recompute_forward`` (228-263),
``checkpoint`` (623-773, not reproduced: it raises), and the tensor-parallel collectives the
linear layers use (``gather_along_first_dim`` 1586-1740, ``reduce_scatter_along_first_dim``
887-907, ``allreduce`` 1884-1898), in plain torch.distributed (gloo on CPU: a reduce-scatter is
an all-reduce and a slice, with the same result). Per-tensor FP8 is gathered as its float8
row-wise data with the local scale_inv (``_all_gather_fp8``, 910-1064)."""
from __future__ import annotations

from contextlib import AbstractContextManager, ContextDecorator, contextmanager
from typing import Dict, List, Optional, Tuple

import torch

from .quantization import FP8GlobalStateManager

_FP8_ACTIVATION_RECOMPUTE_ENABLED = False
_FP8_ACTIVATION_RECOMPUTE_PHASE = False


def get_distributed_world_size(group=None) -> int:
    """TE lines 158-163."""
    if not torch.distributed.is_initialized():
        return 1
    return torch.distributed.get_world_size(group=group)


def get_distributed_rank(group=None) -> int:
    assert torch.distributed.is_initialized(), "torch.distributed is not initialized."
    return torch.distributed.get_rank(group=group)


def set_tensor_model_parallel_attributes(tensor: torch.Tensor, is_parallel: bool, dim: int, stride: int) -> None:
    """TE lines 145-155: the attributes megatron-core reads on a tensor-parallel parameter."""
    for attribute in ("tensor_model_parallel", "partition_dim", "partition_stride"):
        assert not hasattr(tensor, attribute)
    setattr(tensor, "tensor_model_parallel", is_parallel)
    setattr(tensor, "partition_dim", dim)
    setattr(tensor, "partition_stride", stride)


class activation_recompute_forward(AbstractContextManager, ContextDecorator):
    _is_first_fp8_module: List = []

    def __init__(self, activation_recompute: bool = False, recompute_phase: bool = False):
        super().__init__()
        self.activation_recompute = activation_recompute
        self.recompute_phase = recompute_phase

    def __enter__(self):
        global _FP8_ACTIVATION_RECOMPUTE_ENABLED, _FP8_ACTIVATION_RECOMPUTE_PHASE
        _FP8_ACTIVATION_RECOMPUTE_ENABLED = self.activation_recompute and FP8GlobalStateManager.is_fp8_enabled()
        _FP8_ACTIVATION_RECOMPUTE_PHASE = self.recompute_phase
        if self.activation_recompute and not self.recompute_phase:
            activation_recompute_forward._is_first_fp8_module.append(FP8GlobalStateManager.IS_FIRST_FP8_MODULE)
        if self.activation_recompute and self.recompute_phase:
            FP8GlobalStateManager.IS_FIRST_FP8_MODULE = activation_recompute_forward._is_first_fp8_module.pop(0)

    def __exit__(self, *exc_details):
        global _FP8_ACTIVATION_RECOMPUTE_ENABLED, _FP8_ACTIVATION_RECOMPUTE_PHASE
        _FP8_ACTIVATION_RECOMPUTE_ENABLED = False
        _FP8_ACTIVATION_RECOMPUTE_PHASE = False


def is_fp8_activation_recompute_enabled() -> bool:
    return _FP8_ACTIVATION_RECOMPUTE_ENABLED


def in_fp8_activation_recompute_phase() -> bool:
    return _FP8_ACTIVATION_RECOMPUTE_PHASE


def checkpoint(function, *args, **kwargs):
    """TE lines 623-773 (activation recomputation): not reproduced by the stand-in."""
    raise NotImplementedError("the TransformerEngine stand-in does not reproduce transformer_engine.pytorch."
                              "distributed.checkpoint (activation recomputation of TE layers)")


# The RNG states: TE keeps CUDA generator states (lines 93-143); on CPU they are the CPU generator's.
def _get_rng_state(clone: bool = False) -> torch.Tensor:
    state = torch.get_rng_state()
    return state.clone() if clone else state


def _set_rng_state(state: torch.Tensor) -> None:
    torch.set_rng_state(state)


def get_all_rng_states() -> Dict:
    return _ALL_RNG_STATES


def set_all_rng_states(states: Dict) -> None:
    global _ALL_RNG_STATES
    _ALL_RNG_STATES = states


_ALL_RNG_STATES: Dict = {}


class CudaRNGStatesTracker:
    """TE lines 776-884 (the non-graph-safe branch: get, seed, store, restore)."""

    def __init__(self):
        self.states_ = {}
        self.seeds_ = set()

    def reset(self):
        self.states_ = {}
        self.seeds_ = set()

    def get_states(self) -> Dict[str, torch.Tensor]:
        return dict(self.states_)

    def set_states(self, states: Dict[str, torch.Tensor]) -> None:
        self.states_ = states

    def add(self, name: str, seed: int) -> None:
        if seed in self.seeds_:
            raise RuntimeError(f"seed {seed} already exists")
        self.seeds_.add(seed)
        if name in self.states_:
            raise RuntimeError(f"cuda rng state {name} already exists")
        orig = _get_rng_state()
        torch.manual_seed(seed)
        self.states_[name] = _get_rng_state(clone=True)
        _set_rng_state(orig)
        set_all_rng_states(self.states_)

    @contextmanager
    def fork(self, name: str = "model-parallel-rng"):
        if name not in self.states_:
            raise KeyError(f"cuda rng state {name} is not added")
        orig = _get_rng_state()
        _set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = _get_rng_state()
            _set_rng_state(orig)


def _high_precision(inp):
    from ..pytorch.quantized_tensor import QuantizedTensorStorage

    return inp.dequantize() if isinstance(inp, QuantizedTensorStorage) else inp


class _Done:
    """What an async collective returns once finished (gloo's work objects are waited on at once)."""

    def wait(self) -> None:
        pass


def gather_along_first_dim(inp, process_group, async_op: bool = False, quantizer=None):
    """All-gather along the first dimension (TE lines 1586-1740). With a per-tensor FP8 quantizer
    (``_all_gather_fp8``, lines 910-1064): a high-precision input is cast locally first, then the
    float8 row-wise data are gathered and keep the local ``scale_inv`` (the ranks' scales agree:
    amaxes are reduced over the group), the transpose made after when the quantizer asks for it."""
    from ..pytorch.quantized_tensor import QuantizedTensorStorage
    from ..pytorch.tensor.storage.float8_tensor_storage import Float8TensorStorage

    world_size = get_distributed_world_size(process_group)
    if quantizer is not None and not isinstance(inp, QuantizedTensorStorage):
        inp = quantizer(inp)
    if world_size == 1:
        return inp, None
    if isinstance(inp, Float8TensorStorage):
        data = inp._data.contiguous().view(torch.uint8)  # gloo moves bytes, not float8
        parts = [torch.empty_like(data) for _ in range(world_size)]
        torch.distributed.all_gather(parts, data, group=process_group)
        out = Float8TensorStorage(data=torch.cat(parts, dim=0).view(inp._data.dtype), fp8_scale_inv=inp._scale_inv,
                                  fp8_dtype=inp._fp8_dtype, quantizer=inp._quantizer)
        if quantizer is not None:
            out.update_usage(rowwise_usage=quantizer.rowwise_usage, columnwise_usage=quantizer.columnwise_usage)
        return out, (_Done() if async_op else None)
    data = _high_precision(inp).contiguous()
    parts = [torch.empty_like(data) for _ in range(world_size)]
    torch.distributed.all_gather(parts, data, group=process_group)  # gloo: no all_gather_into_tensor
    return torch.cat(parts, dim=0), (_Done() if async_op else None)


def reduce_scatter_along_first_dim(inp: torch.Tensor, tp_group, async_op: bool = False):
    """TE lines 887-907 (gloo has no reduce-scatter: all-reduce, then this rank's slice)."""
    world_size = get_distributed_world_size(tp_group)
    if world_size == 1:
        return inp, None
    assert inp.shape[0] % world_size == 0, \
        "First dimension of the tensor should be divisible by tensor parallel size"
    total = inp.contiguous().clone()
    torch.distributed.all_reduce(total, group=tp_group)
    rank = torch.distributed.get_rank(group=tp_group)
    out = total.chunk(world_size, dim=0)[rank].contiguous()
    return out, (_Done() if async_op else None)


def allreduce(inp: torch.Tensor, tp_group=None, async_op: bool = False) -> Tuple[torch.Tensor, Optional[object]]:
    """TE lines 1884-1898 (in place)."""
    if get_distributed_world_size(tp_group) == 1:
        return inp, None
    torch.distributed.all_reduce(inp, group=tp_group)
    return inp, (_Done() if async_op else None)
