"""The TransformerEngine stand-in's scenarios, run the same way against whichever
`transformer_engine` this interpreter imports: the stand-in (tests/te_standin first on
PYTHONPATH) or a real TransformerEngine (on a GPU). Used by tests/test_te_standin_conformance.py,
which runs this file once per implementation and compares what each recorded.

    python tests/te_conformance_cases.py OUT.pt

Every case builds its layers from the same seeded CPU tensors (copied into the layer's
parameters), feeds the same inputs (on CUDA when TE is real) and records, on CPU: outputs, the
input gradient, what each parameter's .grad / main_grad holds after B, the delayed weight and
bias gradients after backward_dw, facts (types handed to put, which gradients exist when), and
for the refusals the exception type and message. fp32 throughout: on a GPU, TE's attention
then takes its unfused backend, the function the stand-in computes. Except
`dot_product_attention_thd_bf16_rows`, which records only facts (output rows, which are zero): in
bf16 TE runs packed sequences (thd) on cuDNN's fused attention, whose values round otherwise.
"""
from __future__ import annotations

import sys
import traceback

import torch

from te_thd_cases import record_raised

CASES = ["linear_delayed", "linear_row_return_bias", "layernorm_linear_delayed", "rmsnorm_linear_zero_centered",
         "fused_main_grad_first_microbatch", "dot_product_attention_causal_gqa", "dot_product_attention_thd_fp32",
         "dot_product_attention_thd_bf16_rows", "norms",
         "fp8_bias_gradient_in_b", "fp8_delayed_hybrid_wgrad", "fp8_delayed_e4m3_wgrad",
         "fp8_tensorwise_hybrid_wgrad", "fp8_tensorwise_e4m3_wgrad", "grouped_linear_delayed", "grouped_linear_fused_return_bias",
         "fp8_grouped_delayed_hybrid_wgrad", "fp8_grouped_tensorwise_e4m3_wgrad", "refusals"]


def _device(te) -> str:
    standin = getattr(te, "__file__", "").find("te_standin") >= 0
    return "cpu" if standin else "cuda"


def _seeded(*shape, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _fill(layer, seed: int) -> None:
    """Every floating parameter of `layer` from a seeded CPU tensor (norm weights near 1)."""
    with torch.no_grad():
        for i, (name, p) in enumerate(sorted(layer.named_parameters())):
            value = _seeded(*p.shape, seed=seed + i) * 0.2
            if "layer_norm_weight" in name or name == "weight" and p.dim() == 1:
                value = value + (0.0 if getattr(layer, "zero_centered_gamma", False) else 1.0)
            p.copy_(value.to(p.device, p.dtype))


def _cpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().clone()
    return x


def _grads(layer) -> dict:
    return {name: _cpu(p.grad) for name, p in layer.named_parameters()}


def _record_puts(layer) -> list:
    """Wrap the layer's store's put to record the types it is handed."""
    handed, put = [], layer.wgrad_store.put

    def recording(tensor_list, func):
        handed.append([(type(item).__name__, isinstance(item, torch.Tensor)) for item in tensor_list])
        return put(tensor_list, func)

    layer.wgrad_store.put = recording
    return handed


def _delayed_linear_case(te, layer, x_shape, seed: int, *, returns_bias=False) -> dict:
    dev = _device(te)
    _fill(layer, seed)
    handed = _record_puts(layer) if layer.wgrad_store.delay_wgrad_compute() else []
    x = _seeded(*x_shape, seed=seed + 100).to(dev).requires_grad_(True)
    out = layer(x)
    bias_out = None
    if returns_bias:
        out, bias_out = out
    loss = (out.float() ** 2).sum() + (0 if bias_out is None else (out.float() * bias_out.float()).sum())
    loss.backward()
    rec = {"out": _cpu(out), "dgrad": _cpu(x.grad), "after_b": _grads(layer), "puts": handed,
           "need_backward_dw": layer.need_backward_dw()}
    layer.backward_dw()
    rec["after_w"] = _grads(layer)
    return rec


def linear_delayed(te):
    dev = _device(te)
    layer = te.Linear(16, 12, bias=True, delay_wgrad_compute=True, device=dev, params_dtype=torch.float32)
    return _delayed_linear_case(te, layer, (5, 3, 16), seed=1)


def linear_row_return_bias(te):
    dev = _device(te)
    layer = te.Linear(16, 12, bias=True, return_bias=True, parallel_mode="row", delay_wgrad_compute=True,
                      device=dev, params_dtype=torch.float32)
    return _delayed_linear_case(te, layer, (5, 3, 16), seed=2, returns_bias=True)


def layernorm_linear_delayed(te):
    dev = _device(te)
    layer = te.LayerNormLinear(16, 24, eps=1e-5, bias=True, delay_wgrad_compute=True, device=dev,
                               params_dtype=torch.float32)
    return _delayed_linear_case(te, layer, (5, 3, 16), seed=3)


def rmsnorm_linear_zero_centered(te):
    dev = _device(te)
    layer = te.LayerNormLinear(16, 8, eps=1e-6, bias=False, normalization="RMSNorm", zero_centered_gamma=True,
                               delay_wgrad_compute=True, device=dev, params_dtype=torch.float32)
    return _delayed_linear_case(te, layer, (4, 2, 16), seed=4)


def fused_main_grad_first_microbatch(te):
    """fuse_wgrad_accumulation: B leaves main_grad alone (megatron's grad_added_to_main_grad set,
    a dummy handed to autograd); W writes main_grad, overwriting on the first microbatch."""
    dev = _device(te)
    layer = te.Linear(16, 12, bias=True, fuse_wgrad_accumulation=True, delay_wgrad_compute=True, device=dev,
                      params_dtype=torch.float32)
    _fill(layer, 5)
    layer.weight.main_grad = torch.full((12, 16), 7.0, device=dev)  # stale: the first microbatch overwrites it
    layer.weight.grad_added_to_main_grad = False
    rec = {}
    for mb, first in enumerate((True, False)):
        x = _seeded(4, 2, 16, seed=50 + mb).to(dev).requires_grad_(True)
        (layer(x, is_first_microbatch=first).float() ** 2).sum().backward()
        rec[f"main_grad_after_b{mb}"] = _cpu(layer.weight.main_grad)
        rec[f"grad_added_to_main_grad_b{mb}"] = bool(layer.weight.grad_added_to_main_grad)
        rec[f"dgrad{mb}"] = _cpu(x.grad)
    layer.backward_dw()
    rec["main_grad_after_w0"] = _cpu(layer.weight.main_grad)
    layer.backward_dw()
    rec["main_grad_after_w1"] = _cpu(layer.weight.main_grad)
    rec["bias_grad"] = _cpu(layer.bias.grad)
    return rec


def dot_product_attention_causal_gqa(te):
    dev = _device(te)
    s, b, heads, groups, d = 6, 2, 4, 2, 8
    attn = te.DotProductAttention(heads, d, num_gqa_groups=groups, attention_dropout=0.0, qkv_format="sbhd",
                                  attn_mask_type="causal")
    q = _seeded(s, b, heads, d, seed=60).to(dev).requires_grad_(True)
    k = _seeded(s, b, groups, d, seed=61).to(dev).requires_grad_(True)
    v = _seeded(s, b, groups, d, seed=62).to(dev).requires_grad_(True)
    out = attn(q, k, v)
    (out.float() ** 2).sum().backward()
    return {"out": _cpu(out), "shape": tuple(out.shape), "dq": _cpu(q.grad), "dk": _cpu(k.grad), "dv": _cpu(v.grad)}


def _thd_inputs(t: int, dtype, dev: str, seed: int) -> tuple:
    heads, groups, d = 4, 2, 16
    q = _seeded(t, heads, d, seed=seed).to(dev, dtype).requires_grad_(True)
    k = _seeded(t, groups, d, seed=seed + 1).to(dev, dtype).requires_grad_(True)
    v = _seeded(t, groups, d, seed=seed + 2).to(dev, dtype).requires_grad_(True)
    return (heads, groups, d), q, k, v


def dot_product_attention_thd_fp32(te):
    """A pack (sequences of 5, 3 and 7 tokens, then 1 of padding as a sequence of its own) in the thd
    format, as megatron-core hands it over with PackedSeqParams: TE's unfused backend in fp32. And the
    pack without its padding counted (cu_seqlens ending at 15 of 16 rows): cu_seqlens_q[-1] rows out."""
    dev = _device(te)
    (heads, groups, d), q, k, v = _thd_inputs(16, torch.float32, dev, seed=70)
    attn = te.DotProductAttention(heads, d, num_gqa_groups=groups, attention_dropout=0.0, qkv_format="thd",
                                  attn_mask_type="padding_causal")
    cu = torch.tensor([0, 5, 8, 15, 16], dtype=torch.int32, device=dev)
    out = attn(q, k, v, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=7, max_seqlen_kv=7)
    (out.float() ** 2).sum().backward()
    rec = {"out": _cpu(out), "shape": tuple(out.shape), "dq": _cpu(q.grad), "dk": _cpu(k.grad), "dv": _cpu(v.grad)}
    short = attn(q, k, v, cu_seqlens_q=cu[:-1], cu_seqlens_kv=cu[:-1], max_seqlen_q=7, max_seqlen_kv=7)
    rec["uncovered_tail_shape"] = tuple(short.shape)
    return rec


def dot_product_attention_thd_bf16_rows(te):
    """bf16 thd (cuDNN's fused attention): the output's rows, and which are zero, with the tail after
    the last sequence not counted and with padding between sequences (cu_seqlens_padded)."""
    dev = _device(te)
    (heads, groups, d), q, k, v = _thd_inputs(18, torch.bfloat16, dev, seed=80)
    attn = te.DotProductAttention(heads, d, num_gqa_groups=groups, attention_dropout=0.0, qkv_format="thd",
                                  attn_mask_type="padding_causal")
    cu = torch.tensor([0, 5, 8, 15], dtype=torch.int32, device=dev)
    padded = torch.tensor([0, 6, 10, 17], dtype=torch.int32, device=dev)
    rec = {}
    for name, extra in (("tail", {}), ("padded", {"cu_seqlens_q_padded": padded, "cu_seqlens_kv_padded": padded})):
        out = attn(q, k, v, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=7, max_seqlen_kv=7, **extra)
        rows = out.detach().float().cpu().abs().sum(-1)
        rec[name] = {"shape": tuple(out.shape), "zero_rows": [i for i in range(rows.shape[0]) if rows[i] == 0]}
    return rec


def norms(te):
    dev = _device(te)
    rec = {}
    for cls in ("LayerNorm", "RMSNorm"):
        norm = getattr(te, cls)(16, eps=1e-5, device=dev, params_dtype=torch.float32)
        _fill(norm, 70)
        x = _seeded(3, 2, 16, seed=71).to(dev).requires_grad_(True)
        out = norm(x)
        (out ** 2).sum().backward()
        rec[cls] = {"out": _cpu(out), "dgrad": _cpu(x.grad), "grads": _grads(norm),
                    "params": sorted(n for n, _ in norm.named_parameters())}
    return rec


def fp8_bias_gradient_in_b(te):
    """Under FP8 (a real FP8 device; the stand-in's emulated one) a delayed Linear gets its bias
    gradient in B and hands put quantized storages. Both quantize the same way; values are
    compared loosely (cuBLASLt's FP8 accumulation is not the stand-in's)."""
    from transformer_engine.pytorch import quantization

    emulate = getattr(quantization, "emulate_fp8_device", None)
    if emulate is None and not te.is_fp8_available():
        return {"unavailable": "no FP8 on this device"}
    import contextlib

    from transformer_engine.common.recipe import DelayedScaling

    dev = _device(te)
    layer = te.Linear(32, 32, bias=True, delay_wgrad_compute=True, device=dev, params_dtype=torch.float32)
    _fill(layer, 80)
    handed = _record_puts(layer)
    x = _seeded(16, 32, seed=81).to(dev).requires_grad_(True)
    with (emulate() if emulate else contextlib.nullcontext()), te.fp8_autocast(enabled=True, fp8_recipe=DelayedScaling()):
        out = layer(x)
    (out.float() ** 2).sum().backward()
    rec = {"bias_grad_after_b": layer.bias.grad is not None, "weight_grad_after_b": layer.weight.grad is not None,
           "puts": handed, "out": _cpu(out), "bias_grad": _cpu(layer.bias.grad)}
    layer.backward_dw()
    rec["weight_grad"] = _cpu(layer.weight.grad)
    return rec


def _fp8_device_and_recipe(te, recipe_name: str, fmt: str) -> tuple:
    """(a context answering as an FP8 device: the stand-in's emulated one, nothing on a real one, or None
    where there is none; the per-tensor recipe of that name and format)."""
    import contextlib

    from transformer_engine.common.recipe import DelayedScaling, Float8CurrentScaling, Format
    from transformer_engine.pytorch import quantization

    emulate = getattr(quantization, "emulate_fp8_device", None)
    if emulate is None and not te.is_fp8_available():
        return None, None
    recipe = (DelayedScaling(fp8_format=Format[fmt], amax_history_len=4) if recipe_name == "delayed"
              else Float8CurrentScaling(fp8_format=Format[fmt]))
    return emulate or contextlib.nullcontext, recipe


def _fp8_wgrad_case(te, recipe_name: str, fmt: str) -> dict:
    """LayerNormLinear + Linear under a per-tensor FP8 recipe, weight gradients delayed and fused
    into main_grad, two microbatches (is_first_microbatch: the quantized weight cached): outputs,
    input gradients, what put holds (types, usages), main_grad after B (untouched) and after each
    backward_dw, the GEMM biases' gradients (from B under FP8), and the scaling state (delayed:
    every scale and amax history; the first microbatch's casts used scale 1)."""
    device, recipe = _fp8_device_and_recipe(te, recipe_name, fmt)
    if device is None:
        return {"unavailable": "no FP8 on this device"}
    dev = _device(te)
    kw = dict(bias=True, fuse_wgrad_accumulation=True, delay_wgrad_compute=True, device=dev,
              params_dtype=torch.float32)
    layers = [te.LayerNormLinear(32, 48, eps=1e-5, **kw), te.Linear(48, 16, **kw)]
    for i, layer in enumerate(layers):
        _fill(layer, 90 + 10 * i)
        layer.weight.main_grad = torch.zeros(layer.weight.shape, device=dev)
        layer.weight.grad_added_to_main_grad = False
    handed = [_record_usages(layer) for layer in layers]
    xs = [_seeded(2, 8, 32, seed=95 + mb).to(dev).requires_grad_(True) for mb in range(2)]
    with device():
        with te.autocast(recipe=recipe):
            outs = [layers[1](layers[0](x, is_first_microbatch=mb == 0), is_first_microbatch=mb == 0)
                    for mb, x in enumerate(xs)]
        for out in outs:
            (out.float() ** 2).mean().backward()
        rec = {"out": [_cpu(o) for o in outs], "dgrad": [_cpu(x.grad) for x in xs], "puts": handed,
               "main_grad_after_b": [_cpu(layer.weight.main_grad) for layer in layers],
               "bias_grad_after_b": [_cpu(layer.bias.grad) for layer in layers]}
        for w in range(2):
            for layer in layers:
                layer.backward_dw()
            rec[f"main_grad_after_w{w}"] = [_cpu(layer.weight.main_grad) for layer in layers]
    if recipe_name == "delayed":
        rec["scaling"] = [{key: (_cpu(layer.fp8_meta[key].scale), _cpu(layer.fp8_meta[key].amax_history))
                           for key in ("scaling_fwd", "scaling_bwd")} for layer in layers]
    return rec


def _record_usages(layer) -> list:
    """Wrap the layer's store's put: per item, its type and (quantized) which data it holds."""
    handed, put = [], layer.wgrad_store.put

    def recording(tensor_list, func):
        handed.append([(type(item).__name__, None if isinstance(item, torch.Tensor) else item.get_usages())
                       for item in tensor_list])
        return put(tensor_list, func)

    layer.wgrad_store.put = recording
    return handed


def fp8_delayed_hybrid_wgrad(te):
    return _fp8_wgrad_case(te, "delayed", "HYBRID")


def fp8_delayed_e4m3_wgrad(te):
    return _fp8_wgrad_case(te, "delayed", "E4M3")


def fp8_tensorwise_hybrid_wgrad(te):
    return _fp8_wgrad_case(te, "tensorwise", "HYBRID")


def fp8_tensorwise_e4m3_wgrad(te):
    return _fp8_wgrad_case(te, "tensorwise", "E4M3")


def _grouped_puts(layer) -> list:
    """Wrap a GroupedLinear's store's put: what each of its three lists holds (type, is a tensor)."""
    handed, put = [], layer.wgrad_store.put

    def recording(tensor_list, func):
        handed.append([[(type(item).__name__, isinstance(item, torch.Tensor)) for item in part] for part in tensor_list])
        return put(tensor_list, func)

    layer.wgrad_store.put = recording
    return handed


def grouped_linear_delayed(te):
    """GroupedLinear delayed, unfused, bias in the GEMM, one expert given no rows: which gradients
    exist after B (their values there are TE's unfilled buffers: not compared), then backward_dw's."""
    dev = _device(te)
    layer = te.GroupedLinear(3, 16, 12, bias=True, delay_wgrad_compute=True, device=dev, params_dtype=torch.float32)
    _fill(layer, 9)
    handed = _grouped_puts(layer)
    x = _seeded(15, 16, seed=109).to(dev).requires_grad_(True)
    out = layer(x, [4, 0, 11])
    (out.float() ** 2).sum().backward()
    rec = {"out": _cpu(out), "dgrad": _cpu(x.grad), "puts": handed,
           "grad_after_b": {n: p.grad is not None for n, p in layer.named_parameters()},
           "marked": sorted(n for n, p in layer.named_parameters() if getattr(p, "skip_backward_post_hook", False))}
    layer.backward_dw()
    rec["after_w"] = _grads(layer)
    return rec


def grouped_linear_fused_return_bias(te):
    """Fused into main_grad with megatron's grad_added_to_main_grad, biases returned (their gradient
    from autograd in B): main_grad untouched by B, written by backward_dw, overwritten on the first
    microbatch."""
    dev = _device(te)
    layer = te.GroupedLinear(2, 8, 6, bias=True, return_bias=True, fuse_wgrad_accumulation=True,
                             delay_wgrad_compute=True, device=dev, params_dtype=torch.float32)
    _fill(layer, 11)
    for i in range(2):
        w = getattr(layer, f"weight{i}")
        w.main_grad = torch.full((6, 8), 7.0, device=dev)  # stale: the first microbatch overwrites it
        w.grad_added_to_main_grad = False
    rec = {}
    for mb, first in enumerate((True, False)):
        x = _seeded(7, 8, seed=60 + mb).to(dev).requires_grad_(True)
        out, biases = layer(x, [3, 4], is_first_microbatch=first)
        (torch.cat([o + b for o, b in zip(torch.split(out, [3, 4]), biases)]).float() ** 2).sum().backward()
        rec[f"main_grad_after_b{mb}"] = [_cpu(getattr(layer, f"weight{i}").main_grad) for i in range(2)]
        rec[f"grad_added_b{mb}"] = [bool(getattr(layer, f"weight{i}").grad_added_to_main_grad) for i in range(2)]
        rec[f"dgrad{mb}"] = _cpu(x.grad)
    for w in range(2):
        layer.backward_dw()
        rec[f"main_grad_after_w{w}"] = [_cpu(getattr(layer, f"weight{i}").main_grad) for i in range(2)]
    rec["bias_grads"] = [_cpu(getattr(layer, f"bias{i}").grad) for i in range(2)]
    return rec


def _fp8_grouped_case(te, recipe_name: str, fmt: str) -> dict:
    """GroupedLinear (3 experts, bias in the GEMM, as megatron's TEGroupedMLP fc1) under a per-tensor FP8
    recipe, weight gradients delayed and fused into main_grad, two microbatches (is_first_microbatch:
    the quantized weights cached), the splits 16-aligned with an expert given no rows: outputs, input
    gradients, what put holds (per list: type, is a torch.Tensor, usages), main_grad after B (untouched)
    and after each backward_dw, the bias gradients (from B under FP8), the scaling state (delayed); and
    an expert of 5 rows: the weight-gradient GEMM's leading-dimension check, in backward_dw."""
    device, recipe = _fp8_device_and_recipe(te, recipe_name, fmt)
    if device is None:
        return {"unavailable": "no FP8 on this device"}
    dev = _device(te)
    layer = te.GroupedLinear(3, 32, 16, bias=True, fuse_wgrad_accumulation=True, delay_wgrad_compute=True,
                             device=dev, params_dtype=torch.float32)
    _fill(layer, 120)
    for i in range(3):
        w = getattr(layer, f"weight{i}")
        w.main_grad = torch.full((16, 32), 7.0, device=dev)  # stale: the first microbatch overwrites it
        w.grad_added_to_main_grad = False
    handed, put = [], layer.wgrad_store.put

    def recording(tensor_list, func):
        handed.append([[(type(t).__name__, isinstance(t, torch.Tensor), t.get_usages()) for t in part]
                       for part in tensor_list[:2]])
        return put(tensor_list, func)

    layer.wgrad_store.put = recording
    splits = [[16, 0, 32], [32, 16, 0]]
    xs = [_seeded(48, 32, seed=125 + mb).to(dev).requires_grad_(True) for mb in range(2)]
    main_grads = lambda: [_cpu(getattr(layer, f"weight{i}").main_grad) for i in range(3)]  # noqa: E731
    with device():
        with te.autocast(recipe=recipe):
            outs = [layer(x, s, is_first_microbatch=mb == 0) for mb, (x, s) in enumerate(zip(xs, splits))]
        for out in outs:
            (out.float() ** 2).sum().backward()
        rec = {"out": [_cpu(o) for o in outs], "dgrad": [_cpu(x.grad) for x in xs], "puts": handed,
               "main_grad_after_b": main_grads(), "bias_grad_after_b": [_cpu(getattr(layer, f"bias{i}").grad)
                                                                        for i in range(3)]}
        for w in range(2):
            layer.backward_dw()
            rec[f"main_grad_after_w{w}"] = main_grads()
        if recipe_name == "delayed":
            rec["scaling"] = {key: (_cpu(layer.fp8_meta[key].scale), _cpu(layer.fp8_meta[key].amax_history))
                              for key in ("scaling_fwd", "scaling_bwd")}
        misaligned = te.GroupedLinear(2, 32, 16, bias=False, delay_wgrad_compute=True, device=dev,
                                      params_dtype=torch.float32)
        with te.autocast(recipe=recipe):
            out = misaligned(_seeded(20, 32, seed=130).to(dev).requires_grad_(True), [5, 15])
        out.sum().backward()
        raised = record_raised({"backward_dw": misaligned.backward_dw})["backward_dw"]
    rec["misaligned_backward_dw"] = raised and (raised[0], "Leading dimension requirement on A for FP8 GEMM" in raised[1])
    return rec


def fp8_grouped_delayed_hybrid_wgrad(te):
    return _fp8_grouped_case(te, "delayed", "HYBRID")


def fp8_grouped_tensorwise_e4m3_wgrad(te):
    return _fp8_grouped_case(te, "tensorwise", "E4M3")


def refusals(te):
    from transformer_engine.pytorch.module._common import WeightGradStore

    dev = _device(te)
    attempts = {
        "store_delayed_with_ub_bulk_wgrad": lambda: WeightGradStore(True, True),
        "store_put_undelayed": lambda: WeightGradStore(False).put([], None),
        "store_pop_empty": lambda: WeightGradStore(True).pop(),
        "linear_bad_parallel_mode": lambda: te.Linear(4, 4, parallel_mode="diagonal", device=dev),
        "layernorm_linear_bad_normalization": lambda: te.LayerNormLinear(4, 4, normalization="BatchNorm", device=dev),
        "attention_wrong_head_dim": lambda: te.DotProductAttention(2, 8, qkv_format="sbhd")(
            *(torch.zeros(3, 1, 2, 4, device=dev) for _ in range(3))),
        "backward_dw_undelayed_is_a_no_op": lambda: te.Linear(4, 4, device=dev).backward_dw(),
        "grouped_linear_userbuffers": lambda: te.GroupedLinear(2, 4, 4, ub_overlap_rs=True, device=dev),
        "grouped_linear_wrong_splits": lambda: te.GroupedLinear(2, 4, 4, device=dev)(
            torch.zeros(3, 4, device=dev), [3]),
        # qkv_format="thd" (dot_product_attention.py 1106-1117)
        "thd_4d_inputs": lambda: _thd_call(te, dev, q_shape=(8, 1, 2, 8)),
        "thd_causal_mask_type": lambda: _thd_call(te, dev, attn_mask_type="causal"),
        "thd_no_cu_seqlens": lambda: _thd_call(te, dev, cu_seqlens_q=None),
        "thd_int64_cu_seqlens": lambda: _thd_call(te, dev, cu_seqlens_q=torch.tensor([0, 3, 8], device=dev),
                                                  cu_seqlens_kv=torch.tensor([0, 3, 8], device=dev)),
    }
    return record_raised(attempts)


def _thd_call(te, dev: str, q_shape=(8, 2, 8), **kwargs):
    cu = torch.tensor([0, 3, 8], dtype=torch.int32, device=dev)
    q, k, v = (torch.zeros(*q_shape, device=dev) for _ in range(3))
    kwargs = {"cu_seqlens_q": cu, "cu_seqlens_kv": cu, "attn_mask_type": "padding_causal", **kwargs}
    return te.DotProductAttention(2, 8, qkv_format="thd")(q, k, v, **kwargs)


def main(out_path: str) -> None:
    import transformer_engine
    import transformer_engine.pytorch as te

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    results = {"version": str(transformer_engine.__version__), "standin": _device(te) == "cpu"}
    for name in CASES:
        try:
            results[name] = {"ok": globals()[name](te)}
        except Exception as exc:  # noqa: BLE001
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
    torch.save(results, out_path)


if __name__ == "__main__":
    main(sys.argv[1])
