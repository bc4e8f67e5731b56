"""Split weight gradients out of megatron-core's linear layers.

ColumnParallelLinear and RowParallelLinear call the module-level
`linear_with_grad_accumulation_and_async_allreduce` of
`megatron.core.tensor_parallel.layers` at every forward. `install()` replaces
that name with `deferrable_linear`.

Whether a layer's backward is split is decided when its forward runs: while
the executor runs a step of a schedule with W ops (`store.splitting`), the
weight enters the autograd function as a plain attribute, not as an autograd
input. The backward (a B op) then has no edge to the weight's gradient
accumulator, so nothing fires megatron's DDP grad-ready hook in B; it computes
the input gradient (with its tensor-parallel all-reduce or sequence-parallel
reduce-scatter) and the bias gradient, and queues the weight gradient, which
the W op delivers exactly once:

* with gradient-accumulation fusion, through the same kernel megatron's own
  backward calls (`fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_*`: apex's
  on GPU, compat.cpu's on CPU), into `main_grad` in fp32, then, like megatron,
  a dummy gradient is handed to the weight's accumulator so DDP's hook
  registers the weight (a zero view of one element, `dummy_grad.py`: no
  weight-sized buffer, cached or fresh);
* otherwise the product goes through the weight's own gradient accumulator,
  so hooks fire exactly as in an undivided backward.

Outside such a step (1F1B-style schedules, evaluation, plain use) the layer
is megatron's own, bit for bit. With sequence parallelism B keeps only this
rank's input shard; W gathers it again (into megatron's shared buffer, used
and released within the op), so the memory held from B to W is 1/tp of the
gathered input.

megatron-core 0.16.1, `tensor_parallel/layers.py`: both layers' `_forward_impl`
(948, 1239) look the module-level name up at call time (replacing the
re-export in `megatron.core.tensor_parallel` would change nothing); its
signature is at 629. Megatron's backward (443, the autograd function; its
`backward` 495-624) restores `weight.main_grad` (506), gathers a
sequence-parallel input again into the shared "mpu" buffer (519; a deferred W
must not keep that buffer), all-reduces or reduce-scatters the input gradient
(544, 555), accumulates a fused weight gradient with apex's kernel (569) and
then returns a dummy gradient and sets `grad_added_to_main_grad` when the
weight has that attribute (586-610), else computes it unfused (614).
"""
from __future__ import annotations

import functools

import torch

from .dummy_grad import zero_grad_view
from .wgrad_store import WeightGradStoreError, get_store

_ORIGINAL = None
_ORIGINAL_PARAMS: tuple = ()  # the replaced function's parameter names (positional extras bind by them)


def _megatron_linear_fn():
    from megatron.core.tensor_parallel import layers

    return layers.LinearWithGradAccumulationAndAsyncCommunication


def _reduce_scatter(output, input, group) -> None:
    # torch 2.13 renamed reduce_scatter_tensor (still there, deprecated)
    fn = getattr(torch.distributed, "reduce_scatter_single", None) or torch.distributed.reduce_scatter_tensor
    fn(output, input, group=group)


class _Weight:
    """A weight handed to the autograd function as a non-tensor, so the graph has
    no edge to its gradient accumulator (the W op delivers its gradient)."""

    __slots__ = ("param",)

    def __init__(self, param: torch.Tensor) -> None:
        self.param = param


def _announce_main_grad(weight: torch.Tensor) -> None:
    """After the weight gradient was added to `main_grad`: fire the accumulator's
    hooks with `.grad` set to a zero dummy, which is what megatron's fused
    backward makes DDP see (`grad_added_to_main_grad` tells it not to add it;
    with `zero_out_wgrad` it adds zeros). With the W op's other deliveries (wgrad_store)."""
    store = get_store()
    dummy = zero_grad_view(weight) if weight.grad is None else None
    if dummy is not None:
        weight.grad = dummy
    store.deliver(weight)
    if dummy is not None:
        store.after_delivery(lambda: _take_back(weight, dummy))


def _take_back(weight: torch.Tensor, dummy: torch.Tensor) -> None:
    if weight.grad is dummy:
        weight.grad = None  # nobody consumed it (no DDP hook): leave nothing behind


def _fused_accumulate(weight: torch.Tensor, main_grad: torch.Tensor, grad_output, total_input) -> None:
    """What megatron's backward does with gradient-accumulation fusion, same kernels."""
    from megatron.core.tensor_parallel import layers

    if hasattr(weight, "__fsdp_param__"):  # Megatron-FSDP: the buffer is (re)made in place
        weight.main_grad = weight.get_main_grad()
        torch.matmul(grad_output.t(), total_input, out=weight.main_grad)
        return
    kernels = layers.fused_weight_gradient_mlp_cuda
    if main_grad.dtype == torch.float32:
        kernels.wgrad_gemm_accum_fp32(total_input, grad_output, main_grad)
    elif main_grad.dtype in (torch.float16, torch.bfloat16):
        kernels.wgrad_gemm_accum_fp16(total_input, grad_output, main_grad)
    else:
        raise RuntimeError(f"gradient-accumulation fusion does not support main_grad of {main_grad.dtype}")


def _weight_grad_closure(weight, *, fusion: bool, main_grad, sequence_parallel: bool, tp_group):
    """W's work; called with (grad_output, input), which the store holds from B to W (so that
    activation offload can move them to host and back)."""
    def run(grad_output, input) -> None:
        from megatron.core.parallel_state import get_global_memory_buffer
        from megatron.core.utils import prepare_input_tensors_for_wgrad_compute

        with torch.no_grad():
            if sequence_parallel:  # gather the shard B kept; the buffer is free again when W ends
                shape = list(input.shape)
                shape[0] *= tp_group.size()
                total_input = get_global_memory_buffer().get_tensor(shape, input.dtype, "mpu")
                torch.distributed.all_gather_into_tensor(total_input, input.contiguous(), group=tp_group)
            else:
                total_input = input
            go, ti = prepare_input_tensors_for_wgrad_compute(grad_output, total_input)
            if fusion:
                if main_grad is not None:
                    weight.main_grad = main_grad  # as megatron's backward (layers reused, e.g. MTP)
                _fused_accumulate(weight, weight.main_grad, go, ti)
                if hasattr(weight, "grad_added_to_main_grad"):
                    weight.grad_added_to_main_grad = True
                    _announce_main_grad(weight)
                    return
                grad_weight = None
            else:
                grad_weight = go.t().matmul(ti)
        # megatron returns None when fused: the accumulator still runs its hooks
        get_store().deliver(weight, grad_weight)

    return run


class _WithParam:
    """Megatron's backward context with the parameter itself as the saved weight (see
    DeferrableLinear.forward); everything else is the real context's."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx) -> None:
        object.__setattr__(self, "_ctx", ctx)

    def __getattr__(self, name: str):
        return getattr(self._ctx, name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self._ctx, name, value)

    @property
    def saved_tensors(self) -> tuple:
        input, weight = self._ctx.saved_tensors
        param = self._ctx.param
        return input, (param if isinstance(param, torch.nn.Parameter) else weight)


class DeferrableLinear(torch.autograd.Function):
    """Megatron's linear autograd function; its weight gradient is deferred when
    the weight was passed as a `_Weight` (decided at forward time, see module doc).
    `rest` are megatron's own remaining forward arguments, in its order
    (`_megatron_forward_args`)."""

    @staticmethod
    def forward(ctx, input, weight, bias, *rest):
        ctx.split = isinstance(weight, _Weight)
        ctx.num_rest = len(rest)
        if ctx.split:
            weight = weight.param
        # W, and megatron's own backward, need the parameter itself (DDP's main_grad,
        # grad_added_to_main_grad): under saved-tensor hooks (activation offloading,
        # runtime/offload.py) autograd hands back a new tensor object for the saved weight,
        # without those attributes
        ctx.param = weight
        # Megatron's forward sets up ctx exactly as its backward expects.
        return _megatron_linear_fn().forward(ctx, input, weight, bias, *rest)

    @staticmethod
    def backward(ctx, grad_output):
        if not ctx.split:
            return _megatron_linear_fn().backward(_WithParam(ctx), grad_output)
        store = get_store()
        if not store.capturing:
            raise WeightGradStoreError(
                "a linear layer whose forward ran in a step with W ops was differentiated outside that step's B "
                "ops: its weight gradient has no W to run it (call backward only through the schedule)")
        input, weight = ctx.saved_tensors
        tp_group = ctx.tp_group
        grad_input = grad_output.matmul(weight)
        if ctx.allreduce_dgrad:
            torch.distributed.all_reduce(grad_input, group=tp_group)
        if ctx.sequence_parallel:
            sub = torch.empty(list(input.shape), dtype=input.dtype, device=input.device)
            _reduce_scatter(sub, grad_input.contiguous(), group=tp_group)
            grad_input = sub
        grad_bias = grad_output.reshape(-1, grad_output.shape[-1]).sum(dim=0) if ctx.use_bias else None
        store.defer(_weight_grad_closure(ctx.param, fusion=ctx.gradient_accumulation_fusion,
                                         main_grad=ctx.main_grad, sequence_parallel=ctx.sequence_parallel,
                                         tp_group=tp_group),
                    tensors=(grad_output, input), args=(grad_output, input))
        return (grad_input, None, grad_bias, *([None] * ctx.num_rest))


@functools.lru_cache(maxsize=None)
def _megatron_forward_args() -> tuple:
    """The names of megatron's autograd forward arguments after (input, weight, bias),
    in its order: megatron-core 0.16.1 ends with tp_group, 0.19 adds gtp_remat_size."""
    import inspect

    names = list(inspect.signature(_megatron_linear_fn().forward).parameters)
    return tuple(names[names.index("bias") + 1:])


class GTPWeightShardingUnsupported(ValueError):
    """A GTP weight-sharded layer (gtp_remat_size > 1) ran in a step with W ops."""


def deferrable_linear(input, weight, bias, gradient_accumulation_fusion, allreduce_dgrad, sequence_parallel,
                      grad_output_buffer=None, wgrad_deferral_limit=0, *args, **kwargs):
    """Drop-in for megatron's `linear_with_grad_accumulation_and_async_allreduce`, with the
    installed megatron-core's signature: 0.16.1 takes (..., async_grad_allreduce=None,
    tp_group=None), 0.19 takes (..., tp_group=None, gtp_remat_size=1)."""
    from megatron.core.utils import get_tensor_model_parallel_group_if_none

    if args:  # positional extras bind as the installed megatron's own function names them
        names = [n for n in ("async_grad_allreduce", "tp_group", "gtp_remat_size")
                 if n in _ORIGINAL_PARAMS] if _ORIGINAL_PARAMS else ["async_grad_allreduce", "tp_group"]
        if len(args) > len(names):
            raise TypeError(f"deferrable_linear() takes at most {8 + len(names)} positional arguments")
        kwargs.update(zip(names, args))
    unknown = set(kwargs) - {"async_grad_allreduce", "tp_group", "gtp_remat_size"}
    if unknown:
        raise TypeError(f"deferrable_linear() got unexpected keyword argument(s) {sorted(unknown)}: this "
                        f"megatron-core passes arguments primus_megatron does not know")
    async_grad_allreduce = kwargs.get("async_grad_allreduce")
    if async_grad_allreduce is not None:  # megatron-core 0.16.1's older name for allreduce_dgrad
        allreduce_dgrad = async_grad_allreduce
    tp_group = get_tensor_model_parallel_group_if_none(kwargs.get("tp_group"))
    gtp_remat_size = kwargs.get("gtp_remat_size", 1) or 1
    values = {"gradient_accumulation_fusion": gradient_accumulation_fusion, "allreduce_dgrad": allreduce_dgrad,
              "sequence_parallel": sequence_parallel, "grad_output_buffer": grad_output_buffer,
              "wgrad_deferral_limit": wgrad_deferral_limit, "tp_group": tp_group, "gtp_remat_size": gtp_remat_size}
    order = _megatron_forward_args()
    if gtp_remat_size > 1 and "gtp_remat_size" not in order:
        raise TypeError("gtp_remat_size > 1 given, but this megatron-core's linear function has no GTP weight sharding")
    if get_store().splitting and grad_output_buffer is None and weight.requires_grad \
            and (input.requires_grad or (bias is not None and bias.requires_grad)):
        if gtp_remat_size > 1:
            raise GTPWeightShardingUnsupported(
                f"a linear layer with GTP weight sharding (gtp_remat_size {gtp_remat_size}) ran in a step with W "
                f"ops: its sharded weight gradient cannot be deferred; set --gtp-weight-remat-size 1 (and "
                f"--expert-gtp-weight-remat-size 1) or use a schedule without W (1f1b, interleaved-1f1b)")
        weight = _Weight(weight)  # no backward would run otherwise: keep megatron's own path
    return DeferrableLinear.apply(input, weight, bias, *(values[name] for name in order))


def install() -> None:
    """Route megatron-core's parallel linear layers through `deferrable_linear` (idempotent)."""
    global _ORIGINAL, _ORIGINAL_PARAMS
    import inspect

    from megatron.core.tensor_parallel import layers

    if layers.linear_with_grad_accumulation_and_async_allreduce is not deferrable_linear:
        _ORIGINAL = layers.linear_with_grad_accumulation_and_async_allreduce
        _ORIGINAL_PARAMS = tuple(inspect.signature(_ORIGINAL).parameters)
        layers.linear_with_grad_accumulation_and_async_allreduce = deferrable_linear


def uninstall() -> None:
    global _ORIGINAL
    from megatron.core.tensor_parallel import layers

    if _ORIGINAL is not None:
        layers.linear_with_grad_accumulation_and_async_allreduce = _ORIGINAL
        _ORIGINAL = None


# TransformerEngine layers are not hooked here: see te_wgrad.py (routed through TE's own wgrad_store).
