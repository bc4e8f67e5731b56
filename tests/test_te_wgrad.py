"""TransformerEngine layers with their weight gradients deferred to W ops
(primus_megatron.runtime.te_wgrad), on CPU against tests/te_standin: a
stand-in reproducing TE v2.11's WeightGradStore, Linear / LayerNormLinear
backward and base-module hooks (see its package docstring), including what TE does
differently under FP8 (the bias gradient in B, quantized storages handed to `put`, on the
stand-in's emulated FP8 device) and with tensor / sequence parallelism (two ranks: the
gathered input and grad_output kept until W, the input gradient reduce-scattered or
all-reduced in B).

The stand-in is importable as `transformer_engine` only inside the processes
these tests spawn, and only after megatron-core was imported there, so
megatron's own TE detection stays off (its TE wrappers would need far more of
TE than the weight-gradient API). Megatron's real DistributedDataParallel is
used, with its delayed-weight-gradient protocol (hooks on the layer).
"""
from __future__ import annotations

import contextlib
import copy
import os
import sys
import traceback
from functools import partial

import pytest
import torch

import expected_skips
import megatron_reference as ref

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")

STANDIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "te_standin")
RTOL, ATOL = 1e-5, 1e-7


def _load_standin():
    """transformer_engine.pytorch from the stand-in (in a spawned process only)."""
    if "transformer_engine" in sys.modules and not sys.modules["transformer_engine"].__file__.startswith(STANDIN):
        raise RuntimeError("SKIP: a real TransformerEngine is loaded in this interpreter (tests/test_gpu_te.py "
                           "covers it)")
    # megatron-core modules decide at import whether TE is there: import every one these tests use first
    import megatron.core.models.gpt.gpt_layer_specs  # noqa: F401
    import megatron.core.models.gpt.gpt_model  # noqa: F401
    import megatron.core.pipeline_parallel  # noqa: F401
    import primus_megatron.runtime.forward_backward  # noqa: F401

    if STANDIN not in sys.path:
        sys.path.insert(0, STANDIN)
    import transformer_engine.pytorch as te

    assert te.__file__.startswith(STANDIN)
    return te


def _run_spawned(body, case: dict, world: int = 1, timeout_s: float = 300.0):
    from primus_megatron.runtime import local_ranks

    per_rank = local_ranks.run_ranks(body, {"pp": world, **case}, world, timeout_s=timeout_s)
    for res in per_rank:
        if isinstance(res, dict) and str(res.get("skip", "")).startswith("SKIP"):
            pytest.skip(expected_skips.reason("real-te", res["skip"]))
    return per_rank


# -- a small network of TE layers --------------------------------------------------------------

class _Net(torch.nn.Module):
    """LayerNormLinear (bias added in the GEMM: its gradient comes with the weight's),
    Linear (same), row-parallel Linear returning its bias (added outside: gradient in B)."""

    def __init__(self, te, *, fuse: bool = False, delay: bool = False, dims=(8, 16, 8, 4)) -> None:
        super().__init__()
        kw = dict(fuse_wgrad_accumulation=fuse, delay_wgrad_compute=delay)
        d_in, d_a, d_b, d_c = dims
        self.a = te.LayerNormLinear(d_in, d_a, bias=True, **kw)
        self.b = te.Linear(d_a, d_b, bias=True, **kw)
        self.c = te.Linear(d_b, d_c, bias=True, return_bias=True, parallel_mode="row", **kw)
        with torch.no_grad():
            self.a.layer_norm_weight.add_(0.1 * torch.randn(d_in))
            self.a.layer_norm_bias.add_(0.1 * torch.randn(d_in))
            for layer in (self.a, self.b, self.c):
                layer.bias.add_(0.1 * torch.randn(layer.bias.shape))

    def forward(self, x):
        h = torch.nn.functional.gelu(self.a(x))
        out, bias = self.c(self.b(h))
        return out + bias


FP8_DIMS = (16, 32, 16, 16)  # FP8 GEMMs need 16-divisible features (TE utils.py 439-447)
DEFERRED = ["a.weight", "a.bias", "b.weight", "b.bias", "c.weight"]  # weights and GEMM-fused biases
IN_B = ["a.layer_norm_weight", "a.layer_norm_bias", "c.bias"]


def _loss(out: torch.Tensor) -> torch.Tensor:
    return (out.float() ** 2).mean()


def _inputs(n: int, seed: int = 0, shape=(3, 5, 8)) -> list:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=gen) for _ in range(n)]


def _reference_grads(net: torch.nn.Module, xs: list, fp8_te=None, keep: bool = False) -> dict:
    """Undelayed: plain autograd over the same microbatches (a copy of `net`, or `net` itself
    with `keep`). With `fp8_te`, FP8 as the deferred runs have it: every forward under one
    autocast, then the backwards in order (the same amax and scale updates at the same points)."""
    model = net if keep else copy.deepcopy(net)
    for p in model.parameters():
        p.grad = None
    with _fp8(fp8_te, fp8_te is not None, local=True):
        outs = [model(x) for x in xs]
    for out in outs:
        _loss(out).backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _close(actual, expected, what: str) -> None:
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL, msg=lambda m: f"{what}: {m}")


def _fresh_store():
    from primus_megatron.runtime.wgrad_store import get_store

    store = get_store()
    store.clear()
    store.reset_counters()
    return store


# -- scenarios (run in one spawned process) -----------------------------------------------------

def s_w_runs_exactly_its_b(te):
    from primus_megatron.runtime import te_wgrad

    torch.manual_seed(1)
    net = _Net(te)
    plain = copy.deepcopy(net)
    assert te_wgrad.enable(net) == 3 and te_wgrad.enable(net) == 3  # idempotent
    store = _fresh_store()
    xs = _inputs(2)
    outs = [net(x) for x in xs]
    for mb in (0, 1):
        with store.capture((mb, 0)):
            _loss(outs[mb]).backward()
        assert store.pending((mb, 0)) == 3, store.pending((mb, 0))
    params = dict(net.named_parameters())
    for name in DEFERRED:
        assert params[name].grad is None, f"{name} got a gradient in B"
    for name in IN_B:
        assert params[name].grad is not None, f"{name} has no gradient after B"
    store.run((1, 0))  # microbatch 1's W first: exactly microbatch 1's weight gradients
    only1 = _reference_grads(plain, xs[1:])
    for name in DEFERRED:
        _close(params[name].grad, only1[name], f"after W1, {name}")
    store.run((0, 0))
    store.assert_empty()
    assert store.deferred == store.ran == 6
    expected = _reference_grads(plain, xs)
    for name, p in params.items():
        _close(p.grad, expected[name], name)


def s_fused_main_grad(te):
    """fuse_wgrad_accumulation: the GEMM adds into main_grad in W; B already set
    grad_added_to_main_grad (TE does, in B) and nothing reached main_grad."""
    from primus_megatron.runtime import te_wgrad

    torch.manual_seed(2)
    net = _Net(te, fuse=True)
    plain = _Net(te)
    plain.load_state_dict(net.state_dict())
    for p in net.parameters():
        p.main_grad = torch.zeros_like(p, dtype=torch.float32)
        p.grad_added_to_main_grad = False
    te_wgrad.enable(net)
    store = _fresh_store()
    xs = _inputs(3, seed=1)
    outs = [net(x) for x in xs]
    for mb in range(3):
        with store.capture((mb, 0)):
            _loss(outs[mb]).backward()
    params = dict(net.named_parameters())
    for name in ("a.weight", "b.weight", "c.weight"):
        assert params[name].grad_added_to_main_grad is True
        assert torch.count_nonzero(params[name].main_grad) == 0, f"{name}.main_grad changed in B"
    for mb in (2, 0, 1):
        store.run((mb, 0))
    store.assert_empty()
    expected = _reference_grads(plain, xs)
    for name in ("a.weight", "b.weight", "c.weight"):
        _close(params[name].main_grad, expected[name], f"{name}.main_grad")
    for name in ("a.bias", "b.bias", *IN_B):
        _close(params[name].grad, expected[name], f"{name}.grad")


def _instrument_ddp(log: list, phase: list):
    """Record every grad-ready registration and reduce start of megatron's DDP, with the phase."""
    from megatron.core.distributed.param_and_grad_buffer import _ParamAndGradBucketGroup

    register, start = _ParamAndGradBucketGroup.register_grad_ready, _ParamAndGradBucketGroup.start_grad_sync

    def register_grad_ready(self, param, force_all_reduce=False):
        log.append(("ready", phase[0], param, self.is_last_microbatch))
        return register(self, param, force_all_reduce)

    def start_grad_sync(self, force_all_reduce=False):
        log.append(("reduce", phase[0], None, None))
        return start(self, force_all_reduce)

    _ParamAndGradBucketGroup.register_grad_ready = register_grad_ready
    _ParamAndGradBucketGroup.start_grad_sync = start_grad_sync
    return lambda: (setattr(_ParamAndGradBucketGroup, "register_grad_ready", register),
                    setattr(_ParamAndGradBucketGroup, "start_grad_sync", start))


def _ddp(net, *, fuse: bool, delay_config: bool = True):
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    config = ref.tiny_gpt_config(1, gradient_accumulation_fusion=fuse)
    ddp_config = DistributedDataParallelConfig(overlap_grad_reduce=True, delay_wgrad_compute=delay_config,
                                               grad_reduce_in_fp32=True, use_distributed_optimizer=False)
    return DistributedDataParallel(config, ddp_config, net)


def _ddp_steps(te, fuse: bool, fp8: bool = False):
    """Two training steps of B0 B1 W0 W1 (W after a later B, as zero-bubble schedules run
    them) under megatron's DDP with overlapped reduce; sync only during the last B and
    the last W, as the executor's GradSync opens it. With `fp8` (the stand-in's emulated FP8
    device) TE computes the GEMM biases' gradients in B, yet DDP's hook for them sits on the
    layer and fires in W: B0 and B1 fill .grad, W0's hook moves it and W1's finds it empty."""
    from primus_megatron.runtime import te_wgrad

    if fp8:
        _fp8_alone()
    torch.manual_seed(3)
    dims = FP8_DIMS if fp8 else (8, 16, 8, 4)
    net = _Net(te, fuse=fuse, dims=dims)
    plain = _Net(te, dims=dims)
    plain.load_state_dict(net.state_dict())
    assert te_wgrad.enable(net) == 3  # before DDP: DDP then hooks the layers, not the parameters
    ddp = _ddp(net, fuse=fuse)
    te_wgrad.prepare_step([ddp], splitting=True)
    # one DDP hook on the layer per weight and per bias added in the GEMM; c returns its bias (its
    # gradient comes in B): that hook stays on the bias's accumulator, as under megatron's own schedule
    assert [len(layer.wgrad_accumulation_and_reduce_hooks) for layer in (net.a, net.b, net.c)] == [2, 2, 1]
    log, phase = [], [""]
    restore = _instrument_ddp(log, phase)
    store = _fresh_store()
    names = {id(p): n for n, p in net.named_parameters()}
    alive = _live_storages()
    try:
        for step, seed in enumerate((5, 6)):
            ddp.zero_grad_buffer()
            store.clear()
            del log[:]
            xs = _inputs(2, seed=seed, shape=(2, 8, 16) if fp8 else (3, 5, 8))
            with _fp8(te, fp8, local=True):
                outs = [ddp(x) for x in xs]
            for label, run in (("B0", lambda: _b(store, outs, 0)), ("B1", lambda: _b(store, outs, 1)),
                               ("W0", lambda: store.run((0, 0))), ("W1", lambda: store.run((1, 0)))):
                phase[0] = label
                if label in ("B0", "W0"):
                    with ddp.no_sync():
                        run()
                else:
                    run()
            phase[0] = "finish"
            ddp.finish_grad_sync()
            store.assert_empty()
            # under FP8 the same reference layers every step: their scales evolve as net's do (rank 0 alone)
            expected = _reference_grads(plain, xs, te if fp8 else None, keep=fp8)
            for name, p in net.named_parameters():
                _close(p.main_grad, expected[name], f"step {step}: {name}.main_grad")
            for name in DEFERRED + ["c.bias"]:  # the hooks moved .grad into main_grad
                p = dict(net.named_parameters())[name]
                assert p.grad is None or (fuse and name.endswith("weight")), f"{name}.grad left: {p.grad}"
            ready = [(ph, names[id(p)], last) for kind, ph, p, last in log if kind == "ready"]
            for name in DEFERRED:
                phases = [ph for ph, n, _ in ready if n == name]
                assert phases == ["W0", "W1"], f"step {step}: {name} registered in {phases}, expected once per W"
            for name in IN_B:
                phases = [ph for ph, n, _ in ready if n == name]
                assert phases == ["B0", "B1"], f"step {step}: {name} registered in {phases}"
            counted = [(ph, n) for ph, n, last in ready if last]
            assert sorted(n for _, n in counted) == sorted(names.values()), counted  # each once, while in sync
            reduces = [ph for kind, ph, _, _ in log if kind == "reduce"]
            # step 0 records the counts and reduces at finish; step 1 reduces as the last W ends
            assert reduces == (["finish"] if step == 0 else ["W1"]), f"step {step}: reduce started in {reduces}"
        # W1 found .grad emptied by W0's DDP hook and gave the hook a placeholder: nothing of it stays
        # (TE's own dummy, get_dummy_wgrad, which B hands autograd when fused, is TE's cache: base.py 79-92)
        from transformer_engine.pytorch.module.base import _dummy_wgrads

        del outs, xs, expected
        for p in plain.parameters():  # the FP8 reference's own gradients (it is kept across steps)
            p.grad = None
        te_own = {t.untyped_storage().data_ptr() for t in _dummy_wgrads.values()}
        # nor the FP8 layers' own scaling state (TE keeps a scale and an amax history per module
        # once an FP8 forward ran: quantization.py DelayedScalingRecipeState)
        te_own |= {t.untyped_storage().data_ptr() for model in (net, plain) for layer in model.modules()
                   for state in getattr(layer, "fp8_meta", {}).values() if hasattr(state, "amax_history")
                   for t in (state.amax_history, state.scale)}
        # weight-sized, as a dummy-gradient cache would be
        smallest = min(p.untyped_storage().nbytes() for p in net.parameters() if p.dim() == 2)
        kept = {ptr: n for ptr, n in _live_storages().items()
                if ptr not in alive and ptr not in te_own and n >= smallest}
        assert not kept, f"step-created weight-sized tensors still alive (a cache?): {kept}"
    finally:
        restore()


def _live_storages() -> dict:
    """data_ptr -> bytes of every CPU tensor storage alive now (gc)."""
    import gc

    gc.collect()
    out = {}
    for obj in gc.get_objects():
        if torch.is_tensor(obj) and obj.device.type == "cpu" and obj.untyped_storage().data_ptr():
            out[obj.untyped_storage().data_ptr()] = obj.untyped_storage().nbytes()
    return out


def _b(store, outs, mb):
    with store.capture((mb, 0)):
        _loss(outs[mb]).backward()


def s_ddp_hooks_once_per_w(te):
    _ddp_steps(te, fuse=False)


def s_ddp_hooks_once_per_w_fused(te):
    _ddp_steps(te, fuse=True)


# -- what TE does differently under FP8, on the stand-in's emulated FP8 device ---------------------

@contextlib.contextmanager
def _fp8(te, enabled: bool = True, local: bool = False):
    """Forwards under TE's fp8_autocast (delayed scaling, TE's default recipe on a Hopper) on the
    stand-in's emulated FP8 device (real float8 casts: tests/te_standin/transformer_engine/pytorch/
    quantization.py). `local`: a scenario rank 0 runs alone in its world of two keeps its amaxes
    (reduce_amax=False; TE would all-reduce them across the world at autocast exit and in B)."""
    if not enabled:
        yield
        return
    from transformer_engine.common.recipe import DelayedScaling
    from transformer_engine.pytorch.quantization import emulate_fp8_device

    with emulate_fp8_device(), te.fp8_autocast(enabled=True, fp8_recipe=DelayedScaling(reduce_amax=not local)):
        yield


def _fp8_alone() -> None:
    """Before a scenario rank 0 runs alone: forget the FP8 modules of the two-rank scenarios run
    before (TE keeps every delayed-scaling module in global amax buffers, updated at every
    autocast exit: theirs would be all-reduced across the world)."""
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager

    FP8GlobalStateManager.reset()


def _recording_puts():
    """Record what TE's backwards hand the routed stores' put (the tensor lists)."""
    from primus_megatron.runtime import te_wgrad

    handed, put = [], te_wgrad.DeferringWgradStore.put

    def recording(self, tensor_list, func):
        handed.append(list(tensor_list))
        return put(self, tensor_list, func)

    te_wgrad.DeferringWgradStore.put = recording
    return handed, lambda: setattr(te_wgrad.DeferringWgradStore, "put", put)


def _buffers(item) -> list:
    """An item handed to put as the tensors it keeps: a quantized tensor's (or storage's) data, transpose and
    scale-inverse (TE v2.11 float8_tensor_storage.py:107-123, what it saves for backward), or itself."""
    if hasattr(item, "get_metadata"):
        return [t for t in item.get_metadata().values() if isinstance(t, torch.Tensor)]
    return [item]


def _storage_bytes(tensors) -> int:
    seen = {}
    for t in tensors:
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def _routed_fp8_forwards(te, net, *, seed: int, shape) -> tuple:
    """(an undelayed copy of `net`, the fresh store, two inputs, their outputs): `net` routed to our W ops
    and run forward under FP8 by rank 0 alone."""
    from primus_megatron.runtime import te_wgrad

    _fp8_alone()
    plain = copy.deepcopy(net)
    te_wgrad.enable(net)
    store = _fresh_store()
    xs = _inputs(2, seed=seed, shape=shape)
    with _fp8(te, local=True):
        outs = [net(x) for x in xs]
    return plain, store, xs, outs


def _backwards_in_b(store, outs):
    """Each microbatch's backward inside its B capture; yields (what the capture counts as held until W,
    the tensor lists TE handed put) per microbatch."""
    handed, restore = _recording_puts()
    try:
        for mb, out in enumerate(outs):
            held = []
            with store.capture((mb, 0), held=held):
                _loss(out).backward()
            yield held, list(handed)
            del handed[:]
    finally:
        restore()


def s_fp8_bias_gradient_in_b_and_quantized_puts(te):
    """Under FP8, TE computes a GEMM bias's gradient in B (base.py grad_output_preprocess, TE
    v2.11 lines 1099-1195) and its wgrad closure returns no bias gradient (linear.py 867); the
    input and grad_output it hands put are Float8TensorStorage objects (not torch.Tensor). Our W
    must add only the weight gradient (each bias counted once), and our held-memory accounting
    must count the storages' buffers."""
    torch.manual_seed(6)
    net = _Net(te, dims=FP8_DIMS)
    plain, store, xs, outs = _routed_fp8_forwards(te, net, seed=7, shape=(2, 8, 16))
    assert all(layer.fp8 for layer in (net.a, net.b, net.c))
    for held, handed in _backwards_in_b(store, outs):
        items = [item for tensor_list in handed for item in tensor_list]
        assert items and not any(isinstance(item, torch.Tensor) for item in items), \
            [type(item).__name__ for item in items]
        kept = [t for item in items for t in _buffers(item)]
        assert _storage_bytes(held) == _storage_bytes(kept) > 0, (_storage_bytes(held), _storage_bytes(kept))
    params = dict(net.named_parameters())
    for name in ("a.bias", "b.bias", *IN_B):
        assert params[name].grad is not None, f"{name}: no gradient in B under FP8"
    for name in ("a.weight", "b.weight", "c.weight"):
        assert params[name].grad is None, f"{name} got a gradient in B"
    store.run((1, 0))
    store.run((0, 0))
    store.assert_empty()
    expected = _reference_grads(plain, xs, te)  # FP8 undelayed: the same quantization, so bitwise
    for name, p in params.items():
        assert torch.equal(p.grad, expected[name]), name


def s_fp8_ddp_hooks_once_per_w(te):
    _ddp_steps(te, fuse=True, fp8=True)


def s_debug_mode_refuses_routed_layers(te):
    """TE's debug mode (nvdlfw_inspect) refuses a layer with delayed weight gradients in its forward
    (TE v2.11 base.py is_debug_iter, lines 1533-1535): a layer routed to our W ops says so in its
    first forward, which is why schedules with W ops must refuse debug mode before any rank starts."""
    from transformer_engine.debug.pytorch.debug_state import TEDebugState

    from primus_megatron.runtime import te_wgrad

    net = _Net(te)
    te_wgrad.enable(net)
    TEDebugState.debug_enabled = True
    try:
        _raises(RuntimeError, "Delayed wgrad compute is not supported in debug mode.", lambda: net(_inputs(1)[0]))
    finally:
        TEDebugState.debug_enabled = None
    net(_inputs(1)[0])  # debug mode off: the routed layers run


def s_backward_outside_b_runs_when_it_ends(te):
    """BW ops and megatron's own schedules: no capture; the work runs as that backward ends."""
    from primus_megatron.runtime import te_wgrad

    torch.manual_seed(4)
    net = _Net(te)
    plain = copy.deepcopy(net)
    te_wgrad.enable(net)
    store = _fresh_store()
    xs = _inputs(2, seed=2)
    for x in xs:
        _loss(net(x)).backward()
        assert store.deferred == 0
    expected = _reference_grads(plain, xs)
    for name, p in net.named_parameters():
        _close(p.grad, expected[name], name)
    # same under DDP: each hook fires once per backward
    net2 = _Net(te)
    net2.load_state_dict(plain.state_dict())
    te_wgrad.enable(net2)
    ddp = _ddp(net2, fuse=False)
    log, phase = [], ["BW"]
    restore = _instrument_ddp(log, phase)
    try:
        ddp.zero_grad_buffer()
        with ddp.no_sync():
            _loss(ddp(xs[0])).backward()
        _loss(ddp(xs[1])).backward()
        ddp.finish_grad_sync()
    finally:
        restore()
    for name, p in net2.named_parameters():
        _close(p.main_grad, expected[name], f"DDP {name}.main_grad")
    per_param = {}
    for kind, _, p, _ in log:
        if kind == "ready":
            per_param[id(p)] = per_param.get(id(p), 0) + 1
    assert sorted(per_param.values()) == [2] * len(list(net2.parameters())), per_param


def s_nothing_crosses_steps(te):
    """A step that failed after its B (W never ran): emptying the store drops that work;
    the next step delivers only its own gradients."""
    from primus_megatron.runtime import te_wgrad

    torch.manual_seed(5)
    net = _Net(te)
    plain = copy.deepcopy(net)
    te_wgrad.enable(net)
    store = _fresh_store()
    failed = _inputs(1, seed=3)
    with store.capture((0, 0)):
        _loss(net(failed[0])).backward()
    assert store.pending((0, 0)) == 3
    store.clear()  # what run_step does when a step raises, and at every step start
    for p in net.parameters():
        p.grad = None
    xs = _inputs(1, seed=4)
    with store.capture((0, 0)):
        _loss(net(xs[0])).backward()
    store.run((0, 0))
    store.assert_empty()
    expected = _reference_grads(plain, xs)
    for name, p in net.named_parameters():
        _close(p.grad, expected[name], name)


def s_refusals(te):
    from primus_megatron.runtime import te_wgrad

    # GroupedLinear built with TE's own delay is routed whatever the schedule, as Linear is (below)
    delayed = torch.nn.Sequential(te.GroupedLinear(2, 4, 4, delay_wgrad_compute=True))
    assert te_wgrad.prepare_step([delayed], splitting=False) == 1 and te_wgrad.is_routed(delayed[0])
    # a layer built with TE's own delay is routed whatever the schedule (its parameters are marked already)
    own = torch.nn.Sequential(te.Linear(4, 4, delay_wgrad_compute=True))
    assert own[0].weight.skip_backward_post_hook is True
    assert te_wgrad.prepare_step([own], splitting=False) == 1 and te_wgrad.is_routed(own[0])
    # an undelayed layer is left alone in a step without W ops
    plain = torch.nn.Sequential(te.Linear(4, 4))
    assert te_wgrad.prepare_step([plain], splitting=False) == 0 and not te_wgrad.is_routed(plain[0])
    assert te_wgrad.prepare_step([plain], splitting=True) == 1 and te_wgrad.is_routed(plain[0])
    # TE's backward_dw on a routed layer: nothing to pop, said clearly
    _raises(RuntimeError, "W ops", plain[0].backward_dw)
    # megatron DDP built without delay_wgrad_compute: its per-parameter hooks would fire in B
    net = _Net(te)
    te_wgrad.enable(net)
    ddp = _ddp(net, fuse=False, delay_config=False)
    _raises(ValueError, "delay_wgrad_compute=True", lambda: te_wgrad.prepare_step([ddp], splitting=True))
    # DDP built before the layers were routed
    net = _Net(te)
    ddp = _ddp(net, fuse=False)
    _raises(ValueError, "before", lambda: te_wgrad.prepare_step([ddp], splitting=True))
    # ... which a step without W ops does not need
    assert te_wgrad.prepare_step([ddp], splitting=False) == 0


class _OlderTE:
    """The stand-in made into an older TransformerEngine for the duration of a `with`, by
    taking away what that release lacks (the stand-in's package stays as it is):

    * "2.6": no `register_wgrad_accumulation_and_reduce_hooks` / `wgrad_accumulation_and_reduce_hooks`
      on the base module (TE v2.7 base.py:608 and 1410 added them; v2.6 base.py has neither);
    * "1.x": also no `WeightGradStore` (v2.3 _common.py:222 added it), no `delay_wgrad_compute`
      constructor argument (v2.3 linear.py:906, layernorm_linear.py:1045) and no `wgrad_store` on
      a layer (v2.3 base.py); ROCm's TransformerEngine 1.11 (branch ifu_release_v1.11) is such a build.
    """

    def __init__(self, te, release: str) -> None:
        self.te, self.release, self.undo = te, release, []

    def _set(self, obj, name, value) -> None:
        had = name in vars(obj)
        old = vars(obj).get(name)
        self.undo.append(lambda: setattr(obj, name, old) if had else delattr(obj, name))
        if value is _DELETE:
            delattr(obj, name)
        else:
            setattr(obj, name, value)

    def __enter__(self):
        from transformer_engine.pytorch.module import _common, base

        cls = base.TransformerEngineBaseModule
        self._set(cls, "register_wgrad_accumulation_and_reduce_hooks", _DELETE)
        init = cls.__init__

        def base_init(module, *a, **kw):
            init(module, *a, **kw)
            del module.wgrad_accumulation_and_reduce_hooks

        self._set(cls, "__init__", base_init)
        if self.release == "1.x":
            self._set(_common, "WeightGradStore", _DELETE)
            for name in ("Linear", "LayerNormLinear"):
                new = getattr(self.te, name)

                class Old(new):  # a constructor without delay_wgrad_compute, a layer without wgrad_store
                    def __init__(self, in_features, out_features, bias=True, **kw):
                        super().__init__(in_features, out_features, bias, **kw)
                        del self.wgrad_store

                    def forward(self, *args, **kwargs):  # the stand-in's forward hands autograd no store
                        object.__setattr__(self, "wgrad_store", None)
                        try:
                            return super().forward(*args, **kwargs)
                        finally:
                            object.__delattr__(self, "wgrad_store")

                Old.__name__ = name
                self._set(self.te, name, Old)
        return self

    def __exit__(self, *exc) -> None:
        for undo in reversed(self.undo):
            undo()


_DELETE = object()


def s_capability_older_te(te):
    """A TE that cannot defer weight gradients is refused in one sentence naming what to upgrade
    and which schedules run without it, when a schedule with W ops routes its layers; a schedule
    without W ops (build_model with 1f1b, steps that do not split) never touches TE's store
    and trains on it exactly."""
    import primus_megatron as pm
    from primus_megatron.runtime import te_wgrad

    for release, lacks in (("2.6", "register_wgrad_accumulation_and_reduce_hooks (TransformerEngine 2.7"),
                           ("1.x", "WeightGradStore (TransformerEngine 2.3")):
        with _OlderTE(te, release):
            net = torch.nn.Sequential(te.Linear(8, 8), te.LayerNormLinear(8, 4))
            assert not hasattr(net[0], "wgrad_accumulation_and_reduce_hooks")
            assert (release == "1.x") != hasattr(net[0], "wgrad_store")
            problem = te_wgrad.support_problem("pipeline schedule 'zbv'")
            for needle in ("cannot defer weight gradients to the W ops of pipeline schedule 'zbv'", lacks,
                           "upgrade TransformerEngine to 2.7 or newer",
                           "or use a schedule without W (1f1b, interleaved-1f1b), which runs on any TransformerEngine"):
                assert needle in problem, (needle, problem)
            assert "\n" not in problem
            _raises(te_wgrad.TESupportError, lacks, lambda: te_wgrad.enable(net, what="pipeline schedule 'zbv'"))
            _raises(te_wgrad.TESupportError, lacks, lambda: te_wgrad.prepare_step([net], splitting=True))
            assert not any(te_wgrad.is_routed(m) for m in net.modules())
            # without W ops: build_model leaves the layers alone, steps never route them, plain autograd trains
            built = pm.build_model(lambda pre_process, post_process, vp_stage: copy.deepcopy(net), schedule="1f1b",
                                   pp=2, rank=0)
            assert te_wgrad.prepare_step(built, splitting=False) == 0
            assert not any(te_wgrad.is_routed(m) for m in built[0].modules())
            _raises(te_wgrad.TESupportError, lacks,
                    lambda: pm.build_model(lambda pre_process, post_process, vp_stage: copy.deepcopy(net),
                                           schedule="zb-h1", pp=2, rank=0))
            xs = _inputs(2, seed=7)
            expected = _reference_grads(built[0], xs)
            for x in xs:
                _loss(built[0](x)).backward()
            for name, p in built[0].named_parameters():
                _close(p.grad, expected[name], f"TE {release}, no W: {name}")
    assert te_wgrad.support_problem("pipeline schedule 'zbv'") is None  # the stand-in itself: TE 2.11


def s_debug_mode_and_userbuffers_refused(te):
    """TE's debug mode raises for a delayed layer's every forward (v2.11 base.py:1533-1535,
    "Delayed wgrad compute is not supported in debug mode"; TEDebugState.debug_enabled is set at
    the first module's construction, debug/pytorch/debug_state.py:20-40): refused when routing.
    A layer overlapping its backward with userbuffers (v2.11 linear.py:1147-1158 / 1164 set
    ub_bulk_dgrad, ub_bulk_wgrad and ub_overlap_ag_dgrad on the module) is refused by name:
    TE raises for bulk wgrad with a delayed GEMM (linear.py:889-898) and puts userbuffers
    views for the others (linear.py:659-665)."""
    import types

    from primus_megatron.runtime import te_wgrad

    name = "transformer_engine.debug.pytorch.debug_state"
    state = sys.modules.get(name)  # real TE has it (base.py imports TEDebugState); the stand-in does not
    if state is None:
        state = types.ModuleType(name)
        state.TEDebugState = type("TEDebugState", (), {"debug_enabled": None})
    real, before = sys.modules.get(name), state.TEDebugState.debug_enabled
    sys.modules[name] = state
    try:
        net = torch.nn.Sequential(te.Linear(4, 4))
        state.TEDebugState.debug_enabled = True  # what TEDebugState.initialize() sets (debug_state.py:40)
        _raises(te_wgrad.TESupportError, "debug mode", lambda: te_wgrad.enable(net))
        assert not te_wgrad.is_routed(net[0])
        state.TEDebugState.debug_enabled = None  # debug_state.py:48 (_reset): off
        assert te_wgrad.enable(net) == 1
    finally:
        state.TEDebugState.debug_enabled = before
        if real is None:
            del sys.modules[name]
    for flag in ("ub_bulk_wgrad", "ub_bulk_dgrad", "ub_overlap_ag_dgrad"):
        net = torch.nn.Sequential(te.Linear(4, 4), te.LayerNormLinear(4, 4))
        setattr(net[1], flag, True)
        _raises(te_wgrad.TESupportError,
                f"TransformerEngine layer 1 overlaps its backward with userbuffers communication ({flag},",
                lambda: te_wgrad.enable(net))
        setattr(net[1], flag, False)
        assert te_wgrad.enable(net) == 2


def s_held_until_w_is_counted(te):
    """What the planner's measured memory counts as held from B to W (capture's `held`, read by the
    runtime profiler) is every tensor TE hands `put`: under sequence parallelism that is the
    all-gathered input (v2.11 linear.py:649-672 gathers `inputmat_total`, 899 puts it; the
    stand-in has no tensor parallelism, so here it is the input itself) and the grad_output
    (gathered for row-parallel layers, base.py grad_output_preprocess)."""
    from primus_megatron.runtime import te_wgrad

    net = _Net(te)
    te_wgrad.enable(net)
    store = _fresh_store()
    put = []
    for layer in (net.a, net.b, net.c):
        routed_put = layer.wgrad_store.put

        def spy(tensor_list, func, routed_put=routed_put):
            put.extend(t for t in tensor_list if torch.is_tensor(t))
            routed_put(tensor_list, func)

        layer.wgrad_store.put = spy
    kept: list = []
    out = net(_inputs(1)[0])
    with store.capture((0, 0), held=kept):
        _loss(out).backward()
    held = {t.untyped_storage().data_ptr() for t in kept}
    assert len(put) == 6 and all(t.untyped_storage().data_ptr() in held for t in put)
    store.run((0, 0))


def s_grouped_held_until_w_is_counted(te):
    """Grouped experts (issue 38): what the measured memory counts as held from B to W is each
    layer's per-expert inputs (views of the permuted tokens) and grad outputs, and not the weight-sized
    outputs TE allocated in B (emptied: W allocates them), nor, fused, the main_grad buffers."""
    from primus_megatron.runtime import te_wgrad

    for fuse in (False, True):
        torch.manual_seed(3)
        net = _Experts(te, fuse=fuse)
        if fuse:
            for p in net.parameters():
                p.main_grad = torch.zeros_like(p, dtype=torch.float32)
                p.grad_added_to_main_grad = False
        te_wgrad.enable(net)
        store = _fresh_store()
        handed = []
        for layer in (net.fc1, net.fc2):
            routed_put = layer.wgrad_store.put

            def spy(tensor_list, func, routed_put=routed_put):
                handed.append([list(part) for part in tensor_list])
                routed_put(tensor_list, func)

            layer.wgrad_store.put = spy
        kept: list = []
        out = net(_inputs(1)[0])
        with store.capture((0, 0), held=kept):
            _loss(out).backward()
        held = {t.untyped_storage().data_ptr() for t in kept}
        assert len(handed) == 2
        for inputs, grad_outputs, outputs in handed:
            assert all(t.untyped_storage().data_ptr() in held for t in inputs + grad_outputs)
            assert not any(o.untyped_storage().data_ptr() in held for o in outputs)  # weight-sized: not held
        store.run((0, 0))
        assert not torch.isnan(net.fc1.weight0.main_grad if fuse else net.fc1.weight0.grad).any()


def s_grouped_held_bytes_are_what_the_allocator_frees_in_w(te):
    """Issue 38, the memory the planner plans with: the bytes counted as held from B to W (the
    profiler's `held` storages) are what the allocator frees when the W runs (fused into
    preallocated main_grad, so the W allocates nothing that stays but fc1's bias gradients): the experts'
    inputs and grad outputs of fc1 and fc2, measured from the allocator's events (runtime/resident.py)."""
    from primus_megatron.runtime import te_wgrad
    from primus_megatron.runtime.resident import ResidentMemory

    torch.manual_seed(4)
    net = _Experts(te, fuse=True)
    for p in net.parameters():
        p.main_grad = torch.zeros_like(p, dtype=torch.float32)
        p.grad_added_to_main_grad = False
    te_wgrad.enable(net)
    store = _fresh_store()
    kept: list = []
    with ResidentMemory() as memory:
        x = _inputs(1, seed=9)[0] * 1.0  # the experts' input made in the step, as megatron's permuted tokens
        out = net(x)
        del x
        with store.capture((0, 0), held=kept):
            _loss(out).backward()
        del out
        t_b = _allocator_mark()
        counted = sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in kept}.values())
        del kept
        empty = [p for p in net.parameters() if p.grad is None]
        store.run((0, 0))
        t_w = _allocator_mark()
    grown = sum(p.grad.untyped_storage().nbytes() for p in empty if p.grad is not None)  # fc1's bias .grad, made in W
    freed = memory.at(t_b) - memory.at(t_w)
    assert counted > 0 and grown > 0 and freed == counted - grown, (counted, grown, freed)


def _allocator_mark() -> float:
    """A host-clock instant clear of the allocations on either side (the profiler's clock is mapped)."""
    import time

    time.sleep(0.01)
    t = time.perf_counter()
    time.sleep(0.01)
    return t


# Issue 54 item 4: the layers and recipes whose FP8 memory the scenario below checks
FP8_MEMORY_CASES = [(layer, recipe) for layer in ("Linear", "LayerNormLinear") for recipe in ("delayed", "tensorwise")]
FP8_MEMORY_CASES.append(("GroupedLinear", "delayed"))
FP8_SPLITS, FP8_K, FP8_N = [16, 0, 32], 16, 32  # a grouped layer's rows per expert (FP8: multiples of 16), features


def _fp8_held_bytes_by_te(layer: str) -> int:
    """What TE v2.11 keeps from B to W under FP8 on a device whose FP8 GEMMs are TN only (Hopper), one byte an
    FP8 element, for M rows of K input and N output features: the input's column-wise data (its row-wise data
    dropped in F: linear.py:398-399, layernorm_linear.py:430), the grad output's row-wise data and its transpose
    (quantized for both GEMMs, linear.py:577-579, the row-wise kept when the transpose is made for the wgrad
    GEMM, 820 / layernorm_linear.py:835), a 4-byte fp32 scale-inverse each (csrc/quantizer.cpp:116, 348-353);
    GroupedLinear the same per expert, an expert given no rows too (its two scale-inverses), and its wgrad
    GEMM's bf16 copies of the fp32 biases (grouped_linear.py:178-181, 450-459)."""
    rows = FP8_SPLITS if layer == "GroupedLinear" else [sum(FP8_SPLITS)]
    held = sum(m * FP8_K + 2 * m * FP8_N + 2 * 4 for m in rows)
    return held + (len(rows) * FP8_N * 2 if layer == "GroupedLinear" else 0)


def _fp8_memory_case(te, layer: str, recipe: str) -> dict:
    """One FP8 layer (fused into main_grad, weights cached with is_first_microbatch, as megatron's), two
    microbatches F B W each: the second one's B and W as the runtime profiler counts them (OpMemory, the
    executor's) and as the allocator changes (runtime/resident.py), and the bytes counted as held from B to W."""
    from transformer_engine.common.recipe import DelayedScaling, Float8CurrentScaling
    from transformer_engine.pytorch.quantization import emulate_fp8_device

    from primus_megatron.runtime import te_wgrad
    from primus_megatron.runtime.profiler import OpMemory
    from primus_megatron.runtime.resident import ResidentMemory
    
    _fp8_alone()
    torch.manual_seed(11)
    module = (te.GroupedLinear(len(FP8_SPLITS), FP8_K, FP8_N, fuse_wgrad_accumulation=True)
              if layer == "GroupedLinear" else getattr(te, layer)(FP8_K, FP8_N, fuse_wgrad_accumulation=True))
    for p in module.parameters():
        p.main_grad = torch.zeros_like(p, dtype=torch.float32)  # W allocates nothing: what it frees is what B kept
        p.grad_added_to_main_grad = False
    te_wgrad.enable(module)
    store = _fresh_store()
    memory = OpMemory(torch.device("cpu"), params=list(module.parameters()),
                      chunks=[module])
    fp8_recipe = DelayedScaling(reduce_amax=False) if recipe == "delayed" else Float8CurrentScaling()
    x0 = _inputs(1, seed=12, shape=(sum(FP8_SPLITS), FP8_K))[0]
    args = (FP8_SPLITS,) if layer == "GroupedLinear" else ()
    with ResidentMemory() as resident:
        for mb in (0, 1):  # the first warms up: the cached FP8 weights, the recipe's state, the .grad of the norm
            x = x0 * 1.0  # made in the step and dropped after F, as a received activation: only what TE saved stays
            with emulate_fp8_device(), te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
                out = module(x, *args, is_first_microbatch=mb == 0)
            del x
            memory.forward_done((mb, 0), out)
            mark = _allocator_mark if mb else float  # the second microbatch is measured
            t_f, held = mark(), []
            with store.capture((mb, 0), held=held):
                _loss(out).backward()
            t_b = mark()
            counted = {"b": memory.backward((mb, 0), held, full=False), "held": _storage_bytes(held)}
            del held
            store.run((mb, 0))
            t_w = mark()
            counted["w"] = memory.weight((mb, 0))
            del out
    return {"counted": counted, "allocator": {"b": resident.at(t_b) - resident.at(t_f),
                                              "w": resident.at(t_w) - resident.at(t_b)}}


def s_fp8_held_bytes_are_what_the_allocator_frees_in_w(te):
    """Issue 54 item 4, the memory the planner plans with under FP8: what B keeps for W (the quantized
    column-wise input and grad output, not their high-precision tensors) is counted as held, is what the
    allocator frees when W runs, and is what TE keeps (`_fp8_held_bytes_by_te`); the profiler's B (what
    it took as F's activations, less what W keeps) is the allocator's B. Fails if the accounting counts the
    input or grad output in fp32, misses a quantized buffer (a scale-inverse, a Float8Tensor GroupedLinear
    saves as itself) or counts the cached FP8 weights, which outlive the microbatch, as its activations."""
    for layer, recipe in FP8_MEMORY_CASES:
        case = _fp8_memory_case(te, layer, recipe)
        counted, allocator = case["counted"], case["allocator"]
        expected = _fp8_held_bytes_by_te(layer)
        assert counted["held"] == -counted["w"] == -allocator["w"] == expected, (layer, recipe, case, expected)
        assert counted["b"] == allocator["b"], (layer, recipe, case)


def s_a_layer_without_the_hooks_list_is_refused(te):
    """Issue 45 item 13: the feature check looks for the hook-registration method on TE's base class,
    W reads the hooks list off each layer; a layer without it is refused in one sentence."""
    from primus_megatron.runtime import te_wgrad

    layer = te.Linear(4, 4)
    del layer.wgrad_accumulation_and_reduce_hooks
    _raises(te_wgrad.TESupportError, "wgrad_accumulation_and_reduce_hooks", lambda: te_wgrad.enable(layer))
    assert not te_wgrad.is_routed(layer)


def s_hipblaslt_missing_kernel_in_w_is_named(te):
    """Issue 45 item 9: hipBLASLt's "Unable to find any suitable algorithms" for a fused bias-gradient
    weight-gradient GEMM (ROCm/TransformerEngine#634) surfaces in W under our schedules: the error names
    the layer, the cause and the ways round it; other GEMM errors pass unchanged."""
    from primus_megatron.runtime import te_wgrad

    for message, named in (("hipblaslt: Unable to find any suitable algorithms", True), ("other", False)):
        net = _Net(te)
        te_wgrad.enable(net)
        store = _fresh_store()
        with store.capture((0, 0)):
            _loss(net(_inputs(1)[0])).backward()

        def failing(*args, message=message, **kwargs):
            raise RuntimeError(message)

        queue = store._queues[(0, 0)]
        work = queue[0][0]
        work.gemm = failing
        try:
            store.run((0, 0))
            raise AssertionError("the W did not raise")
        except RuntimeError as exc:
            assert ("ROCm/TransformerEngine#634" in str(exc) and "--disable-bias-linear" in str(exc)) == named, exc
        store.clear()


def s_w_shares_offloaded_bitwise(te):
    """Activation offload of what B keeps for W: the tensors each routed put hands the store go to
    the host pool after the B and come back before the W; the gradients are bitwise those
    without offload, and nothing stays in the pool."""
    from primus_megatron.runtime import te_wgrad
    from primus_megatron.runtime.offload import ActivationOffload
    from primus_megatron.schedules import Op

    torch.manual_seed(7)
    net = _Net(te)
    te_wgrad.enable(net)
    xs = _inputs(2, seed=3)
    grads = []
    for offloading in (False, True):
        for p in net.parameters():
            p.grad = None
        store = _fresh_store()
        keys = {(mb, 0, "W") for mb in (0, 1)} if offloading else set()
        offload = ActivationOffload(keys, {}, torch.device("cpu"), params=list(net.parameters()))
        with store.step(splitting=True):
            outs = [net(x) for x in xs]
            for mb in (0, 1):
                with store.capture((mb, 0)):
                    _loss(outs[mb]).backward()
                offload.after(Op("B", mb))
            if offloading:
                assert offload.moved_w == 2 and offload.host_bytes == offload.moved_w_bytes > 0
                assert all(not torch.is_tensor(t) for args in store.arguments((0, 0)) for t in args)
            for mb in (1, 0):
                offload.before(Op("W", mb))
                store.run((mb, 0))
        offload.assert_empty()
        grads.append({n: p.grad.clone() for n, p in net.named_parameters()})
    for name, g in grads[0].items():
        assert torch.equal(g, grads[1][name]), name


class _Experts(torch.nn.Module):
    """Megatron's TEGroupedMLP in small (0.16.1 moe/experts.py:628-766): fc1 a GroupedLinear with its bias
    in the GEMM (gradient with the weight's, in W), fc2 one returning its biases, added per expert
    outside (`_apply_bias`: gradients from autograd, in B); three experts, one of them given no tokens."""

    SPLITS = [4, 0, 11]

    def __init__(self, te, *, fuse: bool = False, delay: bool = False, dims=(8, 12), splits=None) -> None:
        super().__init__()
        kw = dict(fuse_wgrad_accumulation=fuse, delay_wgrad_compute=delay)
        self.dims, self.splits = dims, splits or self.SPLITS
        self.fc1 = te.GroupedLinear(3, dims[0], dims[1], bias=True, **kw)
        self.fc2 = te.GroupedLinear(3, dims[1], dims[0], bias=True, return_bias=True, **kw)
        with torch.no_grad():
            for i in range(3):
                getattr(self.fc1, f"bias{i}").add_(0.1 * torch.randn(dims[1]))
                getattr(self.fc2, f"bias{i}").add_(0.1 * torch.randn(dims[0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(-1, self.dims[0])[:sum(self.splits)]
        h = torch.nn.functional.gelu(self.fc1(x, self.splits))
        out, biases = self.fc2(h, self.splits)
        return torch.cat([part + b for part, b in zip(torch.split(out, self.splits), biases)])


GROUPED_IN_B = [f"fc2.bias{i}" for i in range(3)]  # returned biases: their gradient comes from autograd in B


def _grouped_experts(te, fuse: bool):
    """Issue 38: a grouped experts' weight gradients (and fc1's in-GEMM biases) run in W, not B: after
    every B the weights' .grad is None (unfused) or main_grad untouched with grad_added_to_main_grad
    set (fused), fc1's biases have no gradient yet, fc2's returned biases have theirs; after the W ops
    (in another order than the B ops) every gradient equals undelayed autograd's, and no NaN (TE's
    unfilled buffers, which autograd would have been handed) reached a .grad."""
    from primus_megatron.runtime import te_wgrad

    torch.manual_seed(5)
    net, plain = _Experts(te, fuse=fuse), _Experts(te)
    plain.load_state_dict(net.state_dict())
    if fuse:
        for p in net.parameters():
            p.main_grad = torch.zeros_like(p, dtype=torch.float32)
            p.grad_added_to_main_grad = False
    assert te_wgrad.enable(net) == 2 and te_wgrad.is_routed(net.fc1) and te_wgrad.is_routed(net.fc2)
    params = dict(net.named_parameters())
    marked = {n for n, p in params.items() if getattr(p, "skip_backward_post_hook", False)}
    assert marked == {f"fc{k}.weight{i}" for k in (1, 2) for i in range(3)} | {f"fc1.bias{i}" for i in range(3)}
    store = _fresh_store()
    xs = _inputs(3, seed=6)
    outs = [net(x) for x in xs]
    for mb in range(3):
        with store.capture((mb, 0)):
            _loss(outs[mb]).backward()
        assert store.pending((mb, 0)) == 2  # fc2's GEMMs and fc1's, one closure per layer
    weights = [f"fc{k}.weight{i}" for k in (1, 2) for i in range(3)]
    for name in weights:
        if fuse:
            assert params[name].grad_added_to_main_grad is True
            assert torch.count_nonzero(params[name].main_grad) == 0, f"{name}.main_grad changed in B"
        else:
            assert params[name].grad is None, f"{name} got a gradient in B"
    assert all(params[f"fc1.bias{i}"].grad is None for i in range(3))
    assert all(params[n].grad is not None for n in GROUPED_IN_B)
    for mb in (2, 0, 1):
        calls = store.engine_calls
        store.run((mb, 0))
        assert store.engine_calls == calls + 1, "a W op hands autograd its experts' gradients in one call"
    store.assert_empty()
    expected = _reference_grads(plain, xs)
    for name in weights:
        got = params[name].main_grad if fuse else params[name].grad
        assert not torch.isnan(got).any(), name
        _close(got, expected[name], name)
    for name in [f"fc1.bias{i}" for i in range(3)] + GROUPED_IN_B:
        _close(params[name].grad, expected[name], name)
    assert torch.count_nonzero(expected["fc2.weight1"]) == 0  # the expert with no tokens: zero, not skipped


def s_grouped_experts_defer_to_w(te):
    _grouped_experts(te, fuse=False)


def s_grouped_experts_defer_to_w_fused(te):
    _grouped_experts(te, fuse=True)


def s_grouped_experts_fp8_through_w(te):
    """Grouped experts under FP8 (delayed scaling) routed to our W ops: put is handed each expert's input as
    a Float8Tensor and its grad output as a quantized storage, counted as held by their FP8 buffers (and the
    bf16 copies of fc1's fp32 biases its wgrad GEMM keeps, grouped_linear.py:178-181, 450-459); fc1's
    in-GEMM biases get their gradients in B (TE under FP8, grouped_linear.py 331-357, 511-516), the weights
    in W only; after W every gradient is bitwise that of the same layers' undelayed FP8 backward (W casts
    nothing), the expert given no rows has zero weight gradients and no NaN (TE's unfilled buffers)
    reached a .grad."""
    torch.manual_seed(9)
    net = _Experts(te, dims=(16, 32), splits=[16, 0, 32])
    plain, store, xs, outs = _routed_fp8_forwards(te, net, seed=10, shape=(3, 16, 16))
    for held, handed in _backwards_in_b(store, outs):
        inputs = [x for tensor_list in handed for x in tensor_list[0]]
        grad_outputs = [dy for tensor_list in handed for dy in tensor_list[1]]
        assert {type(x).__name__ for x in inputs} == {"Float8Tensor"} and len(inputs) == 6, inputs
        assert {type(dy).__name__ for dy in grad_outputs} == {"Float8TensorStorage"}, grad_outputs
        kept = _storage_bytes([t for item in inputs + grad_outputs for t in _buffers(item)])
        kept += sum(2 * getattr(net.fc1, f"bias{i}").numel() for i in range(3))
        assert _storage_bytes(held) == kept > 0, (_storage_bytes(held), kept)
    params = dict(net.named_parameters())
    assert all(params[f"fc{k}.bias{i}"].grad is not None for k in (1, 2) for i in range(3)), "no bias gradient in B"
    assert all(params[f"fc{k}.weight{i}"].grad is None for k in (1, 2) for i in range(3)), "a weight gradient in B"
    store.run((1, 0))
    store.run((0, 0))
    store.assert_empty()
    expected = _reference_grads(plain, xs, te)
    for name, p in params.items():
        assert not torch.isnan(p.grad).any() and torch.equal(p.grad, expected[name]), name
    assert torch.count_nonzero(params["fc1.weight1"].grad) == 0


def s_grouped_linear_standin_is_te(te):
    """The stand-in's GroupedLinear against plain autograd (undelayed), and TE's own delayed path
    (put, then backward_dw replacing .grad) against the same: what the conformance test checks on a
    GPU against real TE."""
    torch.manual_seed(7)
    net = _Experts(te)
    xs = _inputs(1, seed=8)
    expected = _reference_grads(net, xs)
    own = _Experts(te, delay=True)
    own.load_state_dict(net.state_dict())
    _loss(own(xs[0])).backward()
    assert own.fc1.weight0.grad is not None and torch.isnan(own.fc1.weight0.grad).all()  # TE's unfilled buffer
    own.fc2.backward_dw()
    own.fc1.backward_dw()
    for name, p in own.named_parameters():
        _close(p.grad, expected[name], f"TE's own delayed path: {name}")


def _single_grouped(te, *, weight: bool, bias: bool, flags: bool = True):
    """A GroupedLinear as TE v2.14 builds it with single_grouped_weight / single_grouped_bias (commit f031cf87,
    module/grouped_linear.py): `make_grouped_weights` (762-818) registers one `weight` parameter holding every
    expert and sets `weight{i}` to None (805-813), `_make_grouped_biases` (820-834) does the same for `bias`;
    the flags are attributes of the layer (653-654). What te_wgrad looks at is that: the flags and which
    parameters the layer has (the grouped tensor's own storage class is not reproduced: nothing of ours reads
    it). `flags=False`: the parameters alone, as a later TE might build them under another flag name."""
    layer = te.GroupedLinear(3, 4, 4, bias=True)
    for kind, on in (("weight", weight), ("bias", bias)):
        if on:
            parts = [getattr(layer, f"{kind}{i}") for i in range(3)]
            stacked = torch.nn.Parameter(torch.stack([p.detach() for p in parts]))
            torch.nn.Module.register_parameter(layer, kind, stacked)
            for i in range(3):
                torch.nn.Module.register_parameter(layer, f"{kind}{i}", None)
    if flags:
        layer.single_grouped_weight, layer.single_grouped_bias = weight, bias
    return layer


def _grouped_linear_v2(te, *, delay: bool = False):
    """ROCm TransformerEngine's GroupedLinearV2 as far as te_wgrad looks at it (ROCm/TransformerEngine 9ee5f14b,
    transformer_engine/pytorch/module/grouped_linear_v2.py): a TransformerEngineBaseModule (not a GroupedLinear)
    with `num_gemms`, its own WeightGradStore, one stacked `weight` [experts, out, in] and one `bias`
    [experts, out]; built undelayed its backward computes the weight gradient in B."""
    from transformer_engine.pytorch.module._common import WeightGradStore
    from transformer_engine.pytorch.module.base import TransformerEngineBaseModule

    class GroupedLinearV2(TransformerEngineBaseModule):
        def __init__(self) -> None:
            super().__init__()
            self.num_gemms, self.in_features, self.out_features = 3, 4, 4
            self.wgrad_store = WeightGradStore(delay)
            torch.nn.Module.register_parameter(self, "weight", torch.nn.Parameter(torch.randn(3, 4, 4)))
            torch.nn.Module.register_parameter(self, "bias", torch.nn.Parameter(torch.zeros(3, 4)))

    return GroupedLinearV2()


def s_grouped_layouts_we_cannot_split_are_refused_by_name(te):
    """Issue 57 item 3: a grouped-expert layer whose experts share one stacked parameter (TE 2.14+'s
    single_grouped_weight / single_grouped_bias, ROCm TE's GroupedLinearV2) is refused with W ops in one
    sentence naming the layout and what to use instead, at enable() (model building) and at a step's
    prepare_step; a schedule without W ops leaves it alone; a GroupedLinear with one weight per expert is routed."""
    from primus_megatron.runtime import te_wgrad

    cases = [(_single_grouped(te, weight=True, bias=False), "single_grouped_weight"),
             (_single_grouped(te, weight=True, bias=True), "single_grouped_weight, single_grouped_bias"),
             (_single_grouped(te, weight=False, bias=True), "(single_grouped_bias:"),
             (_single_grouped(te, weight=True, bias=False, flags=False), "(one grouped weight:"),
             (_grouped_linear_v2(te), "GroupedLinearV2 layout")]
    for layer, needle in cases:
        for call in (lambda m: te_wgrad.enable(m, what="--pipeline-schedule zbv"),
                     lambda m: te_wgrad.prepare_step([m], splitting=True)):
            model = torch.nn.Sequential(layer)
            try:
                call(model)
                raise AssertionError(f"{type(layer).__name__} ({needle}) was not refused")
            except te_wgrad.TESupportError as exc:
                sentence = str(exc)
            assert needle in sentence and "1f1b, interleaved-1f1b" in sentence and "\n" not in sentence, sentence
            assert ("GroupedLinearV2" in needle) == ("use TransformerEngine's GroupedLinear" in sentence), sentence
            assert ("GroupedLinearV2" in needle) != ("NVTE_GROUPED_LINEAR_SINGLE_PARAM" in sentence), sentence
            assert not te_wgrad.is_routed(layer)
        assert te_wgrad.prepare_step([torch.nn.Sequential(layer)], splitting=False) == 0
    per_expert = torch.nn.Sequential(te.GroupedLinear(3, 4, 4, bias=True))
    assert te_wgrad.enable(per_expert) == 1 and te_wgrad.is_routed(per_expert[0])


def _raises(exc_type, needle: str, fn) -> None:
    try:
        fn()
    except exc_type as exc:
        assert needle in str(exc), f"{needle!r} not in: {exc}"
        return
    raise AssertionError(f"no {exc_type.__name__} ({needle!r})")


SCENARIOS = [s_w_runs_exactly_its_b, s_fused_main_grad, s_ddp_hooks_once_per_w, s_ddp_hooks_once_per_w_fused,
             s_fp8_bias_gradient_in_b_and_quantized_puts, s_fp8_ddp_hooks_once_per_w, s_debug_mode_refuses_routed_layers,
             s_backward_outside_b_runs_when_it_ends, s_nothing_crosses_steps, s_refusals, s_capability_older_te,
             s_debug_mode_and_userbuffers_refused, s_held_until_w_is_counted,
             s_w_shares_offloaded_bitwise, s_grouped_experts_defer_to_w, s_grouped_experts_defer_to_w_fused,
             s_grouped_experts_fp8_through_w,
             s_grouped_linear_standin_is_te, s_grouped_held_until_w_is_counted,
             s_grouped_held_bytes_are_what_the_allocator_frees_in_w, s_fp8_held_bytes_are_what_the_allocator_frees_in_w,
             s_a_layer_without_the_hooks_list_is_refused,
             s_hipblaslt_missing_kernel_in_w_is_named, s_grouped_layouts_we_cannot_split_are_refused_by_name]


def scenarios_body(rank, case):
    """Two tensor-parallel ranks (one spawn for every scenario: the imports dominate): both run
    the tensor-parallel scenarios (tp_body), then rank 0 runs the single-layer ones."""
    try:
        te = _load_standin()
    except RuntimeError as exc:
        return {"skip": str(exc)}
    out = tp_body(rank, te)
    if rank != 0:
        return out
    for fn in SCENARIOS:
        try:
            fn(te)
            out[fn.__name__] = None
        except Exception as exc:
            out[fn.__name__] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2500:]}"
    return out


@pytest.fixture(scope="module")
def scenario_ranks():
    return _run_spawned(scenarios_body, {"tp": 2, "pp": 1}, world=2)


@pytest.fixture(scope="module")
def scenario_results(scenario_ranks):
    return scenario_ranks[0]


@pytest.mark.parametrize("name", [fn.__name__ for fn in SCENARIOS])
def test_scenario(scenario_results, name):
    assert scenario_results[name] is None, scenario_results[name]


def test_without_transformer_engine_everything_is_a_no_op():
    from primus_megatron.runtime import te_wgrad

    if "transformer_engine.pytorch" in sys.modules:
        pytest.skip(expected_skips.reason("real-te", "TransformerEngine is loaded in this interpreter"))
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    assert te_wgrad.enable(model) == 0
    assert te_wgrad.prepare_step([model], splitting=True) == 0


class _Float8TensorLike(torch.Tensor):
    """What TE v2.11 hands put for GroupedLinear's inputs under FP8: a Float8Tensor, a torch.Tensor wrapper
    subclass with no storage of its own whose buffers get_metadata() names (float8_tensor_storage.py:107-115:
    the row-wise data, None once dropped, the transpose and the scale-inverse)."""

    @staticmethod
    def __new__(cls, data, transpose, scale_inv):
        out = torch.Tensor._make_wrapper_subclass(cls, transpose.shape[::-1], dtype=torch.bfloat16)
        out._data, out._transpose, out._scale_inv = data, transpose, scale_inv
        return out

    def get_metadata(self):
        return {"data": self._data, "fp8_scale_inv": self._scale_inv, "fp8_dtype": None,
                "data_transpose": self._transpose, "quantizer": None}

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs=None):
        raise NotImplementedError(f"{func} on a quantized tensor")


def test_what_put_holds_is_counted_by_its_buffers():
    """The memory accounting of a put (te_wgrad._held_tensors, read by the profiler through each tensor's
    storage) counts a quantized tensor's FP8 buffers and scale-inverse, not a row-wise usage TE dropped (None),
    also for a torch.Tensor subclass without storage."""
    from primus_megatron.runtime.profiler import _storage_key
    from primus_megatron.runtime.te_wgrad import _held_tensors

    transpose = torch.zeros(16, 32, dtype=torch.uint8)
    wrapped, plain = _Float8TensorLike(None, transpose, torch.ones(1)), torch.ones(4)
    held = _held_tensors([[wrapped, None], [plain]])
    assert [t.shape for t in held] == [(1,), (16, 32), (4,)]
    assert [_storage_key(t)[1] for t in held] == [4, 512, 16]


# -- tensor parallelism: TE's column / row parallel layers, with and without sequence parallelism ------

def tp_body(rank, te) -> dict:
    """Two tensor-parallel ranks: TE's LayerNormLinear (column parallel) then Linear (row parallel,
    bias added after the reduction), deferred (B0 B1 W1 W0) against the same layers undelayed.
    TE v2.11 (linear.py 205-226, 645-760; layernorm_linear.py 200-260; base.py 1118-1130): with
    sequence parallelism the column layer all-gathers its input for the GEMM, saves the shard and
    gathers it again in B for the wgrad GEMM, reduce-scatters its input gradient; the row layer
    reduce-scatters its output and all-gathers grad_output in B; without it, the column layer
    all-reduces its input gradient and the row layer its output. What put keeps until W is the
    gathered input and the gathered grad_output: full-sequence tensors, not the shards."""
    from megatron.core import parallel_state

    from primus_megatron.runtime import te_wgrad

    group, tp = parallel_state.get_tensor_model_parallel_group(), 2
    out = {}
    for sp, fp8 in ((True, False), (False, False), (True, True)):
        variant = f"sp={sp}" + (" fp8" if fp8 else "")
        # every dimension of a held buffer tells which it is; FP8 needs 16-divisible ones (rows of 8)
        s, b, h, ffn = (8, 4, 16, 96) if fp8 else (6, 3, 8, 24)
        try:
            torch.manual_seed(10 + rank)  # each rank its own shards

            def build():
                kw = dict(sequence_parallel=sp, tp_group=group, tp_size=tp)
                return torch.nn.ModuleDict({"fc1": te.LayerNormLinear(h, ffn, bias=True, parallel_mode="column", **kw),
                                            "fc2": te.Linear(ffn, h, bias=True, parallel_mode="row", **kw)})

            net, plain = build(), build()
            plain.load_state_dict(net.state_dict())
            te_wgrad.enable(net)

            def forward(model, x):
                return model["fc2"](torch.nn.functional.gelu(model["fc1"](x)))

            gen = torch.Generator().manual_seed(20)  # the full sequence, the same on both ranks
            full = [torch.randn(s, b, h, generator=gen) for _ in range(2)]
            xs = [x.chunk(tp)[rank].contiguous() if sp else x for x in full]
            store = _fresh_store()
            with _fp8(te, fp8):
                outs = [forward(net, x) for x in xs]
            held_shapes = []
            for mb in (0, 1):
                held = []
                with store.capture((mb, 0), held=held):
                    _loss(outs[mb]).backward()
                held_shapes.append(sorted(tuple(t.shape) for t in held))
            for mb in (1, 0):
                store.run((mb, 0))
            store.assert_empty()
            # per microbatch, all full-sequence (s*b rows): fc1's gathered input and its grad_output, fc2's input
            # and its gathered grad_output. Under FP8 (Float8TensorStorage, on a TN-only device) fc2's input keeps
            # only its column-wise (transposed) data; fc1's, gathered row-wise (per-tensor FP8 is all-gathered
            # row-wise, linear.py 649-658), gets its transpose for the wgrad GEMM and keeps both (778); the
            # quantized grad_outputs keep both (the dgrad GEMM used the row-wise data in B: linear.py 577-583);
            # each of the four keeps its one-element fp32 scale-inverse (float8_tensor_storage.py:107-123)
            expected_held = sorted([(s * b, h), (s * b, ffn // tp), (s * b, ffn // tp), (s * b, h)] if not fp8 else
                                   [(s * b, h), (h, s * b), (s * b, ffn // tp), (ffn // tp, s * b),
                                    (ffn // tp, s * b), (s * b, h), (h, s * b)] + [(1,)] * 4)
            assert held_shapes == [expected_held] * 2, (held_shapes, expected_held)
            with _fp8(te, fp8):  # undelayed, FP8 as above: every forward under one autocast
                outs = [forward(plain, x) for x in xs]
            for o in outs:
                _loss(o).backward()
            got, want = dict(net.named_parameters()), dict(plain.named_parameters())
            for name in want:
                _close(got[name].grad, want[name].grad, f"{variant} rank {rank} {name}")
            out[variant] = None
        except Exception as exc:
            out[variant] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}"
    return out


@pytest.mark.parametrize("variant", ["sp=True", "sp=False", "sp=True fp8"])
def test_tensor_parallel_te_layers_defer_exactly(scenario_ranks, variant):
    for rank, result in enumerate(scenario_ranks):
        assert result[variant] is None, f"rank {rank}: {result[variant]}"


# -- end to end: GPTModel with TE-style layers, pp=2, our schedules vs megatron's 1F1B ---------------

def _standin_spec(te):
    """Megatron's TE layer spec with the stand-in behind megatron's TE wrapper
    behaviour (extensions/transformer_engine.py 470-710, 711-933 of 0.16.1:
    fuse_wgrad_accumulation from gradient_accumulation_fusion, return_bias =
    skip_bias_add and bias, (out, bias-or-None) returned, is_first_microbatch
    True on the first forward only) and megatron's own attention kernel."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.identity_op import IdentityOp

    class _Wrapper:
        def _wrap(self, bias: bool, skip_bias_add: bool) -> None:
            self.te_return_bias = skip_bias_add and bias
            self.is_first_microbatch = True

        def forward(self, x):
            out = super().forward(x, is_first_microbatch=self.is_first_microbatch)
            self.is_first_microbatch = False
            return out if self.te_return_bias else (out, None)

    def _common(config, init_method, bias, skip_bias_add):
        return dict(bias=bias, return_bias=skip_bias_add and bias, params_dtype=config.params_dtype,
                    fuse_wgrad_accumulation=config.gradient_accumulation_fusion, init_method=init_method)

    class StandinTELayerNormColumnParallelLinear(_Wrapper, te.LayerNormLinear):
        def __init__(self, input_size, output_size, *, config, init_method, gather_output, bias, skip_bias_add,
                     is_expert=False, skip_weight_param_allocation=False, tp_comm_buffer_name=None, tp_group=None,
                     stride=1, name=None):  # name: megatron-core 0.19 passes the module's name
            super().__init__(input_size, output_size, eps=config.layernorm_epsilon, normalization=config.normalization,
                             zero_centered_gamma=config.layernorm_zero_centered_gamma, parallel_mode="column",
                             **_common(config, init_method, bias, skip_bias_add))
            self._wrap(bias, skip_bias_add)

    class StandinTERowParallelLinear(_Wrapper, te.Linear):
        def __init__(self, input_size, output_size, *, config, init_method, bias, input_is_parallel, skip_bias_add,
                     is_expert=False, tp_comm_buffer_name=None, tp_group=None, name=None):
            super().__init__(input_size, output_size, parallel_mode="row",
                             **_common(config, init_method, bias, skip_bias_add))
            self._wrap(bias, skip_bias_add)

    spec = get_gpt_layer_local_spec()
    layer = spec.submodules
    layer.input_layernorm = IdentityOp  # fused into linear_qkv, as in megatron's TE spec
    layer.self_attention.submodules.linear_qkv = StandinTELayerNormColumnParallelLinear
    layer.self_attention.submodules.linear_proj = StandinTERowParallelLinear
    layer.pre_mlp_layernorm = IdentityOp
    # megatron-core 0.16.1: a ModuleSpec; 0.19: a functools.partial(MLP.as_mlp_submodule, submodules=...)
    mlp = layer.mlp.submodules if hasattr(layer.mlp, "submodules") else layer.mlp.keywords["submodules"]
    mlp.linear_fc1 = StandinTELayerNormColumnParallelLinear
    mlp.linear_fc2 = StandinTERowParallelLinear
    return spec


def _gpt(spec, config, *, pre_process, post_process, vp_stage=None):
    from megatron.core.models.gpt.gpt_model import GPTModel

    return GPTModel(config, spec, vocab_size=ref.VOCAB_SIZE, max_sequence_length=ref.SEQ_LENGTH,
                    pre_process=pre_process, post_process=post_process, vp_stage=vp_stage)


def _pipeline_step(spec, case, variant, full, batches):
    """One or two steps of `variant` on this rank: losses and grads by global name."""
    import primus_megatron as pm
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    from primus_megatron.runtime import te_wgrad

    sched, ddp, fuse = variant["schedule"], variant.get("ddp", False), variant.get("fuse", False)
    pp, layers = ps.get_pipeline_model_parallel_world_size(), case["num_layers"]
    if sched == "megatron-1f1b":
        from megatron.core.pipeline_parallel import get_forward_backward_func

        config = ref.tiny_gpt_config(layers, pipeline_model_parallel_size=pp, gradient_accumulation_fusion=fuse)
        model = [_gpt(spec, config, pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage())]
        fbf = get_forward_backward_func()
    else:
        chunks = pm.schedules.registry.resolve_chunks(pm.schedules.info(sched), None)
        config = ref.tiny_gpt_config(layers, pipeline_model_parallel_size=pp, gradient_accumulation_fusion=fuse,
                                     virtual_pipeline_model_parallel_size=chunks if chunks > 1 else None)
        model = pm.build_model(partial(_gpt, spec, config), schedule=sched)
        fbf = pm.get_forward_backward_func(sched, p2p_timeout_s=60)
    for chunk in model:
        ref.copy_weights_by_layer_number(full, chunk)
    if ddp:
        routed = [te_wgrad.enable(chunk) for chunk in model]  # before DDP, which then hooks the layers
        assert all(n == 4 * len(ref.layer_numbers(c)) for n, c in zip(routed, model)), routed
        ddp_config = DistributedDataParallelConfig(overlap_grad_reduce=True, delay_wgrad_compute=True,
                                                   grad_reduce_in_fp32=True)
        model = [DistributedDataParallel(config, ddp_config, c, disable_bucketing=i > 0) for i, c in enumerate(model)]
        config.no_sync_func = [c.no_sync for c in model] if len(model) > 1 else model[0].no_sync
    steps = []
    for _ in range(2 if ddp else 1):  # DDP: the second step reduces from its hooks (counts known)
        if ddp:
            for c in model:
                c.zero_grad_buffer()
        store = fbf(forward_step_func=ref.make_forward_step_func(), data_iterator=iter(batches),
                    model=model if len(model) > 1 else model[0], num_microbatches=len(batches),
                    seq_length=ref.SEQ_LENGTH, micro_batch_size=ref.MICRO_BATCH_SIZE)
        if ddp:
            for c in model:
                c.finish_grad_sync()
            grads, seen = {}, set()
            for c in model:
                for name, p in ref.named_global_parameters(c):
                    if id(p) not in seen:
                        seen.add(id(p))
                        grads[name] = p.main_grad.clone()
        else:
            grads = ref.chunk_grads(model)
        steps.append({"losses": ref.losses_from_store(store), "grads": grads})
    out = {"steps": steps}
    if sched != "megatron-1f1b":
        out["deferred"], out["ran"] = fbf.last_step.wgrads_deferred, fbf.last_step.wgrads_run
        out["te_layers"] = sum(1 for c in model for m in c.modules() if isinstance(m, te_cls()))
        out["megatron_linears"] = sum(1 for c in model for m in c.modules()  # the output layer
                                      if type(m).__name__ in ("ColumnParallelLinear", "RowParallelLinear"))
    return out


def te_cls():
    import transformer_engine.pytorch as te

    return (te.Linear, te.LayerNormLinear)


PIPELINE_VARIANTS = [
    {"schedule": "megatron-1f1b"},
    {"schedule": "zb-h1"},
    {"schedule": "zbv"},
    {"schedule": "zb-h1", "ddp": True},
    {"schedule": "zbv", "ddp": True, "fuse": True},
]


def pipeline_body(rank, case):
    try:
        te = _load_standin()
    except RuntimeError as exc:
        return {"skip": str(exc)}
    spec = _standin_spec(te)
    batches = ref.make_microbatches(case["microbatches"], seed=3)
    full_config = ref.tiny_gpt_config(case["num_layers"])
    full = ref.deterministic_init_(_gpt(spec, full_config, pre_process=True, post_process=True), seed=11)
    out = []
    for variant in PIPELINE_VARIANTS:
        try:
            out.append(_pipeline_step(spec, case, variant, full, batches))
        except Exception as exc:
            out.append({"error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2500:]}"})
    return out


@pytest.fixture(scope="module")
def pipeline_results():
    return _run_spawned(pipeline_body, {"num_layers": 4, "microbatches": 4}, world=2, timeout_s=600)


@pytest.mark.parametrize("index", range(1, len(PIPELINE_VARIANTS)),
                         ids=lambda i: "-".join(str(v) for k, v in PIPELINE_VARIANTS[i].items() if v is not True)
                         + ("-ddp" if PIPELINE_VARIANTS[i].get("ddp") else "")
                         + ("-fused" if PIPELINE_VARIANTS[i].get("fuse") else ""))
def test_pipeline_matches_megatrons_1f1b(pipeline_results, index):
    """GPTModel of TE-style layers at pp=2: every loss and gradient of zb-h1 / zbv
    (plain, and under megatron's DDP with overlapped reduce, with and without
    gradient-accumulation fusion) equals megatron's own 1F1B; every TE layer's
    weight gradient went through W."""
    runs = [r[index] for r in pipeline_results]
    refs = [r[0] for r in pipeline_results]
    for rank, res in enumerate(runs + refs):
        assert "error" not in res, f"rank {rank % 2}: {res['error']}"
    ref_losses = [x for r in refs for x in r["steps"][0]["losses"]]
    ref_grads = ref.merge_grads([r["steps"][0]["grads"] for r in refs])
    for step in range(len(runs[0]["steps"])):
        losses = [x for r in runs for x in r["steps"][step]["losses"]]
        grads = ref.merge_grads([r["steps"][step]["grads"] for r in runs])
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=RTOL, atol=ATOL)
        assert set(grads) == set(ref_grads), sorted(set(grads) ^ set(ref_grads))
        for name, g in ref_grads.items():
            _close(grads[name], g, f"step {step} {name}")
    microbatches = 4
    for res in runs:  # one deferred GEMM per TE layer (and megatron linear) per microbatch, all run
        assert res["te_layers"] == 8, res["te_layers"]  # 2 of the 4 layers per rank, 4 TE layers each
        expected = (res["te_layers"] + res["megatron_linears"]) * microbatches
        assert res["deferred"] == res["ran"] == expected, {k: v for k, v in res.items() if k != "steps"}
