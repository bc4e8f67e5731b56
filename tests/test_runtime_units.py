"""Single-process unit tests of the runtime pieces (no process group needed)."""
from __future__ import annotations

import pytest
import torch

import megatron_reference as ref

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")


# TransformerEngine layers: tests/test_te_wgrad.py (a stand-in reproducing TE v2.11's API).


def test_store_refuses_w_with_nothing_deferred_and_leftovers():
    from primus_megatron.runtime.wgrad_store import WeightGradStore, WeightGradStoreError

    store = WeightGradStore()
    with pytest.raises(WeightGradStoreError, match="deferred nothing"):
        store.run((0, 0), what="W0 on pipeline rank 1")
    with store.capture((1, 0)):
        store.defer(lambda: None)
        with pytest.raises(WeightGradStoreError, match="nested"):
            with store.capture((2, 0)):
                pass
    with pytest.raises(WeightGradStoreError, match="never computed"):
        store.assert_empty()
    assert store.run((1, 0)) == 1
    store.assert_empty()


def test_deferred_linear_equals_megatrons_backward_single_process():
    """ColumnParallelLinear (tp=1): deferred weight gradient == megatron's own."""
    ref.init_single_process()
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear

    from primus_megatron.runtime import linear_hooks
    from primus_megatron.runtime.wgrad_store import get_store

    linear_hooks.install()
    config = ref.tiny_gpt_config(1)
    torch.manual_seed(0)
    layer = ColumnParallelLinear(8, 6, config=config, init_method=torch.nn.init.normal_, bias=True,
                                 gather_output=True)
    x = torch.randn(5, 2, 8, requires_grad=True)

    def grads(defer: bool):
        layer.zero_grad(set_to_none=True)
        x.grad = None
        store = get_store()
        with store.step(splitting=defer):  # the split is decided when the forward runs
            out, _ = layer(x)
        if defer:
            with store.capture("k"):
                out.square().sum().backward()
            assert layer.weight.grad is None, "B must not produce the weight gradient"
            assert layer.bias.grad is not None, "biases get their gradient in B"
            store.run("k")
        else:
            out.square().sum().backward()
        return x.grad.clone(), layer.weight.grad.clone(), layer.bias.grad.clone()

    for eager, deferred in zip(grads(False), grads(True)):
        torch.testing.assert_close(deferred, eager, rtol=0, atol=0)


def test_wrong_number_of_model_chunks_is_refused_before_any_communication():
    import primus_megatron as pm

    fbf = pm.get_forward_backward_func("zbv")
    with pytest.raises(ValueError, match="runs 2 model chunk"):
        fbf(forward_step_func=None, data_iterator=None, model=[torch.nn.Linear(2, 2)], num_microbatches=4,
            seq_length=16, micro_batch_size=1)


@pytest.mark.parametrize("field, value, needle", [
    ("defer_embedding_wgrad_compute", True, "--defer-embedding-wgrad-compute cannot be used with --pipeline-schedule zbv"),
    ("fine_grained_activation_offloading", True, "--fine-grained-activation-offloading cannot be used"),
])
def test_unsupported_megatron_settings_are_refused_on_every_rank_before_any_wait(field, value, needle):
    import pipeline_harness as H

    results = H.run_ranks({"body": H.refused_setting_body, "pp": 2, "schedule": "zbv", "field": field,
                           "value": value, "late_s": 5, "num_layers": 4}, 2, timeout_s=120)
    for res in results:
        assert res["message"] is not None and needle in res["message"] and "\n" not in res["message"]
    assert results[0]["elapsed"] < 4  # rank 0 did not wait for the late rank 1


def _fused_layer():
    """A ColumnParallelLinear with gradient-accumulation fusion and what megatron's DDP
    gives its weight (an fp32 main_grad, grad_added_to_main_grad, a grad-ready hook)."""
    ref.init_single_process()
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear

    from primus_megatron.runtime import linear_hooks

    linear_hooks.install()
    config = ref.tiny_gpt_config(1, gradient_accumulation_fusion=True)
    torch.manual_seed(0)
    layer = ColumnParallelLinear(64, 96, config=config, init_method=torch.nn.init.normal_, bias=False,
                                 gather_output=True)
    weight = layer.weight
    weight.main_grad = torch.zeros_like(weight, dtype=torch.float32)
    weight.grad_added_to_main_grad = False
    fired = []

    def ddp_hook(*_):  # megatron DDP's hook, as far as this test needs it
        fired.append(weight.grad is not None)
        weight.grad = None

    accumulator = weight.expand_as(weight).grad_fn.next_functions[0][0]
    accumulator.register_hook(ddp_hook)
    layer.kept_accumulator = accumulator  # the node (and its hook) lives as long as a reference, as in DDP
    return layer, fired


def _split_forward_backward(layer, x, key):
    from primus_megatron.runtime.wgrad_store import get_store

    store = get_store()
    with store.step(splitting=True):
        out, _ = layer(x)
    with store.capture(key):
        out.square().sum().backward()
    return store


def test_fused_w_fires_ddps_hook_once_in_w_and_allocates_nothing_weight_sized():
    """Not on the first W either: the dummy DDP's hook reads is a one-element zero view
    (runtime/dummy_grad.py), never a weight-sized tensor, cached or fresh."""
    from torch.profiler import ProfilerActivity, profile

    layer, fired = _fused_layer()
    weight = layer.weight
    weight_bytes = weight.numel() * weight.element_size()
    x = torch.randn(8, 2, 64, requires_grad=True)
    store = _split_forward_backward(layer, x, "first")
    assert fired == [], "DDP's hook must not fire in B"
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        store.run("first")
    big = [e for e in prof.events() if e.cpu_memory_usage >= weight_bytes]
    assert not big, [(e.name, e.cpu_memory_usage) for e in big]
    assert fired == [True], "one registration in W, with a gradient present as DDP's overlap assert requires"
    expected = (x.detach().reshape(-1, 64).t() @ (2 * layer(x)[0].detach().reshape(-1, 96))).t()
    torch.testing.assert_close(weight.main_grad, expected, rtol=1e-5, atol=1e-5)

    store = _split_forward_backward(layer, x, "measured")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        store.run("measured")
    big = [e for e in prof.events() if e.cpu_memory_usage >= weight_bytes]
    assert not big, [(e.name, e.cpu_memory_usage) for e in big]
    assert fired == [True, True]


def _expert_loop(n: int, fused: bool):
    """`n` ColumnParallelLinear layers applied one after another (SequentialMLP's shape: a loop of
    small linear layers), each weight with what megatron's DDP gives it and a hook counting its
    firings (with `.grad` present or not)."""
    ref.init_single_process()
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear

    from primus_megatron.runtime import linear_hooks

    linear_hooks.install()
    config = ref.tiny_gpt_config(1, gradient_accumulation_fusion=fused)
    torch.manual_seed(3)
    layers = [ColumnParallelLinear(16, 16, config=config, init_method=torch.nn.init.normal_, bias=False,
                                   gather_output=True) for _ in range(n)]
    fired: dict = {}
    for i, layer in enumerate(layers):
        w = layer.weight
        if fused:
            w.main_grad = torch.zeros_like(w, dtype=torch.float32)
            w.grad_added_to_main_grad = False

        def hook(*_, i=i, w=w):  # megatron DDP's hook, as far as this test needs it
            fired.setdefault(i, []).append(w.grad is not None)
            if fused:
                w.grad = None

        layer.kept_accumulator = w.expand_as(w).grad_fn.next_functions[0][0]
        layer.kept_accumulator.register_hook(hook)
    return layers, fired


def _loop_forward(layers, x):
    for layer in layers:
        x = torch.tanh(layer(x)[0])
    return x.square().sum()


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_a_w_op_hands_autograd_its_gradients_in_one_engine_call(fused, monkeypatch):
    """Issue 56: the W op of 32 deferred linear layers calls autograd's engine once, not once per
    closure (megatron DDP's hooks still fire once per weight in W), and the gradients are megatron's
    own backward's, bitwise."""
    from primus_megatron.runtime.wgrad_store import get_store

    layers, fired = _expert_loop(32, fused)
    x = torch.randn(4, 2, 16, requires_grad=True)  # else the first layer has nothing to split
    _loop_forward(layers, x).backward()  # megatron's own backward: the reference
    own = [(l.weight.main_grad if fused else l.weight.grad).clone() for l in layers]
    for l in layers:
        l.weight.grad = None
        if fused:
            l.weight.main_grad.zero_()
    fired.clear()

    store = get_store()
    store.reset_counters()
    with store.step(splitting=True):
        loss = _loop_forward(layers, x)
        with store.capture("mb0"):
            loss.backward()
        assert fired == {}, "DDP's hooks must not fire in B"
        calls = []
        real = torch.autograd.backward
        monkeypatch.setattr(torch.autograd, "backward", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
        store.run("mb0")
        monkeypatch.undo()
    assert len(calls) == 1 and store.engine_calls == 1
    assert fired == {i: [True] for i in range(32)}, fired
    for l, expected in zip(layers, own):
        torch.testing.assert_close(l.weight.main_grad if fused else l.weight.grad, expected, rtol=0, atol=0)


def test_unfused_weight_gradients_wait_for_the_engine_up_to_a_bound(monkeypatch):
    """Unfused weight gradients wait outside DDP's buffers for the W op's engine call: past
    FLUSH_BYTES they are handed over as a closure ends (here every closure: one call each)."""
    from primus_megatron.runtime import wgrad_store

    layers, fired = _expert_loop(6, fused=False)
    monkeypatch.setattr(wgrad_store, "FLUSH_BYTES", 1)
    store = wgrad_store.get_store()
    store.reset_counters()
    with store.step(splitting=True):
        loss = _loop_forward(layers, torch.randn(4, 2, 16, requires_grad=True))
        with store.capture("mb0"):
            loss.backward()
        store.run("mb0")
    assert store.engine_calls == 6 and fired == {i: [True] for i in range(6)}


@pytest.mark.parametrize("hooked", [False, True], ids=["plain", "saved-tensor hooks"])
def test_fused_w_reaches_the_parameter_under_saved_tensor_hooks(hooked):
    """Under saved-tensor hooks (the runtime's memory profiler, activation offloading)
    autograd unpacks a new tensor object for the saved weight; W must still set
    grad_added_to_main_grad and give DDP's hook a gradient on the parameter itself."""
    import contextlib

    layer, fired = _fused_layer()
    x = torch.randn(8, 2, 64, requires_grad=True)
    hooks = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t) if hooked else contextlib.nullcontext()
    with hooks:
        store = _split_forward_backward(layer, x, "hooked")
    store.run("hooked")
    assert fired == [True] and layer.weight.grad_added_to_main_grad
    expected = (x.detach().reshape(-1, 64).t() @ (2 * layer(x)[0].detach().reshape(-1, 96))).t()
    torch.testing.assert_close(layer.weight.main_grad, expected, rtol=1e-5, atol=1e-5)


def test_the_profiler_counts_what_the_graph_saves_less_the_parameters():
    """Activation memory is read from the autograd graph (no saved-tensor hooks, see above):
    every storage the hooks would see for this graph, one count each, but no parameter."""
    from primus_megatron.runtime.profiler import _storage_key, saved_storages

    weight = torch.nn.Parameter(torch.randn(16, 16))
    x = torch.randn(4, 16, requires_grad=True)
    seen = set()

    def pack(t):
        seen.add(_storage_key(t))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        hidden = (x @ weight).relu()
        out = (hidden * hidden).sum()
    keys = saved_storages(out, exclude={weight.untyped_storage().data_ptr()})
    assert _storage_key(weight) in seen and _storage_key(weight) not in keys
    assert keys == seen - {_storage_key(weight)} and _storage_key(x) in keys and _storage_key(hidden) in keys


def test_the_allocation_check_sees_megatrons_own_weight_sized_dummy():
    """The profiler check above can fail: megatron's fused backward allocates one."""
    from torch.profiler import ProfilerActivity, profile

    layer, fired = _fused_layer()
    x = torch.randn(8, 2, 64, requires_grad=True)
    out, _ = layer(x)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out.square().sum().backward()
    weight_bytes = layer.weight.numel() * layer.weight.element_size()
    assert any(e.cpu_memory_usage >= weight_bytes for e in prof.events())
    assert fired == [True]


def test_a_failed_step_leaves_nothing_for_the_next_steps_w():
    """Closures queued by a step that raised are dropped when the next step starts."""
    from primus_megatron.runtime import executor
    from primus_megatron.runtime.wgrad_store import get_store

    layer, _ = _fused_layer()
    store = _split_forward_backward(layer, torch.randn(8, 2, 64, requires_grad=True), (0, 0))
    assert store.pending((0, 0)) == 1  # a step died between this B and its W

    class Lowered:  # the least a step needs to start: run_step empties the store first
        class schedule:
            splits_backward = True

    class Context:
        forward_only = False

    with pytest.raises(Exception):
        executor.run_step(Lowered(), 0, None, Context())
    assert store.pending((0, 0)) == 0 and not store.splitting


def test_megatrons_transformer_engine_wrappers_count_as_transformer_engine_layers():
    """megatron's TELinear & co. live in megatron.core.extensions.transformer_engine and derive
    from TE's classes: the refusals that depend on TE layers (FP8, --tp-comm-overlap, context
    parallelism) must see them (megatron-core 0.16.1 extensions/transformer_engine.py:470,
    `class TELinear(te.pytorch.Linear)`)."""
    from primus_megatron.runtime.forward_backward import uses_transformer_engine

    te_linear = type("Linear", (torch.nn.Module,), {"__module__": "transformer_engine.pytorch.module.linear"})
    wrapper = type("TELinear", (te_linear,), {"__module__": "megatron.core.extensions.transformer_engine"})
    chunk = torch.nn.Sequential(torch.nn.Linear(2, 2), wrapper())
    assert uses_transformer_engine([torch.nn.Sequential(torch.nn.Linear(2, 2)), chunk])
    assert not uses_transformer_engine([torch.nn.Sequential(torch.nn.Linear(2, 2))])


def test_the_store_splits_only_inside_a_step_and_a_failed_step_leaves_it_empty():
    """`step(splitting=...)` is the one place splitting is switched on; it empties the store when
    it opens and when the step raises; a profiled B's `held` list gets what W keeps alive."""
    from primus_megatron.runtime.wgrad_store import WeightGradStore, WeightGradStoreError

    store = WeightGradStore()
    with store.capture("stale"):
        store.defer(lambda: None)
    with store.step(splitting=True):
        assert store.splitting and store.pending("stale") == 0
        kept: list = []
        marker = torch.zeros(3)
        with store.capture("k", held=kept):
            store.defer(lambda: None, tensors=(marker,))
        with store.capture("other"):  # no list given: nothing recorded
            store.defer(lambda: None, tensors=(torch.ones(1),))
        assert kept == [marker] and store.run("k") == 1
        with pytest.raises(WeightGradStoreError, match="opened inside another"):
            with store.step(splitting=False):
                pass
    assert not store.splitting and store.pending("other") == 1  # a step that ends well keeps its queue
    with pytest.raises(RuntimeError, match="boom"):
        with store.step(splitting=True):
            with store.capture("k"):
                store.defer(lambda: None)
            raise RuntimeError("boom")
    assert not store.splitting and store.pending("k") == 0
    with store.step(splitting=False):
        assert not store.splitting


def test_delayed_scaling_snapshot_restores_histories_and_scales_in_place():
    """What a post-validation prefix's FP8 casts move (runtime/fp8_state.py): every TE module's forward and
    backward amax history and scale (TE's fp8_meta recipe states), put back in place, so the views TE's global
    amax buffers and quantizers hold see the restored values; modules without delayed scaling are left alone."""
    from types import SimpleNamespace

    from primus_megatron.runtime.fp8_state import DelayedScalingSnapshot

    def module(fp8_meta):
        m = torch.nn.Linear(2, 2)
        m.fp8_meta = fp8_meta
        return m

    states = {key: SimpleNamespace(amax_history=torch.zeros(3, 2), scale=torch.ones(2))
              for key in ("scaling_fwd", "scaling_bwd")}
    current = SimpleNamespace(recipe="current scaling: no history")
    chunk = torch.nn.Sequential(module(dict(states)), module({"scaling_fwd": current, "scaling_bwd": current}),
                                torch.nn.Linear(2, 2))
    row0, scale = states["scaling_fwd"].amax_history[0], states["scaling_fwd"].scale  # TE's buffer views
    snapshot = DelayedScalingSnapshot([chunk])
    assert len(snapshot.tensors) == 4
    row0.fill_(5.0)  # the prefix's casts, then its update: histories rolled, scales recomputed
    states["scaling_fwd"].amax_history.copy_(states["scaling_fwd"].amax_history.roll(-1, 0))
    scale.fill_(89.6)
    states["scaling_bwd"].scale.fill_(3.0)
    snapshot.restore()
    assert torch.equal(row0, torch.zeros(2)) and torch.equal(scale, torch.ones(2))
    for state in states.values():
        assert torch.equal(state.amax_history, torch.zeros(3, 2)) and torch.equal(state.scale, torch.ones(2))
    assert DelayedScalingSnapshot([torch.nn.Linear(2, 2)]).tensors == []
