"""What the rank runs for tests/test_te_standin_fp8.py (tests/te_standin first on its path; never
imports TransformerEngine at import time): the stand-in's FP8 on its emulated FP8 device, for
the per-tensor recipes (delayed scaling, current scaling) and the formats E4M3 and HYBRID.

Each function takes (rank, case) and returns plain tensors, tuples and strings for the test."""
from __future__ import annotations

import torch

from te_thd_cases import record_raised

RECIPES = [("delayed", "HYBRID"), ("delayed", "E4M3"), ("tensorwise", "HYBRID"), ("tensorwise", "E4M3")]


def _recipe(name: str, fmt: str):
    from transformer_engine.common.recipe import DelayedScaling, Float8CurrentScaling, Format

    if name == "delayed":
        return DelayedScaling(fp8_format=Format[fmt], amax_history_len=4)
    return Float8CurrentScaling(fp8_format=Format[fmt])


def quantizers(rank: int, case: dict) -> dict:
    """Both per-tensor quantizers on chosen values, and the FNUZ dtypes on an emulated gfx942."""
    from transformer_engine.common.recipe import DelayedScaling, Format
    from transformer_engine.pytorch import quantization as q
    from transformer_engine.pytorch.tensor.float8_tensor import Float8CurrentScalingQuantizer, Float8Quantizer

    x = torch.tensor([[0.5, -3.0, 20000.0, float("nan")], [1e-3, 2.0, -7.0, 0.0]])
    rec = {"x": x}
    delayed = Float8Quantizer(torch.tensor([4.0]), torch.zeros(1), torch.float8_e5m2)
    delayed.internal = True
    first = delayed(x)
    amax_first = delayed.amax.clone()
    delayed(x * 0.5)  # a smaller tensor: the recorded amax stays the larger (atomic max)
    rec["delayed"] = {"data": first._data, "scale_inv": first._scale_inv, "amax_first": amax_first,
                      "amax_second": delayed.amax.clone(), "dequantized": first.dequantize()}
    for pow2 in (False, True):
        cur = Float8CurrentScalingQuantizer(torch.float8_e4m3fn, force_pow_2_scales=pow2)
        cur.internal = True
        y = torch.tensor([[0.3, -5.0], [2.5, 1.0]])
        out = cur(y)
        rec[f"current_pow2={pow2}"] = {"y": y, "data": out._data, "scale": cur.scale.clone(),
                                       "scale_inv": out._scale_inv}
    zero = Float8CurrentScalingQuantizer(torch.float8_e4m3fn)
    zero.internal = True
    zero(torch.zeros(2, 2))
    rec["current_zero_scale"] = zero.scale.clone()
    for platform in ("sm90", "gfx942"):
        with q.emulate_fp8_device(platform):
            rec[platform] = {fmt: (q.get_fp8_torch_dtype(DelayedScaling(fp8_format=Format[fmt]), True),
                                   q.get_fp8_torch_dtype(DelayedScaling(fp8_format=Format[fmt]), False),
                                   q.get_fp8_max(DelayedScaling(fp8_format=Format[fmt]), True))
                             for fmt in ("E4M3", "HYBRID")}
    return rec


def delayed_update(rank: int, case: dict) -> dict:
    """TE's fused amax-and-scale update on hand-made histories."""
    from transformer_engine.pytorch.quantization import fused_amax_and_scale_update_after_reduction as update

    rec = {}
    for algo in ("max", "most_recent"):
        history = torch.tensor([[5.0, 0.0, 2.0], [1.0, 4.0, 8.0], [3.0, 4.0, 1.0]])  # 3 rows, 3 quantizers
        scale = torch.tensor([2.0, 3.0, 5.0])
        reduced = torch.tensor([0.0, 0.0, 6.0])  # quantizer 2's amax reduced across ranks to 6
        update(reduced, [history], [scale], algo, 448.0, 1)
        rec[algo] = (history, scale)
    return rec


def _perturbed_with_stale_main_grads(net: torch.nn.ModuleList) -> torch.nn.ModuleList:
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn(p.shape))
    for p in net.parameters():
        p.main_grad = torch.full(p.shape, 7.0)  # stale: the first microbatch overwrites it
        p.grad_added_to_main_grad = False
    return net


def _net(te, delay: bool, fuse: bool):
    torch.manual_seed(3)
    kw = dict(delay_wgrad_compute=delay, fuse_wgrad_accumulation=fuse, params_dtype=torch.float32, device="cpu")
    return _perturbed_with_stale_main_grads(torch.nn.ModuleList([te.LayerNormLinear(32, 48, bias=True, **kw),
                                                                 te.Linear(48, 16, bias=True, **kw)]))


def _fp8_state(net) -> dict:
    """Every layer's recipe state: scales and amax histories (delayed), the quantizers' own
    amax and scale buffers (current scaling)."""
    out = {}
    for i, layer in enumerate(net):
        for key in ("scaling_fwd", "scaling_bwd"):
            state = layer.fp8_meta[key]
            if hasattr(state, "amax_history"):
                out[f"{i}.{key}.amax_history"] = state.amax_history.clone()
                out[f"{i}.{key}.scale"] = state.scale.clone()
            used = (0, 1) if key == "scaling_fwd" else (0,)  # input, weight; grad_output (the others: unset)
            for j in used:
                quantizer = layer.quantizers[key][j]
                out[f"{i}.{key}.q{j}"] = (quantizer.amax.clone(), quantizer.scale.clone())
    return out


def _step(te, net, recipe, xs, delay: bool, handed: list) -> dict:
    """Forwards of every microbatch under one autocast (is_first_microbatch on the first), then
    their backwards in order; delayed: every W after every B, oldest first."""
    rec = {}
    with te.autocast(recipe=recipe):
        outs = [net[1](net[0](x, is_first_microbatch=mb == 0), is_first_microbatch=mb == 0) for mb, x in enumerate(xs)]
    for mb, out in enumerate(outs):
        (out.float() ** 2).mean().backward()
        rec[f"dgrad{mb}"] = xs[mb].grad.clone()
    rec["out"] = torch.stack([o.detach() for o in outs])
    if delay:
        rec["state_before_w"] = _fp8_state(net)
        for layer in net:  # what each put holds until W
            handed += [[(type(t).__name__, t.get_usages(), t._fp8_dtype) for t in tensors]
                       for tensors, _ in list(layer.wgrad_store.context.queue)]
        for _ in xs:
            for layer in net:
                layer.backward_dw()
    rec["state"] = _fp8_state(net)
    # weights: main_grad (their .grad is TE's uninitialised dummy, get_dummy_wgrad); the rest: .grad
    rec["grads"] = {n: (p.main_grad.clone(), None if n.endswith(".weight") else p.grad.clone())
                    for n, p in net.named_parameters()}
    return rec


def _undivided_and_delayed(case: dict, make_net, run_step, inputs) -> dict:
    """Per recipe of `case` ("recipes", default RECIPES): two training steps through `make_net(te, delay,
    fuse=True)` (`run_step` each, on `inputs(step)`), undivided and delayed, on the emulated device."""
    import transformer_engine.pytorch as te
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager, emulate_fp8_device

    rec = {}
    for name, fmt in case.get("recipes", RECIPES):
        got = {}
        for delay in (False, True):
            FP8GlobalStateManager.reset()
            net = make_net(te, delay, fuse=True)
            steps, handed = [], []
            with emulate_fp8_device(case.get("platform", "sm90")):
                for step in range(2):
                    xs = inputs(step)
                    for p in net.parameters():
                        p.grad = None
                    steps.append(run_step(te, net, _recipe(name, fmt), xs, delay, handed))
            got["delayed" if delay else "undivided"] = {"steps": steps, "handed": handed}
        rec[f"{name} {fmt}"] = got
    return rec


def undivided_vs_delayed(rank: int, case: dict) -> dict:
    """Two training steps of two microbatches through LayerNormLinear + Linear, fused into
    main_grad, with the weight-gradient GEMMs run in B (undivided) and delayed to backward_dw."""
    def inputs(step):
        gen = torch.Generator().manual_seed(40 + step)
        return [torch.randn(2, 8, 32, generator=gen).requires_grad_(True) for _ in range(2)]

    return _undivided_and_delayed(case, _net, _step, inputs)


def weight_cache(rank: int, case: dict) -> dict:
    """is_first_microbatch: True casts the weight and caches it, False reuses the cache (a changed
    weight is not seen), None casts afresh each time without caching."""
    import transformer_engine.pytorch as te
    from transformer_engine.common.recipe import Float8CurrentScaling
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager, emulate_fp8_device

    FP8GlobalStateManager.reset()
    torch.manual_seed(5)
    layer = te.Linear(32, 16, bias=False, params_dtype=torch.float32, device="cpu")
    x = torch.randn(16, 32)
    rec = {}
    with emulate_fp8_device(), torch.no_grad():
        for label, flag, bump in (("first", True, 0.0), ("cached", False, 1.0), ("recast", True, 0.0),
                                  ("uncached", None, 0.0)):
            layer.weight.add_(bump)
            with te.autocast(recipe=Float8CurrentScaling()):  # the input's scale its own: the same each time
                rec[label] = layer(x, is_first_microbatch=flag).clone()
            rec[f"{label}_workspaces"] = sorted(layer._fp8_workspaces)
    return rec


def refusals(rank: int, case: dict) -> dict:
    import transformer_engine.pytorch as te
    from transformer_engine.common.recipe import (CustomRecipe, DelayedScaling, Float8BlockScaling,
                                                  MXFP8BlockScaling, NVFP4BlockScaling)
    from transformer_engine.pytorch.cpp_extensions import general_gemm
    from transformer_engine.pytorch.quantization import emulate_fp8_device
    from transformer_engine.pytorch.tensor.float8_tensor import Float8Quantizer

    def fp8_layer(shape, recipe=None, features=(32, 16)):
        with emulate_fp8_device(), te.autocast(recipe=recipe):
            te.Linear(*features, params_dtype=torch.float32, device="cpu")(torch.zeros(*shape))

    def gemm_missing_transpose():
        q = Float8Quantizer(torch.ones(1), torch.zeros(1), torch.float8_e4m3fn, columnwise=False)
        q.internal = True
        a, b = q(torch.ones(16, 32)), q(torch.ones(16, 32))
        general_gemm(a, b, layout="NT")

    def fp8_layer_by_environment(platform):
        """No emulate_fp8_device(): the switch a test sets in the processes it starts (Megatron-LM's ranks)."""
        import os

        from transformer_engine.pytorch.quantization import EMULATE_ENV

        if platform is not None:
            os.environ[EMULATE_ENV] = platform
        try:
            with te.autocast(recipe=DelayedScaling()):
                te.Linear(32, 16, params_dtype=torch.float32, device="cpu")(torch.zeros(16, 32))
        finally:
            os.environ.pop(EMULATE_ENV, None)

    attempts = {"no_fp8_device": lambda: fp8_layer_by_environment(None),
                "environment_sm90": lambda: fp8_layer_by_environment("sm90"),
                "environment_sm80": lambda: fp8_layer_by_environment("sm80"),
                "blockwise": lambda: fp8_layer((16, 32), Float8BlockScaling()),
                "mxfp8": lambda: fp8_layer((16, 32), MXFP8BlockScaling()),
                "nvfp4": lambda: fp8_layer((16, 32), NVFP4BlockScaling()),
                "custom": lambda: fp8_layer((16, 32), CustomRecipe(qfactory=lambda role: None)),
                "rows_not_multiple_of_8": lambda: fp8_layer((12, 32)),
                "features_not_multiple_of_16": lambda: fp8_layer((16, 24), features=(24, 16)),
                "unknown_platform": lambda: emulate_fp8_device("sm80").__enter__(),
                "gemm_missing_transpose": gemm_missing_transpose}
    return record_raised(attempts)


def gemm(rank: int, case: dict) -> dict:
    """general_gemm on FP8 operands in the three layouts against an fp32 matmul of the
    dequantized operands (what torch._scaled_mm computes on CPU)."""
    from transformer_engine.pytorch.cpp_extensions import general_gemm
    from transformer_engine.pytorch.tensor.float8_tensor import Float8Quantizer

    gen = torch.Generator().manual_seed(9)
    w, x, dy = (torch.randn(*s, generator=gen) for s in ((16, 32), (48, 32), (48, 16)))
    quantize = []
    for scale in (3.0, 0.7, 900.0):
        q = Float8Quantizer(torch.tensor([scale]), torch.zeros(1), torch.float8_e4m3fn)
        q.internal = True
        quantize.append(q)
    qw, qx, qdy = quantize[0](w), quantize[1](x), quantize[2](dy)
    rec = {}
    for layout, a, b in (("TN", qw, qx), ("NN", qw, qdy), ("NT", qx, qdy)):
        out, *_ = general_gemm(a, b, layout=layout, out_dtype=torch.float32)
        da, db = a.dequantize(), b.dequantize()
        want = db @ da.t() if layout == "TN" else (db @ da if layout == "NN" else db.t() @ da)
        rec[layout] = (out, want)
    return rec


def attention_under_fp8(rank: int, case: dict) -> dict:
    """DotProductAttention in bf16 without an autocast, under FP8 autocasts of the per-tensor recipes
    (fp8_dpa / fp8_mha off), and with fp8_dpa or fp8_mha on; megatron-core's TEDelayedScaling keyword."""
    import transformer_engine.pytorch as te
    from transformer_engine.common.recipe import DelayedScaling
    from transformer_engine.pytorch.quantization import emulate_fp8_device

    torch.manual_seed(5)
    q, k, v = (torch.randn(16, 2, 4, 8, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    attn = te.DotProductAttention(4, 8, attn_mask_type="causal")

    def run(recipe=None) -> tuple:
        for x in (q, k, v):
            x.grad = None
        with emulate_fp8_device(), te.fp8_autocast(enabled=recipe is not None, fp8_recipe=recipe):
            out = attn(q, k, v)
        out.float().square().sum().backward()
        return (out.detach().clone(), *(x.grad.clone() for x in (q, k, v)))

    rec = {"plain": run(), **{f"{name}_{fmt}": run(_recipe(name, fmt)) for name, fmt in RECIPES},
           "fp8_enabled_inside": None}
    rec["fp8_enabled_inside"] = attn.fp8  # set by the last (FP8) call
    rec["raised"] = record_raised({
        "fp8_dpa": lambda: run(DelayedScaling(fp8_dpa=True)), "fp8_mha": lambda: run(DelayedScaling(fp8_mha=True))})
    # megatron-core 0.16.1 TEDelayedScaling passes override_linear_precision; TE's pydantic recipe drops it
    rec["override_linear_precision"] = repr(DelayedScaling(override_linear_precision=(False, False, False)))
    return rec


# --- GroupedLinear (TE grouped experts) ---------------------------------------------------------

GROUPED_SPLITS = [[16, 0, 32], [32, 16, 0]]  # per microbatch: 16-aligned, one expert given no rows


def _grouped_net(te, delay: bool, fuse: bool):
    """fc1 (bias in the GEMM) and fc2 (bias returned, as megatron's TEGroupedMLP builds them)."""
    torch.manual_seed(4)
    kw = dict(delay_wgrad_compute=delay, fuse_wgrad_accumulation=fuse, params_dtype=torch.float32, device="cpu")
    return _perturbed_with_stale_main_grads(torch.nn.ModuleList([
        te.GroupedLinear(3, 32, 48, bias=True, **kw), te.GroupedLinear(3, 48, 16, bias=True, return_bias=True, **kw)]))


def _grouped_forward(net, x, splits, first):
    h = net[0](x, splits, is_first_microbatch=first)
    out, biases = net[1](torch.nn.functional.gelu(h), splits, is_first_microbatch=first)
    return torch.cat([o + b for o, b in zip(torch.split(out, splits), biases)])


def _grouped_state(net) -> dict:
    """Every recipe state's scales and amax histories, and each used quantizer's amax / scale."""
    out = {}
    for i, layer in enumerate(net):
        for key, used in (("scaling_fwd", (0, 1)), ("scaling_bwd", (0,))):
            state = layer.fp8_meta[key]
            if hasattr(state, "amax_history"):
                out[f"{i}.{key}.amax_history"] = state.amax_history.clone()
                out[f"{i}.{key}.scale"] = state.scale.clone()
            per_gemm = 3 if key == "scaling_fwd" else 2
            for g in range(layer.num_gemms):
                for j in used:
                    q = layer.quantizers[key][per_gemm * g + j]
                    out[f"{i}.{key}.q{per_gemm * g + j}"] = (q.amax.clone(), q.scale.clone())
    return out


def _grouped_step(te, net, recipe, xs, delay: bool, handed: list) -> dict:
    rec = {}
    with te.autocast(recipe=recipe):
        outs = [_grouped_forward(net, x, splits, mb == 0) for mb, (x, splits) in enumerate(zip(xs, GROUPED_SPLITS))]
    for mb, out in enumerate(outs):
        (out.float() ** 2).sum().backward()  # (a mean's gradients fall below E4M3's smallest value at scale 1)
        rec[f"dgrad{mb}"] = xs[mb].grad.clone()
    rec["out"] = torch.stack([o.detach() for o in outs])
    if delay:
        rec["state_before_w"] = _grouped_state(net)
        for layer in net:  # what each put holds until W: [inputs, grad outputs, outputs]
            handed += [[[(type(t).__name__, isinstance(t, torch.Tensor), t.get_usages(), t._fp8_dtype) for t in part]
                        for part in tensors[:2]] for tensors, _ in list(layer.wgrad_store.context.queue)]
        for _ in xs:
            for layer in net:
                layer.backward_dw()
    rec["state"] = _grouped_state(net)
    rec["grads"] = {n: (p.main_grad.clone(), None if ".weight" in f".{n}" else p.grad.clone())
                    for n, p in net.named_parameters()}
    return rec


def grouped_undivided_vs_delayed(rank: int, case: dict) -> dict:
    """Two steps of two microbatches through two GroupedLinears (3 experts, fused into main_grad,
    is_first_microbatch caching the quantized weights), the weight-gradient GEMMs run in B
    (undivided) and delayed to backward_dw; and the first step without FP8 (the control)."""
    import transformer_engine.pytorch as te
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager

    def inputs(step):
        gen = torch.Generator().manual_seed(50 + step)
        return [torch.randn(sum(s), 32, generator=gen).requires_grad_(True) for s in GROUPED_SPLITS]

    rec = _undivided_and_delayed(case, _grouped_net, _grouped_step, inputs)
    FP8GlobalStateManager.reset()
    net = _grouped_net(te, False, fuse=True)
    with torch.no_grad():
        rec["no_fp8_out"] = torch.stack([_grouped_forward(net, x.detach(), s, mb == 0)
                                         for mb, (x, s) in enumerate(zip(inputs(0), GROUPED_SPLITS))])
    return rec


def grouped_alignment(rank: int, case: dict) -> dict:
    """What TE raises for an expert whose rows are not a multiple of 16 under FP8 (the weight-gradient
    GEMM: its k), where it raises (B undelayed, backward_dw delayed), and TE's Fp8Padding /
    Fp8Unpadding around the same GroupedLinear."""
    import transformer_engine.pytorch as te
    from transformer_engine.common.recipe import DelayedScaling
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager, emulate_fp8_device

    def layer(delay):
        torch.manual_seed(6)
        return te.GroupedLinear(2, 32, 16, bias=False, delay_wgrad_compute=delay, params_dtype=torch.float32,
                                device="cpu")

    rec = {}
    for delay in (False, True):
        FP8GlobalStateManager.reset()
        lin, x = layer(delay), torch.randn(20, 32, requires_grad=True)
        with emulate_fp8_device():
            with te.autocast(recipe=DelayedScaling()):
                out = lin(x, [5, 15])
            rec[f"forward_ran_{delay}"] = tuple(out.shape)
            rec[f"raised_{delay}"] = record_raised({"backward": lambda: out.sum().backward(),
                                                    "backward_dw": lambda: lin.backward_dw()})
    FP8GlobalStateManager.reset()
    lin, pad, unpad = layer(False), te.Fp8Padding(2), te.Fp8Unpadding(2)
    x = torch.randn(20, 32, requires_grad=True)
    with emulate_fp8_device():
        with te.autocast(recipe=DelayedScaling()):
            padded, padded_splits = pad(x, [5, 15])
            y = unpad(lin(padded, padded_splits), [5, 15])
            aligned = torch.randn(32, 32)
            rec["aligned_is_same"] = pad(aligned, [16, 16])[0] is aligned and unpad(aligned, [16, 16]) is aligned
        y.sum().backward()
    rec.update(padded=padded.detach(), padded_splits=padded_splits, x=x.detach(), y_rows=y.shape[0],
               x_grad=x.grad, weight_grads=[lin.weight0.grad, lin.weight1.grad],
               layernorm_mlp=record_raised({"build": lambda: te.LayerNormMLP(32, 64)}))
    return rec
