"""What splitting the backward costs on one device: T_F, T_B, T_W against megatron's fused T_BW,
and the activation memory a microbatch holds after F, B and W (the GPU benchmark's first part).

One process, the device to itself. For each block (gpu_blocks.py) and core attention, three chunks
of two layers are built from megatron-core's layers: `first` (embedding + layers), `mid` (layers
only) and `last` (layers + output layer + loss), as a pipeline holds them. For each, after warm-up,
`repeats` rounds alternate:

* split (as our B and W ops run it): F; B inside a weight-gradient capture (the linear layers
  compute the input gradient and queue their weight gradient); W runs the queue;
* fused (as megatron's 1F1B runs it): F; one backward through megatron's own linear function
  (our hooks uninstalled), T_BW.

On a GPU each op is timed by CUDA/HIP events on the current stream (the GPU's time, launch gaps
inside the op included) and the L2 cache is flushed before each op (a later W finds its inputs
out of cache, as it would in a pipeline); the host's time to issue the op is recorded beside it.
Memory is the allocator's, relative to the moment before F, after the chunk's output (sent on in a
pipeline) and input gradient (sent back) are let go: held after F, after B, after W. On CPU (the
dry run) times are the host's and memory is what autograd saved (runtime/profiler.saved_storages)
and what the deferred closures keep.

From the `mid` chunk per layer, and `first` / `last` less `mid`, a profile in the format
`primus-pipeline emulate --profile` and `balance` read (schedules/balance.py) is derived.
"""
from __future__ import annotations

import gc
import statistics
import time
from typing import Callable, Optional

import gpu_blocks as G

KINDS = ("mid", "first", "last")
L2_FLUSH_BYTES = 256 * 2**20  # several times an H100/H200's (50/60 MB) or MI300X's (256 MB Infinity Cache: 1x) L2


class _Timer:
    """Events on a GPU, the host clock on CPU; `host` is the host's time to issue the op."""

    def __init__(self, device) -> None:
        import torch

        self.cuda = device.type == "cuda"
        self.torch = torch
        self.flush_buf = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=device) if self.cuda else None

    def run(self, fn: Callable, out: dict, name: str):
        if self.cuda:
            self.flush_buf.zero_()
            start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            h0 = time.perf_counter()
            value = fn()
            h1 = time.perf_counter()
            end.record()
            out.setdefault("_events", []).append((name, start, end))
        else:
            h0 = time.perf_counter()
            value = fn()
            h1 = time.perf_counter()
            out.setdefault(name, []).append(h1 - h0)
        out.setdefault("host_" + name, []).append(h1 - h0)
        return value

    def settle(self, out: dict) -> None:
        """Read the round's events (one synchronisation per round, after its ops)."""
        if self.cuda:
            self.torch.cuda.synchronize()
            for name, start, end in out.pop("_events", []):
                out.setdefault(name, []).append(start.elapsed_time(end) / 1e3)


def _allocated(device) -> int:
    import torch

    return torch.cuda.memory_allocated(device) if device.type == "cuda" else 0


def _models(block: dict, attention: str, kind: str, device, fp8: Optional[str]):
    """(the chunk our split runs, the chunk megatron's fused backward runs): one module for megatron's
    layers (our hooks come and go); for TE's, a copy left TE's own beside one routed to our store."""
    from primus_megatron.runtime import te_wgrad

    te = attention == "te"
    config = G.transformer_config(block, num_layers=G.LAYERS_PER_CHUNK, gpu=device.type == "cuda", te=te, fp8=fp8)

    def build():
        made = G.provider(config, block, attention, pre_process=kind == "first", post_process=kind == "last").to(device)
        G.init_weights_([made], seed=7, num_layers=block["model_layers"])  # by parameter name: equal builds
        return made

    model = build()
    if not te:
        return config, model, model
    fused = build()  # TE's modules hold process groups: built again, not deep-copied
    te_wgrad.enable(model)
    return config, model, fused


def measure_chunk(block: dict, attention: str, kind: str, *, device, repeats: int, warmup: int,
                  fp8: Optional[str] = None) -> dict:
    """Times (seconds, medians) and held memory (bytes) of one chunk kind; see the module doc."""
    import torch

    from primus_megatron.runtime import linear_hooks
    from primus_megatron.runtime.profiler import _bytes, _storage_key, saved_storages
    from primus_megatron.runtime.wgrad_store import get_store

    gpu = device.type == "cuda"
    config, model, fused_model = _models(block, attention, kind, device, fp8)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    batch = G.make_batches(block, 1, device)[0]
    s, b, h = block["seq"], block["mbs"], block["hidden"]
    dtype = config.params_dtype
    gen = torch.Generator(device=device).manual_seed(3)
    # the hidden state a chunk receives, at the embedding's scale (normal(0, 0.02) rows): an MoE
    # router then sees what it sees behind the embedding, so `first` less `mid` is the embedding's cost
    x0 = (torch.randn(s, b, h, generator=gen, device=device, dtype=torch.float32) * 0.02).to(dtype)
    grad_out = torch.randn(s, b, h, generator=gen, device=device, dtype=torch.float32).to(dtype) * 1e-3
    if block.get("experts"):
        from megatron.core.transformer.moe.moe_utils import MoEAuxLossAutoScaler

        MoEAuxLossAutoScaler.set_loss_scale(torch.ones(1, device=device))
    store = get_store()
    timer = _Timer(device)

    def forward(m=model):
        x = None
        if kind != "first":
            x = x0.detach().requires_grad_(True)
            m.set_input_tensor(x)
        out = m(batch["tokens"], batch["position_ids"], None, labels=batch["labels"] if kind == "last" else None)
        if kind == "last":
            out = out.float().sum() / out.numel()
        return x, out

    def backward(out) -> None:
        if kind == "last":
            out.backward()
        else:
            torch.autograd.backward(out, grad_out)

    def sendable(x, out) -> int:  # what a pipeline sends on and frees: the output, the input's gradient
        n = out.numel() * out.element_size() if kind != "last" else 0
        return n + (x.grad.numel() * x.grad.element_size() if x is not None and x.grad is not None else 0)

    def let_go(x, m=model) -> None:
        """Nothing of a round outlives it: the chunk keeps its input tensor (set_input_tensor) and
        with it the input's gradient until the next forward, which would count against the next
        round's baseline."""
        if x is not None:
            x.grad = None
            m.set_input_tensor(None)

    times: dict = {}
    memory: dict = {"after_f": [], "after_b": [], "after_w": [], "closures": []}
    for round_ in range(warmup + repeats):
        keep = round_ >= warmup
        sample = times if keep else {}
        # split: F, B (weight gradients deferred), W
        with store.step(splitting=True):
            base = _allocated(device)
            x, out = timer.run(forward, sample, "F")
            saved = saved_storages(out, exclude=params) if not gpu else set()
            after_f = _allocated(device) - base - (out.numel() * out.element_size() if kind != "last" else 0)
            held: list = []
            with store.capture(("bench", kind), held=held):
                timer.run(lambda: backward(out), sample, "B")
            after_b = _allocated(device) - base - sendable(x, out)
            held_keys = {_storage_key(t) for t in held if torch.is_tensor(t)}
            held.clear()  # the closures hold their tensors; this list must not (after_w, the next round)
            let_go(x)
            del out, x
            deferred = store.pending(("bench", kind))
            timer.run(lambda: store.run(("bench", kind)), sample, "W")
            after_w = _allocated(device) - base
        timer.settle(sample)
        if keep:
            memory["closures"].append(_bytes(held_keys))  # what the deferred closures hold, by storage
            if gpu:
                memory["after_f"].append(after_f)
                memory["after_b"].append(after_b)
                memory["after_w"].append(after_w)
            else:  # what autograd saved, and what the deferred closures keep of it or beside it
                memory["after_f"].append(_bytes(saved))
                memory["after_b"].append(_bytes(held_keys))
                memory["after_w"].append(0)
        # fused: megatron's own linear function, one backward
        linear_hooks.uninstall()
        try:
            with store.step(splitting=False):
                x, out = timer.run(lambda: forward(fused_model), {}, "F")
                timer.run(lambda: backward(out), sample, "BW")
                let_go(x, fused_model)
                del out, x
        finally:
            linear_hooks.install()
        timer.settle(sample)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {"block": block["label"], "attention": attention, "kind": kind, "repeats": repeats,
              "layers": "te" if attention == "te" else "local",
              "precision": f"fp8-{fp8}" if fp8 else ("bf16" if gpu else "fp32"),
              "deferred_closures": deferred,
              # TE layers whose last forward ran in FP8 (TE sets `fp8` on each forward)
              "fp8_modules": sum(bool(getattr(m, "fp8", False)) for m in model.modules()),
              **{f"t_{k.lower()}": med[k] for k in ("F", "B", "W", "BW")},
              **{f"host_{k.lower()}": med["host_" + k] for k in ("F", "B", "W", "BW")},
              **{f"mem_{k}": int(statistics.median(v)) for k, v in memory.items() if v}}
    result["split_over_fused"] = (result["t_b"] + result["t_w"]) / result["t_bw"]
    result["w_share"] = result["t_w"] / (result["t_b"] + result["t_w"])
    result["kept_for_w"] = result["mem_after_b"] / result["mem_after_f"] if result["mem_after_f"] else None
    del model, fused_model, batch, x0, grad_out
    gc.collect()
    if gpu:
        torch.cuda.empty_cache()
    return result


def profile_of(rows: list, block: dict, *, link_gbps: float, device_name: str) -> dict:
    """The primus-pipeline-profile/1 content (seconds) from one block's three chunk kinds: a layer is
    half the `mid` chunk, the embedding and the head (output layer and loss) what `first` / `last`
    add to it; comm is one activation over a link of `link_gbps` GB/s (assumed, not measured: on one
    GPU there is no link to measure); `fused` megatron's T_BW over our T_B + T_W; `wgrad_memory` the
    share of an F's activations the weight gradient keeps from B to W; `head_memory` the head's
    activations in layers."""
    by = {r["kind"]: r for r in rows}
    mid, per = by["mid"], G.LAYERS_PER_CHUNK

    def part(kind: Optional[str]) -> dict:
        if kind is None:
            return {k: mid[f"t_{k}"] / per for k in "fbw"}
        return {k: max(0.0, by[kind][f"t_{k}"] - mid[f"t_{k}"]) for k in "fbw"}

    activation_bytes = block["seq"] * block["mbs"] * block["hidden"] * 2  # bf16
    layer_mem = mid["mem_after_f"] / per
    head_memory = max(0.0, (by["last"]["mem_after_f"] - mid["mem_after_f"]) / layer_mem) if layer_mem else 0.0
    kept = mid["kept_for_w"] if mid["kept_for_w"] is not None else 1.0
    return {"format": "primus-pipeline-profile/1",
            "costs": {"layer": part(None), "embedding": part("first"), "head": part("last"),
                      "comm": activation_bytes / (link_gbps * 1e9), "head_memory": head_memory,
                      "fused": mid["t_bw"] / (mid["t_b"] + mid["t_w"]),
                      "wgrad_memory": min(1.0, max(0.0, kept))},
            "meta": {"num_layers": block["model_layers"], "model": block["label"], "attention": mid["attention"],
                     "device": device_name, "source": "benchmarks/gpu_bench.py (split part)",
                     "link_gbps_assumed": link_gbps, "seq": block["seq"], "micro_batch": block["mbs"],
                     "layer_activation_bytes": layer_mem}}


def pipeline_costs(profile: dict) -> str:
    """One two-layer chunk's costs as training's --pipeline-costs takes them (milliseconds):
    F,B,W,COMM,BW,mem-b=X,mem-w=Y."""
    c = profile["costs"]
    f, b, w = (G.LAYERS_PER_CHUNK * 1e3 * c["layer"][k] for k in "fbw")
    kept = c["wgrad_memory"]
    return (f"{f:.3f},{b:.3f},{w:.3f},{1e3 * c['comm']:.3f},{(b + w) * c['fused']:.3f},"
            f"mem-b={-(1 - kept):.3f},mem-w={-kept:.3f}")


def cases(opts: dict) -> list:
    """(block name, attention, FP8 recipe or None, chunk kinds) to measure: `opts["te_cases"]` ((block,
    precision) pairs: TE's layers, make gpu-te) or every block x its attentions (megatron's layers);
    all three chunk kinds for a block's first attention, the mid chunk for another (its layer cost is
    what it changes), `opts["kinds"]` where given."""
    out = []
    if opts.get("te_cases"):
        for name, precision in opts["te_cases"]:
            out.append((name, "te", None if precision == "bf16" else precision.removeprefix("fp8-"), KINDS))
    else:
        for name in opts["blocks"]:
            attentions = G.blocks(opts["dry_run"])[name]["attentions"]
            out += [(name, a, None, KINDS if a == attentions[0] else ("mid",)) for a in attentions]
    return [(n, a, f, tuple(k for k in kinds if k in opts.get("kinds", KINDS))) for n, a, f, kinds in out]


def run(opts: dict, device, emit: Callable[[dict], None]) -> None:
    """Every case (`cases`) and chunk kind; `emit` gets each row as it is measured (the report keeps what
    finished when a deadline or a failure ends the part)."""
    for name, attention, fp8, kinds in cases(opts):
        block = G.blocks(opts["dry_run"])[name]
        for kind in kinds:
            row = measure_chunk(block, attention, kind, device=device, repeats=opts["repeats"],
                                warmup=opts["warmup"], fp8=fp8)
            emit({"part": "split", "block_name": name, **row})
