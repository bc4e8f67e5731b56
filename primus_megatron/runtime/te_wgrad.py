"""TransformerEngine linear layers: their weight gradients run in our W ops.

What TE offers (v2.11, the newest megatron-core 0.16.1 accepts; file:line facts
at the end): the backward of `Linear` and
`LayerNormLinear` asks its layer's `wgrad_store.delay_wgrad_compute()`; when
true it hands the weight-gradient GEMM to `wgrad_store.put([input,
grad_output], gemm)` instead of running it. `gemm(*tensors)` returns
(weight grad, bias grad); with `fuse_wgrad_accumulation` it writes into
`main_grad` itself. TE's own store is a FIFO per layer drained by
`layer.backward_dw()`, which replaces `.grad`, sets the bias's `.grad` only if
empty, then calls the hooks megatron's DDP registered on the layer.

Why we do not use that store:
* megatron-core 0.16.1 builds its TE layers delayed only when
  `TransformerConfig.delay_wgrad_compute`, which it refuses unless
  `overlap_moe_expert_parallel_comm` is on; and a TE store made undelayed has
  no queue, so `enable_delay_wgrad_compute()` would leave `put` failing. So
  `enable()` gives each built layer a store of ours instead.
* Its `put` queues the GEMM under the running B op's (microbatch, chunk), so
  each W runs exactly its own B's work whatever order W ops come in (TE's
  store would pair them by per-layer FIFO position).
* The W delivers what `backward_dw` delivers but accumulates (a replaced
  `.grad` is right only when a DDP hook empties it after every call): the
  weight gradient (unless fused) and the bias gradient computed by the GEMM go
  through the parameter's autograd accumulator, then the layer's DDP hooks
  run once.

Megatron's DDP (`DistributedDataParallelConfig.delay_wgrad_compute=True`)
registers its grad-ready hook on the layer (`register_wgrad_accumulation_and_
reduce_hooks`) instead of on the parameter's accumulator for parameters marked
`skip_backward_post_hook`; `enable()` marks the layer's weight, and its bias when
the GEMM adds it, as TE's constructor does when delayed (a bias the layer returns
gets its gradient in B and keeps its hook: `_bias_in_gemm`). This is required: a TE backward always
reaches the weight's accumulator (with a dummy gradient when fused, else
None), so a per-parameter hook would fire in B. `prepare_step` refuses a model
where DDP hooked them per parameter.

Outside a B op (BW ops, megatron's own schedules) the queued work runs when
that backward ends (autograd's final callback): the layer then behaves as an
undelayed one. TE's `LayerNormMLP` is not split: its weight gradients stay in
B, like megatron's norms and biases; one built with TE's own delay is refused,
since nothing would run its `backward_dw`.

TE's `GroupedLinear` (megatron's TEGroupedLinear, the experts of TEGroupedMLP) is
split too: one parameter per expert GEMM (`weight{i}`, `bias{i}`, no
`weight_names`), one `put([inputs, grad outputs, outputs], grouped_gemm)` per
layer and backward (v2.11 grouped_linear.py:466-468), the GEMM returning
(outputs, bias gradients, gelu inputs) (cpp_extensions/gemm.py:213-316). TE hands
autograd that same `outputs` list right after `put` (504-507): unfused, buffers
only the delayed GEMM fills (422-425), which autograd would add to each expert's
`.grad` in B (TE's own `backward_dw` replaces `.grad`, 849-872, so it never
notices). `put` empties the list in place: autograd gets None (megatron's dummy
when fused), nothing weight-sized is held from B to W, and W allocates the
outputs (unfused) or writes `main_grad` (fused). A bias added in the GEMM (fc1)
gets its gradient in W (under FP8 in B, as Linear's: grouped_linear.py:331-357,
511-516); one the layer returns (TEGroupedMLP's fc2, added per
expert by `_apply_bias`) from autograd in B. Under FP8 `put` holds each expert's
quantized input (a `Float8Tensor`, column-wise data only) and grad output. megatron-core 0.19's
`overlap_dispatch_backward_with_experts_wgrad`, which calls `backward_dw` inside
B, is refused with W ops (primus_megatron/unsupported.py); its fused grouped-MLP path
needs TE 2.14's `ops.GroupedLinear` and is not reached with TE 2.11.

Grouped experts with all experts in one stacked parameter (TE 2.14+'s `single_grouped_weight` /
`single_grouped_bias`, ROCm TE's `GroupedLinearV2`) are not split: refused with W ops by name
(`grouped_layouts`, which cites the sources).

Only schedules with W ops route layers (`build_model` calls `enable` for them
only): `1f1b` / `interleaved-1f1b` leave TE's layers and store alone and run
on any TE. Before the first layer is routed, `support_problem` asks the
installed TE for the API above (feature checks: `WeightGradStore` and
`delay_wgrad_compute` since v2.3, the DDP layer hooks since v2.7) and for its
debug mode, and `_route` refuses a layer whose backward uses userbuffers
(UB_BACKWARD_OVERLAPS); Megatron-LM's start-up check asks the same
(megatron_lm/args.py), and primus_megatron/unsupported.py refuses the FP8 recipes
and features the CPU reproduction lacks, FP4 and `--tp-comm-overlap` with W ops over TE layers.

Memory held until W: under sequence parallelism TE hands `put` the
all-gathered input (and, for a row-parallel layer, the gathered grad_output),
so it keeps them from B to W where megatron's own layers keep the 1/tp shard
and gather again in W. We count it rather than re-gather: `put` records every
tensor it is given as held by that W (`store.defer(tensors=...)`), which the
runtime profiler reads into the measured `mem_b` / `mem_w` the planner
simulates. Under FP8 those are quantized tensors, counted by their buffers
(data, transpose, scale-inverse: `quantized`), and a GroupedLinear's GEMM
also keeps the biases as cast in F (`_bias_copies`).

Everything here is a no-op unless `transformer_engine.pytorch` is imported.

Sources. TransformerEngine v2.11 (commit c188b533), lines in
`transformer_engine/pytorch/module/`; megatron-core 0.16.1's `dev` extra
allows `>=2.9.0a0,<2.12.0`. The same at v2.10; v2.9 has no `need_backward_dw()`;
`put` and `delay_wgrad_compute` exist since v2.3, the DDP hook registration and
`skip_backward_post_hook` since v2.7. TE calls only `delay_wgrad_compute`,
`put` and `pop` on a store.
* `_common.py`: `WeightGradStore` (189-255); built undelayed it has no queue
  (210) and `enable_delay_wgrad_compute()` only flips a flag (222).
* `linear.py` (`layernorm_linear.py` alike): the forward hands the store to the
  autograd function (1437; 1554), the backward asks it (888; 903) and, delayed,
  calls `put([input, grad_output], wgrad_gemm)` (899; 914), the closure
  returning (dw, db) (870-885; the bias gradient is fused into the GEMM without
  FP8, 861). Delayed or not, with fusion and `grad_added_to_main_grad` on the
  weight it returns a dummy weight gradient (945-964). Delayed constructors
  mark weight and bias `skip_backward_post_hook` (1306-1309; 1403-1406).
* `base.py`: `backward_dw()` (1482-1502) replaces `weight.grad` (1493), sets
  `bias.grad` only if None (1496), then calls the registered hooks (1500).
* `grouped_linear.py`: delayed and unfused, the backward hands autograd
  unfilled weight-gradient tensors (422-425) that only its `backward_dw`
  (849-873) fills.
* megatron-core 0.16.1: `transformer/transformer_config.py:1908-1912` refuses
  `delay_wgrad_compute` without `overlap_moe_expert_parallel_comm`; the TE
  wrappers pass `fuse_wgrad_accumulation=config.gradient_accumulation_fusion`
  (`extensions/transformer_engine.py:626,828`). A fused layer's first GEMM of a
  step overwrites `main_grad` (`is_first_microbatch`, TE `linear.py:834-838`),
  reset per step only with fp8/fp4 (`pipeline_parallel/schedules.py:404-405`):
  a chunk's W ops must run in microbatch order, as every built-in schedule's
  do. DDP hooks a parameter marked `skip_backward_post_hook` on its layer when
  `DistributedDataParallelConfig.delay_wgrad_compute`, decided once at
  construction (`distributed/distributed_data_parallel.py:321-345`).
  megatron-core imports its TE wrappers when `transformer_engine` imports
  (`fp8_utils.py:40-70`) and keeps `HAVE_TE = True` if that fails
  (`transformer/attention.py:99-110`): the tests' stand-in (tests/te_standin)
  becomes importable only after megatron-core's modules are imported.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from . import grouped_layouts, quantized
from .dummy_grad import zero_grad_view
from .wgrad_store import get_store


def _te_classes() -> Optional[tuple[type, tuple[type, ...]]]:
    """(TE's base module class, the classes we split), or None when TE is not
    loaded: no TE layer can exist then, and importing TE is not ours to do."""
    if "transformer_engine.pytorch" not in sys.modules:
        return None
    try:
        import transformer_engine.pytorch as te
        base = _te_base_class()
        split = (te.Linear, te.LayerNormLinear, *((te.GroupedLinear,) if hasattr(te, "GroupedLinear") else ()))
    except Exception:  # noqa: BLE001 - a broken or partial install builds no layers either
        return None
    # megatron's TELinear / TEColumnParallelLinear / TERowParallelLinear derive from Linear,
    # TELayerNormColumnParallelLinear from LayerNormLinear, TEGroupedLinear (TEGroupedMLP's experts)
    # from GroupedLinear
    return (base, split) if base is not None else None


NO_W = "a schedule without W (1f1b, interleaved-1f1b)"

# The TransformerEngine API a routed layer needs, each with the first release that has it
# (checked in TE's source at tags v2.3, v2.6, v2.7, v2.11): a backward that hands its
# wgrad GEMM to `wgrad_store.put` when the store says so and the store class itself
# (`_common.py` WeightGradStore, v2.3: 222; v2.11: 189; the constructors' `delay_wgrad_compute`
# argument, v2.3 linear.py:906), and the layer hooks through which megatron's DDP
# registers a delayed layer (`register_wgrad_accumulation_and_reduce_hooks`, v2.7
# base.py:1410; absent in v2.6).
REQUIRED = (
    ("WeightGradStore", "2.3"),
    ("delay_wgrad_compute", "2.3"),
    ("register_wgrad_accumulation_and_reduce_hooks", "2.7"),
)
UPGRADE_TO = "2.7"
# Userbuffers overlaps a routed layer cannot have: with bulk wgrad overlap TE raises
# NotImplementedError for a delayed GEMM (v2.11 linear.py:889-898, layernorm_linear.py:904-913);
# with bulk dgrad overlap (the input all-gather, linear.py:659-665, layernorm_linear.py:680) or
# the row-parallel grad_output all-gather (base.py grad_output_preprocess, ub_overlap_ag) the
# tensors handed to `put` live in a shared userbuffers buffer that later layers' backward
# overwrites before W.
UB_BACKWARD_OVERLAPS = ("ub_bulk_wgrad", "ub_bulk_dgrad", "ub_overlap_ag_dgrad")


def te_version() -> str:
    te = sys.modules.get("transformer_engine")
    return str(getattr(te, "__version__", "?"))


def missing_api() -> Optional[tuple[str, str]]:
    """(what, since which TE release) the imported TransformerEngine lacks to defer a
    weight gradient to W, or None when it has everything (feature checks, not versions)."""
    import inspect

    import transformer_engine.pytorch as te

    try:
        from transformer_engine.pytorch.module import _common
    except ImportError:
        _common = None
    have = {"WeightGradStore": _common is not None and hasattr(_common, "WeightGradStore")}
    params = set()
    for cls in (te.Linear, te.LayerNormLinear):
        try:
            params.add("delay_wgrad_compute" in inspect.signature(cls.__init__).parameters)
        except (TypeError, ValueError):
            params.add(False)
    have["delay_wgrad_compute"] = params == {True}
    base = _te_base_class()
    have["register_wgrad_accumulation_and_reduce_hooks"] = base is not None and callable(
        getattr(base, "register_wgrad_accumulation_and_reduce_hooks", None))
    for what, since in REQUIRED:
        if not have[what]:
            return what, since
    return None


def _te_base_class() -> Optional[type]:
    try:
        from transformer_engine.pytorch.module.base import TransformerEngineBaseModule
    except ImportError:
        return None
    return TransformerEngineBaseModule


def debug_mode() -> bool:
    """Whether TE's debug mode (nvidia-dlframework-inspect) is on: TE then raises for every
    delayed layer's forward ("Delayed wgrad compute is not supported in debug mode",
    v2.11 base.py:1533-1535). TE decides it when its first module is built
    (debug_state.py TEDebugState.initialize)."""
    state = sys.modules.get("transformer_engine.debug.pytorch.debug_state")
    if state is not None and getattr(getattr(state, "TEDebugState", None), "debug_enabled", None):
        return True
    inspect_api = sys.modules.get("nvdlfw_inspect.api")
    return getattr(inspect_api, "DEBUG_MANAGER", None) is not None


def support_problem(schedule: Optional[str] = None) -> Optional[str]:
    """One sentence on why the installed TransformerEngine cannot run the W ops of
    `schedule` (a phrase such as "--pipeline-schedule zbv"; None: a schedule with W ops),
    or None. Imports TE if it is installed; None without it (no TE layer can exist then)."""
    if not te_importable():
        return None
    w_ops = f"the W ops of {schedule}" if schedule else "W ops"
    missing = missing_api()
    if missing is not None:
        what, since = missing
        return (f"TransformerEngine {te_version()} cannot defer weight gradients to {w_ops}: it has no {what} "
                f"(TransformerEngine {since} added it); upgrade TransformerEngine to {UPGRADE_TO} or newer, or use "
                f"{NO_W}, which runs on any TransformerEngine")
    if debug_mode():
        return (f"TransformerEngine's debug mode (nvidia-dlframework-inspect) refuses delayed weight gradients "
                f"(module/base.py: \"Delayed wgrad compute is not supported in debug mode\"), which {w_ops} need: "
                f"turn the debug mode off, or use {NO_W}")
    return None


def te_importable() -> bool:
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception:  # noqa: BLE001 - not installed, or a broken install that builds no layers
        return False
    return True


class TESupportError(ValueError):
    """The installed TransformerEngine, or a setting of a layer, cannot defer weight gradients (one sentence)."""


def _require_support(schedule: Optional[str]) -> None:
    problem = support_problem(schedule)
    if problem:
        raise TESupportError(problem)


def _is_grouped(layer: torch.nn.Module) -> bool:
    """TE's GroupedLinear: one weight (and bias) per GEMM, `weight{i}` / `bias{i}`, no `weight_names`."""
    return hasattr(layer, "num_gemms") and not hasattr(layer, "weight_names")


def _weight_names(layer: torch.nn.Module) -> list:
    return [f"weight{i}" for i in range(layer.num_gemms)] if _is_grouped(layer) else list(layer.weight_names)


def _bias_names(layer: torch.nn.Module) -> list:
    return [f"bias{i}" for i in range(layer.num_gemms)] if _is_grouped(layer) else list(layer.bias_names)


class _Work:
    """One layer's deferred weight-gradient GEMM and its delivery."""

    __slots__ = ("layer", "tensors", "gemm")

    def __init__(self, layer: torch.nn.Module, tensors: Optional[list], gemm: Callable) -> None:
        self.layer, self.tensors, self.gemm = layer, tensors, gemm

    def __call__(self, *given) -> None:
        """Runs on the tensors it was made with, or (deferred to a W op, `tensors` None) on those
        the store hands it (`given`: held by the store from B to W, as activation offload needs)."""
        tensors = self.tensors if self.tensors is not None else list(given)
        gemm, self.tensors, self.gemm = self.gemm, None, None  # free inputs as W ends
        if gemm is None:
            raise RuntimeError("a TransformerEngine weight gradient was run twice")
        with torch.no_grad(), _named_gemm_failure(self.layer):  # as in TE's backward: no graph is recorded
            wgrad, bgrad = gemm(*tensors)[:2]
        del tensors
        layer = self.layer
        if not layer.fuse_wgrad_accumulation:  # fused: the GEMM already added it to main_grad
            _accumulate(getattr(layer, layer.weight_names[0]), wgrad)
        if layer.use_bias and bgrad is not None:  # bias gradient fused into the GEMM (no FP8)
            _accumulate(getattr(layer, layer.bias_names[0]), bgrad)
        del wgrad, bgrad
        get_store().after_delivery(lambda: _run_layer_hooks(layer))


class _GroupedWork(_Work):
    """A GroupedLinear's deferred GEMMs, one per expert: TE hands `put` [inputs, grad outputs, outputs]
    (three lists) and the GEMM returns (outputs, bias gradients, gelu inputs) (module doc). The store
    holds the inputs and grad outputs flat (the arguments activation offload moves); `outputs` are the
    fused layer's `main_grad`s, or None: unfused, W allocates them (TE's B allocated them)."""

    __slots__ = ("outputs",)

    def __init__(self, layer: torch.nn.Module, tensors: Optional[list], gemm: Callable, outputs) -> None:
        super().__init__(layer, tensors, gemm)
        self.outputs = outputs

    def __call__(self, *given) -> None:
        layer, n = self.layer, self.layer.num_gemms
        flat = self.tensors if self.tensors is not None else list(given)
        gemm, self.tensors, self.gemm = self.gemm, None, None
        if gemm is None:
            raise RuntimeError("a TransformerEngine weight gradient was run twice")
        weights = [getattr(layer, name) for name in _weight_names(layer)]
        outputs = self.outputs if layer.fuse_wgrad_accumulation else [
            torch.empty(w.shape, dtype=dtype, device=w.device) for w, dtype in zip(weights, self.outputs)]
        self.outputs = None
        with torch.no_grad(), _named_gemm_failure(layer):
            _, grad_biases, _ = gemm(list(flat[:n]), list(flat[n:2 * n]), outputs)
        del flat
        if not layer.fuse_wgrad_accumulation:
            for w, g in zip(weights, outputs):
                _accumulate(w, g)
        if layer.apply_bias:  # in the GEMM (not a returned bias): its gradient came with the weight's
            for name, g in zip(_bias_names(layer), grad_biases):
                if g is not None and g.numel():
                    _accumulate(getattr(layer, name), g)
        del outputs, grad_biases
        get_store().after_delivery(lambda: _run_layer_hooks(layer))


# hipBLASLt has no kernel for some fused bias-gradient weight-gradient GEMMs with an fp32 output (main_grad)
# on gfx950 and raises this inside TE's GEMM (ROCm/TransformerEngine#634): in W, not in B as under 1F1B
HIPBLASLT_NO_ALGORITHM = "Unable to find any suitable algorithms"


@contextlib.contextmanager
def _named_gemm_failure(layer: torch.nn.Module) -> Iterator[None]:
    try:
        yield
    except RuntimeError as exc:
        if HIPBLASLT_NO_ALGORITHM not in str(exc):
            raise
        raise RuntimeError(f"TransformerEngine's weight-gradient GEMM of {type(layer).__name__} (run in a W op) found "
                           f"no hipBLASLt kernel for its fused bias gradient with an fp32 main_grad "
                           f"(ROCm/TransformerEngine#634, gfx950): use a ROCm TransformerEngine with that fix, "
                           f"--disable-bias-linear, or --no-gradient-accumulation-fusion ({exc})") from exc


def _accumulate(param: torch.Tensor, grad: torch.Tensor) -> None:
    # through the parameter's own AccumulateGrad node: adds to .grad as an undivided backward would;
    # in the W op's one call into autograd's engine (wgrad_store)
    get_store().deliver(param, grad)


def _marked_params(layer: torch.nn.Module) -> list:
    """The layer's weights/biases whose DDP hook sits on the layer."""
    out = []
    for name in (*_weight_names(layer), *(_bias_names(layer) if layer.use_bias else ())):
        p = getattr(layer, name, None)
        if isinstance(p, torch.nn.Parameter) and p.requires_grad and getattr(p, "skip_backward_post_hook", False):
            out.append(p)
    return out


def _run_layer_hooks(layer: torch.nn.Module) -> None:
    """Call the hooks megatron's DDP registered on the layer, once each (as backward_dw does).

    Each moves its parameter's .grad into main_grad (unless grad_added_to_main_grad),
    empties .grad and registers the parameter as ready. With overlap_grad_reduce it
    asserts .grad is not None, which fails when an earlier W's hook already emptied
    a .grad that B filled for several microbatches (fused dummies, B-side biases):
    such a parameter gets a zero placeholder for the call (`dummy_grad.py`: one
    element of storage, not weight-sized).
    """
    hooks = layer.wgrad_accumulation_and_reduce_hooks
    if not hooks:
        return
    placeholders = []
    for p in _marked_params(layer):
        if p.grad is None:
            p.grad = zero_grad_view(p)
            placeholders.append((p, p.grad))
    for hook in hooks:
        hook()
    for p, placeholder in placeholders:
        if p.grad is placeholder:  # no hook consumed it: leave nothing behind
            p.grad = None


class DeferringWgradStore:
    """Stands where a TE layer keeps its `WeightGradStore` (`layer.wgrad_store`).

    TE's backward only calls `delay_wgrad_compute()` and `put()` on it (and
    `backward_dw()` calls `pop()`, which has nothing to pop here)."""

    def __init__(self, layer: torch.nn.Module) -> None:
        self.layer = layer  # a strong reference: deepcopy of the layer copies the pair together

    def delay_wgrad_compute(self) -> bool:
        return True

    def enable_delay_wgrad_compute(self) -> None:
        pass

    def disable_delay_wgrad_compute(self) -> None:
        raise RuntimeError("this TransformerEngine layer's weight gradients are routed to primus_megatron's W ops "
                           "(primus_megatron.runtime.te_wgrad.enable); they cannot be made undelayed again")

    def put(self, tensor_list: list, func: Callable) -> None:
        # the tensors are held until W (under sequence parallelism TE's gathered input / grad_output):
        # counted as such for the measured mem_b / mem_w the planner simulates (module doc)
        store = get_store()
        grouped = _is_grouped(self.layer)
        if grouped:
            work, args = _grouped_work(self.layer, tensor_list, func)
        else:
            work, args = _Work(self.layer, None, func), tensor_list
        if store.capturing:  # a B op: its W runs the work on the tensors the store holds meanwhile
            kept = _bias_copies(self.layer, func) if grouped else ()
            store.defer(work, tensors=_held_tensors(args) + kept, args=args)
        else:  # a BW op, megatron's own schedule, plain use: run when this backward ends
            work.tensors = list(args)
            torch.autograd.Variable._execution_engine.queue_callback(work)

    def pop(self):
        raise RuntimeError("backward_dw() has nothing to run: this TransformerEngine layer's weight gradients are run "
                           "by primus_megatron's W ops (or at the end of the backward that made them)")

    def assert_empty(self) -> None:
        pass  # nothing is kept here: the work sits in primus_megatron's store


def _grouped_work(layer: torch.nn.Module, tensor_list: list, func: Callable) -> tuple:
    """(work, flat arguments) of a GroupedLinear's `put([inputs, grad outputs, outputs], gemm)`. TE hands
    autograd that same `outputs` list right after `put` (v2.11 grouped_linear.py:504-507): unfused it
    holds weight-sized buffers only the delayed GEMM fills (422-425), which autograd would add to each
    weight's .grad in B. Emptied here, autograd gets None (or megatron's dummy when fused, 483-498) and
    nothing weight-sized is held from B to W: W allocates the outputs (unfused) or writes `main_grad`."""
    inputs, grad_outputs, outputs = tensor_list
    kept = list(outputs) if layer.fuse_wgrad_accumulation else [o.dtype for o in outputs]
    outputs[:] = [None] * len(outputs)
    return _GroupedWork(layer, None, func, kept), [*inputs, *grad_outputs]


def _bias_copies(layer: torch.nn.Module, gemm: Callable) -> tuple:
    """The biases a GroupedLinear's wgrad GEMM keeps until W that are not the layer's parameters: TE binds
    the biases as cast in F into that `functools.partial` (v2.11 grouped_linear.py:450-459, cast at 181),
    bf16 copies under FP8 with fp32 activations (178-180), the parameters themselves otherwise."""
    biases = getattr(gemm, "keywords", {}).get("bias") or ()
    params = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    return tuple(b for b in biases if isinstance(b, torch.Tensor) and b.numel()
                 and b.untyped_storage().data_ptr() not in params)


def _flatten(items) -> list:
    out = []
    for x in items:
        out.extend(_flatten(x) if isinstance(x, (list, tuple)) else [x])
    return out


def _held_tensors(tensor_list: list) -> tuple:
    """The tensors a put keeps alive until its W (for the memory accounting). Under FP8, TE hands
    `put` its quantized data: storages (`Float8TensorStorage`, ...: not torch.Tensor, TE v2.11
    `pytorch/tensor/storage/`) and, for GroupedLinear's inputs, `Float8Tensor`s (torch.Tensor wrapper
    subclasses with no storage of their own, grouped_linear.py:951-953); either keeps its buffers
    (data, transpose, scale-inverse: `quantized.buffers`), not a high-precision copy: the input's
    row-wise data was dropped in F (linear.py:398-399), the grad output keeps its row-wise data beside
    the transpose made for the wgrad GEMM (820, on a device whose FP8 GEMMs are TN only)."""
    return tuple(t for t in quantized.expanded(_flatten(tensor_list)) if isinstance(t, torch.Tensor))


def grouped_layers(module: torch.nn.Module) -> int:
    """How many of `module`'s routed layers are grouped experts (TE GroupedLinear)."""
    return sum(_is_grouped(m) and is_routed(m) for m in module.modules())


def is_routed(layer: torch.nn.Module) -> bool:
    return isinstance(getattr(layer, "wgrad_store", None), DeferringWgradStore)


def _route(layer: torch.nn.Module, name: str) -> None:
    overlaps = [flag for flag in UB_BACKWARD_OVERLAPS if getattr(layer, flag, False)]
    if overlaps:
        raise TESupportError(f"TransformerEngine layer {name or type(layer).__name__} overlaps its backward with "
                             f"userbuffers communication ({', '.join(overlaps)}, from --tp-comm-overlap), which "
                             f"cannot delay its weight gradient to W (TransformerEngine raises for bulk wgrad overlap "
                             f"and gathers into a shared buffer that later layers overwrite for the others): build it "
                             f"without --tp-comm-overlap, or use {NO_W}")
    stacked = grouped_layouts.problem(layer, name, split_class=True)
    if stacked:
        raise TESupportError(stacked)
    if not _is_grouped(layer) and len(layer.weight_names) != 1:
        raise ValueError(f"TransformerEngine layer {name or type(layer).__name__} splits its weight into "
                         f"{len(layer.weight_names)} parameters (parameters_split): its weight gradient cannot be "
                         f"deferred to W; build it without parameters_split or use a schedule without W "
                         f"(1f1b, interleaved-1f1b)")
    if not isinstance(getattr(layer, "wgrad_accumulation_and_reduce_hooks", None), list):
        # the feature check sees the registration method on the class; W reads the hooks off the layer
        # (v2.11 base.py:627 sets the list in the constructor)
        raise TESupportError(f"TransformerEngine layer {name or type(layer).__name__} has no "
                             f"wgrad_accumulation_and_reduce_hooks list (TransformerEngine 2.7's base module "
                             f"constructor makes one): its weight gradient cannot be deferred to W; upgrade "
                             f"TransformerEngine to {UPGRADE_TO} or newer, or use {NO_W}")
    old = layer.wgrad_store
    context = getattr(old, "context", None)
    if context is not None and hasattr(context, "qsize") and context.qsize():
        raise RuntimeError(f"TransformerEngine layer {name} holds {context.qsize()} weight gradients of its own "
                           f"delayed store: run its backward_dw() before routing it to primus_megatron")
    layer.wgrad_store = DeferringWgradStore(layer)
    deferred = set(_weight_names(layer)) | (set(_bias_names(layer)) if _bias_in_gemm(layer) else set())
    for pname in (*_weight_names(layer), *_bias_names(layer)):
        p = getattr(layer, pname, None)
        if isinstance(p, torch.nn.Parameter):
            # DDP hooks a marked parameter on the layer (run by our W) instead of on its accumulator
            p.skip_backward_post_hook = pname in deferred
            if pname in deferred and pname in _bias_names(layer) and not hasattr(p, "_primus_fp8_bias_hook"):
                p._primus_fp8_bias_hook = p.register_post_accumulate_grad_hook(_fp8_bias_into_main_grad(layer))


def _fp8_bias_into_main_grad(layer: torch.nn.Module) -> Callable:
    """Under FP8 TE computes the bias gradient in B, not in the deferred GEMM (v2.11 linear.py:861, bias
    fused only without FP8), and autograd adds it to the bias's .grad there. Its DDP hook sits on the layer
    and runs in W, so a second B before the first W would sum two microbatches in the bf16 .grad where
    megatron's own schedule adds each to the fp32 main_grad in its B: move it there now, as that hook does;
    W's layer hook then adds a zero placeholder and registers the bias ready (_run_layer_hooks)."""
    def hook(p: torch.Tensor) -> None:
        if getattr(layer, "fp8", False) and p.grad is not None and getattr(p, "main_grad", None) is not None \
                and not getattr(p, "grad_added_to_main_grad", False):
            p.main_grad.add_(p.grad.data)
            p.grad = None
    return hook


def _bias_in_gemm(layer: torch.nn.Module) -> bool:
    """Whether the layer's bias is added in its GEMM, so that its gradient comes with the weight's
    from the wgrad GEMM, in W (TE v2.11 linear.py 861, 1296-1302; layernorm_linear.py 876,
    1388-1393). A bias the layer returns (megatron's skip_bias_add) or adds after a row-parallel
    reduction gets its gradient from autograd in B: its DDP hook then stays on its accumulator and
    fires in B, as under megatron's own schedule. (TE's own delayed constructor marks every bias,
    linear.py 1305-1309; its grad-ready hook would then add several microbatches' .grad to
    main_grad at once, in another order than megatron's own schedule: not bit-identical in bf16.)"""
    return bool(getattr(layer, "apply_bias", False)) and not getattr(layer, "gemm_bias_unfused_add", False)


def _refuse_other(layer: torch.nn.Module, name: str, *, splitting: bool) -> None:
    """A TE module we do not split: refused when built with TE's own delay (nothing would run its
    backward_dw) and, in a step with W ops, when it is a grouped-expert layer of another layout (its
    weight gradients would stay in B: grouped_layouts)."""
    stacked = grouped_layouts.problem(layer, name, split_class=False) if splitting else None
    if stacked:
        raise TESupportError(stacked)
    store = getattr(layer, "wgrad_store", None)
    if store is not None and not isinstance(store, DeferringWgradStore) and store.delay_wgrad_compute():
        raise ValueError(f"TransformerEngine layer {name} ({type(layer).__name__}) was built with TE's own "
                         f"delay_wgrad_compute; primus_megatron splits only Linear, LayerNormLinear and GroupedLinear "
                         f"layers (nothing "
                         f"would run this one's backward_dw): build it without delay_wgrad_compute (its weight "
                         f"gradient is then computed in B)")


def enable(module: torch.nn.Module, *, what: Optional[str] = None) -> int:
    """Route the weight gradients of the TE Linear / LayerNormLinear / GroupedLinear layers in
    `module` to primus_megatron's store. Call on each model chunk of a schedule
    with W ops after it is built and before megatron's DistributedDataParallel
    wraps it, and build that with `DistributedDataParallelConfig(delay_wgrad_compute=True)`;
    a schedule without W ops needs none of this (its layers stay TE's own).
    Idempotent; returns how many layers are routed. No-op without TE.

    Raises TESupportError (one sentence, naming `what`, e.g. "--pipeline-schedule zbv")
    when the installed TE cannot defer weight gradients (missing API, debug mode)
    or a layer overlaps its backward with userbuffers."""
    classes = _te_classes()
    if classes is None:
        return 0
    base, split = classes
    count = 0
    checked = False
    for name, layer in module.named_modules():
        if not isinstance(layer, base):
            continue
        if isinstance(layer, split):
            if not is_routed(layer):
                if not checked:
                    _require_support(what)
                    checked = True
                _route(layer, name)
            count += 1
        else:
            _refuse_other(layer, name, splitting=True)
    return count


def _ddp_config(chunk: torch.nn.Module) -> Optional[Any]:
    while chunk is not None:
        config = getattr(chunk, "ddp_config", None)
        if config is not None:
            return config
        chunk = getattr(chunk, "module", None)
    return None


def _check_ddp(layer: torch.nn.Module, name: str, ddp_config: Any) -> None:
    if ddp_config is None or not _marked_params(layer):
        return
    if not getattr(ddp_config, "delay_wgrad_compute", False):
        raise ValueError(f"TransformerEngine layer {name} defers its weight gradient, but megatron's "
                         f"DistributedDataParallel was built with delay_wgrad_compute=False, so its grad-ready hook "
                         f"would fire in B, before the weight gradient exists: build "
                         f"DistributedDataParallelConfig(delay_wgrad_compute=True)")
    if not layer.wgrad_accumulation_and_reduce_hooks:
        raise ValueError(f"TransformerEngine layer {name} has no grad-ready hook from megatron's "
                         f"DistributedDataParallel: call primus_megatron.runtime.te_wgrad.enable(chunk) before "
                         f"wrapping the chunk in DistributedDataParallel")


def prepare_step(model: Sequence[torch.nn.Module], *, splitting: bool) -> int:
    """At the start of a step: make sure every TE layer can deliver its weight
    gradient where the schedule expects it, or say why not.

    With `splitting` (a training step of a schedule with W ops), splittable
    layers not yet routed are routed now when no megatron DDP wraps their
    chunk (a DDP-wrapped one must be routed before DDP is built). Layers
    built with TE's own delay are routed whatever the schedule. Returns how
    many layers are routed. No-op without TE."""
    classes = _te_classes()
    if classes is None:
        return 0
    base, split = classes
    count = 0
    checked = False
    for c, chunk in enumerate(model):
        ddp_config = _ddp_config(chunk)
        for name, layer in chunk.named_modules():
            if not isinstance(layer, base):
                continue
            where = f"{name} of model chunk {c}"
            if not isinstance(layer, split):
                _refuse_other(layer, where, splitting=splitting)
                continue
            if not is_routed(layer):
                store = getattr(layer, "wgrad_store", None)
                delayed_by_te = store is not None and store.delay_wgrad_compute()
                if not (splitting or delayed_by_te):
                    continue  # an ordinary undelayed layer in a step without W ops
                if not checked:
                    _require_support(None)
                    checked = True
                if ddp_config is not None and not delayed_by_te and _trainable_params(layer):
                    raise ValueError(f"TransformerEngine layer {where} cannot defer its weight gradient: its chunk "
                                     f"was wrapped in megatron's DistributedDataParallel before "
                                     f"primus_megatron.runtime.te_wgrad.enable(chunk) was called (call it first, "
                                     f"with DistributedDataParallelConfig(delay_wgrad_compute=True)), or use a "
                                     f"schedule without W (1f1b, interleaved-1f1b)")
                _route(layer, where)
            _check_ddp(layer, where, ddp_config)
            count += 1
    return count


def _trainable_params(layer: torch.nn.Module) -> bool:
    """Whether the layer has a trainable weight or bias (whose DDP hook routing would move)."""
    return any(isinstance(getattr(layer, n, None), torch.nn.Parameter) and getattr(layer, n).requires_grad
               for n in (*_weight_names(layer), *(_bias_names(layer) if layer.use_bias else ())))
