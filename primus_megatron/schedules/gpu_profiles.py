"""GPU profiles and the per-layer costs of another model's shape derived from one (pure Python).

A profile (`balance.save_profile`'s format, written by `make gpu-bench` or training's
--pipeline-profile-out) holds one transformer layer's F, B and W time per microbatch,
the embedding's and the head's, at the shape it measured. The package ships the two
H200 profiles of `make gpu-bench` (benchmarks/gpu_reports/, 2026-11-27): a
Llama-3-8B-like dense block and a Qwen3-30B-A3B-like MoE block, each with its
shape in `meta.shape`.

`derive` gives a `balance.ModelCosts` for a target shape: each of F, B and W of a
layer is the profile's time times the ratio of its FLOPs (`model_shape.layer_flops`,
target over profiled), i.e. the profile's measured throughput per kind of op at its
own shape; the head's by the ratio of 2 h V x tokens, the embedding's by h x tokens;
tensor parallelism divides every one by its size (its own communication is not
modelled). The p2p time is one activation (tokens x h bf16, / TP with sequence
parallelism) over the link bandwidth. Activation bytes per layer are the profile's
measured ones scaled by `model_shape.layer_activation_bytes`; the head's logits by
tokens x V. The profile's fused-backward ratio and weight-gradient memory share are
kept (properties of the kind of layer). A dense model takes the dense profile, an
MoE model the MoE one, unless a profile is named.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from typing import Optional

from .balance import ModelCosts, Part, load_profile
from .errors import ScheduleError
from .model_shape import ModelShape, head_flops, layer_activation_bytes, layer_flops

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "profiles")
SHIPPED = {"h200": {"dense": "h200-llama3-8b-like", "moe": "h200-qwen3-30b-a3b-like"}}
# The shapes `make gpu-bench` measures (benchmarks/gpu_blocks.py), for its profiles that predate meta.shape
BENCH_SHAPES = {
    "Llama-3-8B-like": ModelShape(num_layers=32, hidden=4096, heads=32, groups=8, ffn=14336, vocab=128256,
                                  seq=4096, kv_channels=128),
    "Qwen3-30B-A3B-like": ModelShape(num_layers=48, hidden=2048, heads=32, groups=4, ffn=6144, vocab=151936,
                                     seq=4096, kv_channels=128, experts=128, topk=8, moe_ffn=768),
}
BF16 = 2


@dataclass(frozen=True)
class GpuProfile:
    """A profile's costs, the shape they were measured at, where it came from and its meta."""

    costs: ModelCosts
    shape: ModelShape
    source: str
    meta: dict


def load(path: str, *, shape: Optional[ModelShape] = None) -> GpuProfile:
    """The profile at `path` with its measured shape (`shape`, else meta.shape, else a `make gpu-bench`
    block named in meta.model); a one-sentence ScheduleError otherwise."""
    costs = load_profile(path)
    with open(path, encoding="utf-8") as f:
        meta = json.load(f).get("meta", {}) or {}
    if shape is None and isinstance(meta.get("shape"), dict):
        try:
            shape = ModelShape.from_dict(meta["shape"])
        except TypeError:
            raise ScheduleError(f"profile {path!r} has a meta.shape without the layer counts and sizes") from None
    if shape is None:
        shape = BENCH_SHAPES.get(str(meta.get("model")))
    if shape is None:
        raise ScheduleError(f"profile {path!r} does not say which model shape it measured (meta.shape); give it "
                            f"with --profile-model (a preset)")
    if not meta.get("layer_activation_bytes"):
        meta = {**meta, "layer_activation_bytes": layer_activation_bytes(shape) * shape.tokens}
    return GpuProfile(costs, shape, path, meta)


def shipped(gpu: str, shape: ModelShape) -> GpuProfile:
    """The shipped profile of `gpu` for the kind of `shape` (dense or MoE)."""
    if gpu not in SHIPPED:
        raise ScheduleError(f"--gpu must be one of {', '.join(SHIPPED)} (or give --gpu-profile FILE), got {gpu!r}")
    name = SHIPPED[gpu]["moe" if shape.experts else "dense"]
    return replace(load(os.path.join(HERE, f"{name}.profile.json")), source=f"the shipped {name} profile")


@dataclass(frozen=True)
class Derived:
    """Per-microbatch costs of the target shape (seconds) and its activation bytes per layer."""

    costs: ModelCosts
    layer_bytes: float


def _scaled(part: Part, ratios: dict) -> Part:
    return Part(part.f * ratios["f"], part.b * ratios["b"], part.w * ratios["w"])


def derive(profile: GpuProfile, shape: ModelShape, *, link_gbps: Optional[float] = None, tp: int = 1) -> Derived:
    """The target shape's ModelCosts from `profile` (module doc); `link_gbps`: GB/s of the pipeline link
    (default: the profile's p2p time, scaled)."""
    ref, c = profile.shape, profile.costs
    tokens = shape.tokens / ref.tokens
    ref_flops, flops = layer_flops(ref), layer_flops(shape)
    layer = _scaled(c.layer, {k: flops[k] / ref_flops[k] * tokens / tp for k in "fbw"})
    head_ratio = head_flops(shape) / head_flops(ref) * tokens / tp
    embed_ratio = shape.hidden / ref.hidden * tokens / tp
    ref_bytes = float(profile.meta["layer_activation_bytes"])
    layer_bytes = ref_bytes * layer_activation_bytes(shape) / layer_activation_bytes(ref) * tokens / tp
    head_bytes = c.head_memory * ref_bytes * (shape.vocab / ref.vocab) * tokens / tp
    # p2p: one activation (bf16, / TP with sequence parallelism) over the link; without a bandwidth the
    # profile's own p2p time, scaled by the activation's size
    comm = (BF16 * shape.tokens * shape.hidden / tp / (link_gbps * 1e9) if link_gbps
            else c.comm * tokens * shape.hidden / ref.hidden / tp)
    costs = replace(c, layer=layer, embedding=_scaled(c.embedding, dict.fromkeys("fbw", embed_ratio)),
                    head=_scaled(c.head, dict.fromkeys("fbw", head_ratio)), comm=comm,
                    head_memory=head_bytes / layer_bytes)
    return Derived(costs, layer_bytes)
