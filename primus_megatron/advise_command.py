"""`primus-pipeline advise`: every schedule ranked for a model's shape on a GPU profile (pure Python).

    primus-pipeline advise --model llama3-70b --pp 8 -m 32
    primus-pipeline advise --num-layers 80 --hidden-size 8192 --num-attention-heads 64 --num-query-groups 8 \
        --ffn-hidden-size 28672 --swiglu --padded-vocab-size 128256 --seq-length 8192 --pp 8 -m 32 --json

The shape (a preset, Megatron-LM's own arguments, or a preset with some of them changed)
and the GPU's profile give per-layer costs (`schedules.gpu_profiles.derive`); every
schedule is simulated on a few layer splits (`schedules.advise.rank`) and the ranking,
its ties within the model's error and the Megatron-LM arguments to use are printed.
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
from typing import Any, Optional

from .cli import _int_at_least, _num, _positive, table, warn_few_microbatches
from .schedules import advise, gpu_profiles, model_shape
from .schedules.balance import stage_costs
from .schedules.errors import ScheduleError
from .schedules.registry import info, names

GIB = float(2 ** 30)
# What torch reports as a device's total memory, GiB (the H200 lent on 2026-11-27: about 139 GiB); a
# profile of another device names no memory here and gets no such note.
DEVICE_MEMORY_GIB = {"NVIDIA H200": 139.8}


class UsageError(ScheduleError):
    """Bad input: one sentence, exit status 2 (a ScheduleError, which `cli.main` reports so, also when
    cli runs as __main__ and this module's import of it is a second copy)."""
# argument dest -> ModelShape field: Megatron-LM's names for the shape
SHAPE_ARGS = {"num_layers": "num_layers", "hidden_size": "hidden", "num_attention_heads": "heads",
              "num_query_groups": "groups", "ffn_hidden_size": "ffn", "seq_length": "seq",
              "micro_batch_size": "micro_batch", "kv_channels": "kv_channels", "num_experts": "experts",
              "moe_router_topk": "topk", "moe_ffn_hidden_size": "moe_ffn",
              "moe_shared_expert_intermediate_size": "shared_ffn", "q_lora_rank": "q_lora_rank",
              "kv_lora_rank": "kv_lora_rank", "qk_head_dim": "qk_head_dim", "qk_pos_emb_head_dim": "qk_pos_dim",
              "v_head_dim": "v_head_dim"}


def add_parser(sub: Any) -> None:
    p = sub.add_parser("advise", help="every schedule ranked for a model's shape on a GPU",
                       description="Rank every registered schedule (megatron's 1F1B and interleaved included) by "
                                   "simulated step time and peak activation memory per rank, from per-layer costs "
                                   "derived from the model's FLOPs and a GPU profile, and print the Megatron-LM "
                                   "arguments of the fastest (docs/choosing-a-schedule.md).")
    p.add_argument("--model", choices=sorted(model_shape.PRESETS), default=None,
                   help="a preset shape (public configs); the shape options below change it")
    shape = p.add_argument_group("model shape", "Megatron-LM's own arguments (without --model: --num-layers, "
                                                "--hidden-size, --num-attention-heads and the vocabulary at least)")
    for flag in ("num-layers", "hidden-size", "num-attention-heads", "num-query-groups", "ffn-hidden-size",
                 "seq-length", "micro-batch-size", "kv-channels", "num-experts", "moe-router-topk",
                 "moe-ffn-hidden-size", "moe-shared-expert-intermediate-size", "padded-vocab-size", "vocab-size",
                 "q-lora-rank", "kv-lora-rank", "qk-head-dim", "qk-pos-emb-head-dim", "v-head-dim"):
        shape.add_argument(f"--{flag}", type=_int_at_least(1), default=None, metavar="N")
    shape.add_argument("--swiglu", action="store_true", help="gated MLP (a preset's MLPs are)")
    shape.add_argument("--group-query-attention", action="store_true", help="accepted (--num-query-groups says it)")
    shape.add_argument("--multi-latent-attention", action="store_true",
                       help="DeepSeek's attention (Megatron-LM's default ranks where not given)")
    cluster = p.add_argument_group("cluster and pipeline")
    cluster.add_argument("--pp", "--pipeline-model-parallel-size", dest="pp", required=True, type=_int_at_least(2),
                         metavar="P", help="pipeline ranks (>= 2)")
    cluster.add_argument("--microbatches", "-m", type=_int_at_least(1), default=None, metavar="M",
                         help="microbatches per step (or --global-batch-size)")
    cluster.add_argument("--global-batch-size", type=_int_at_least(1), default=None, metavar="N",
                         help="samples per step: microbatches = N / (data-parallel size x micro-batch size)")
    cluster.add_argument("--gpus", type=_int_at_least(1), default=None, metavar="N",
                         help="GPUs in all (default pp x tp): data-parallel size = N / (pp x tp)")
    cluster.add_argument("--tensor-model-parallel-size", dest="tp", type=_int_at_least(1), default=1, metavar="T",
                         help="divides each layer's time and activations (sequence parallel; TP's own "
                              "communication not modelled)")
    cluster.add_argument("--gpu", default="h200", help="a shipped GPU profile: h200 (default)")
    cluster.add_argument("--gpu-profile", default=None, metavar="FILE",
                         help="a measured profile instead (make gpu-bench's, or training's --pipeline-profile-out)")
    cluster.add_argument("--profile-model", choices=sorted(model_shape.PRESETS), default=None,
                         help="the shape --gpu-profile measured, where the file does not say (meta.shape)")
    cluster.add_argument("--link-bandwidth", type=_positive("GB/s"), default=None, metavar="GB/S",
                         help="pipeline p2p bandwidth between ranks (default: the profile's, 50 GB/s shipped)")
    cluster.add_argument("--memory-gib", type=_positive("GiB"), default=None, metavar="G",
                         help="activation memory per GPU: schedules above it are not ranked, zb-auto plans within it")
    p.add_argument("--tie", type=_positive("percent"), default=advise.TIE_PERCENT, metavar="PERCENT",
                   help=f"step times within this much of the fastest are a tie (default {advise.TIE_PERCENT:g}: "
                        "the simulator's measured error, docs/choosing-a-schedule.md)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")


# -- inputs ----------------------------------------------------------------------------------------

def shape_of(args: argparse.Namespace) -> model_shape.ModelShape:
    """The preset changed by the given Megatron-LM arguments, or the arguments alone."""
    given = {field: getattr(args, dest) for dest, field in SHAPE_ARGS.items() if getattr(args, dest) is not None}
    vocab = args.padded_vocab_size or args.vocab_size
    if vocab:
        given["vocab"] = vocab
    if args.multi_latent_attention and "kv_lora_rank" not in given:
        given["kv_lora_rank"] = 32  # Megatron-LM's default
    if args.model:
        return model_shape.preset(args.model).with_(**given)
    missing = [f"--{d}" for d, f in (("num-layers", "num_layers"), ("hidden-size", "hidden"),
                                     ("num-attention-heads", "heads"), ("padded-vocab-size", "vocab"))
               if f not in given]
    if missing:
        raise UsageError(f"give --model (one of {', '.join(model_shape.PRESETS)}) or the shape: {', '.join(missing)} "
                         f"missing")
    hidden = given["hidden"]
    # Megatron-LM's defaults: 4h, or 2/3 of it rounded down to 64 for a gated MLP
    given.setdefault("ffn", int(4 * hidden * 2 / 3 / 64) * 64 if args.swiglu else 4 * hidden)
    given.setdefault("groups", given["heads"])
    return model_shape.ModelShape(gated=args.swiglu, **given)


def microbatches(args: argparse.Namespace, shape: model_shape.ModelShape) -> int:
    if args.microbatches is not None:
        if args.global_batch_size is not None:
            raise UsageError("give --microbatches or --global-batch-size, not both")
        return args.microbatches
    if args.global_batch_size is None:
        raise UsageError("give --microbatches (per step) or --global-batch-size")
    gpus = args.gpus or args.pp * args.tp
    if gpus % (args.pp * args.tp):
        raise UsageError(f"--gpus must be a multiple of pp x tp ({args.pp * args.tp}), got {gpus}")
    per_step = (gpus // (args.pp * args.tp)) * shape.micro_batch
    if args.global_batch_size % per_step:
        raise UsageError(f"--global-batch-size must be a multiple of data-parallel size x micro-batch size "
                         f"({per_step}), got {args.global_batch_size}")
    return args.global_batch_size // per_step


def profile_of(args: argparse.Namespace, shape: model_shape.ModelShape) -> gpu_profiles.GpuProfile:
    if args.gpu_profile:
        measured = model_shape.preset(args.profile_model) if args.profile_model else None
        try:
            return gpu_profiles.load(args.gpu_profile, shape=measured)
        except ScheduleError as exc:
            raise UsageError(f"--gpu-profile: {exc}") from None
    if args.profile_model:
        raise UsageError("--profile-model names the shape of a --gpu-profile file; give one")
    return gpu_profiles.shipped(args.gpu, shape)


# -- the command -----------------------------------------------------------------------------------

def run(args: argparse.Namespace) -> int:
    shape = shape_of(args)
    m = microbatches(args, shape)
    profile = profile_of(args, shape)
    derived = gpu_profiles.derive(profile, shape, link_gbps=args.link_bandwidth, tp=args.tp)
    unit_bytes = shape.num_layers / args.pp * derived.layer_bytes  # one microbatch of a rank's layer share
    limit = None if args.memory_gib is None else args.memory_gib * GIB / unit_bytes
    ranked = advise.rank(args.pp, m, derived.costs, shape.num_layers, memory_limit=limit, tie_percent=args.tie)
    report = build_report(args, shape, m, profile, derived, ranked, limit, unit_bytes)
    fastest = next((r.choice for r in ranked if r.choice.best is not None), None)
    if fastest is not None:  # its own costs: the derived per-layer costs over its best layer split
        chunks = info(fastest.name).chunks
        warn_few_microbatches(fastest.name, args.pp, m, stage_costs(derived.costs, fastest.best.split, args.pp, chunks),
                              chunks=chunks, label=f"even the fastest schedule ({fastest.name})",
                              fix="raise --microbatches (or --global-batch-size) to pp or more")
    print(json.dumps(report, indent=1) if args.json else text(report))
    return 0


def _row(place: int, r: advise.Ranked, limit: Optional[float], unit_bytes: float) -> dict:
    c, best = r.choice, r.choice.best
    if best is None:
        return {"name": c.name, "note": c.note}
    return {"rank": place, "name": c.name, "chunks": info(c.name).chunks, "step_s": best.iteration,
            "vs_fastest": r.vs_best,
            "tie": r.tie, "peak_activation_units": best.peak_memory,
            "peak_activation_gib": best.peak_memory * unit_bytes / GIB, "layers_per_stage": list(best.layers),
            "arguments": advise.use_args(c, limit)}


def build_report(args: argparse.Namespace, shape: model_shape.ModelShape, m: int, profile: Any, derived: Any,
                 ranked: list, limit: Optional[float], unit_bytes: float) -> dict:
    """Everything `advise` prints, as the JSON it prints with --json."""
    rows = [_row(i + 1, r, limit, unit_bytes) for i, r in enumerate(ranked)]
    ranked_rows = [r for r in rows if "step_s" in r]
    ties = sorted((r for r in ranked_rows if r["tie"]), key=lambda r: (r["peak_activation_units"], r["step_s"]))
    c = derived.costs
    return {"format": "primus-pipeline-advice/1", "model": {"preset": args.model, **shape.to_dict()},
            "pp": args.pp, "tp": args.tp, "microbatches": m,
            "profile": {"source": profile.source, "device": profile.meta.get("device"),
                        "measured_shape": profile.shape.to_dict()},
            "link_gbps": args.link_bandwidth,
            "per_microbatch_s": {"layer": vars(c.layer), "embedding": vars(c.embedding), "head": vars(c.head),
                                 "p2p": c.comm},
            "layer_activation_gib": derived.layer_bytes / GIB, "memory_limit_units": limit,
            "memory_limit_gib": args.memory_gib, "tie_percent": args.tie,
            "schedules": ranked_rows, "not_ranked": [r for r in rows if "step_s" not in r]
            + [{"name": n, "note": "the integer program (zb-optimal) solves small cases only: primus-pipeline "
                                   "compare runs it"} for n in names() if n not in advise.candidates()],
            "recommended": [r["name"] for r in ties],
            "device_memory_gib": DEVICE_MEMORY_GIB.get(profile.meta.get("device"))}


def _shape_text(model: dict) -> str:
    kind = (f"MoE {model['experts']} experts top-{model['topk']} of FFN {model['moe_ffn']}"
            + (f", {model['dense_layers']} dense first" if model["dense_layers"] else "")) if model["experts"] \
        else f"FFN {model['ffn']}"
    attention = "MLA" if model["kv_lora_rank"] is not None else f"{model['groups']} KV groups"
    return (f"{model['preset'] or 'model'}: {model['num_layers']} layers, hidden {model['hidden']}, {model['heads']} "
            f"heads ({attention}), {kind}, vocabulary {model['vocab']}; sequence {model['seq']} x micro-batch "
            f"{model['micro_batch']}")


def _over_device_memory(report: dict) -> Optional[str]:
    """A note when, without --memory-gib, ranked schedules' activations alone exceed the profiled device's memory."""
    memory = report["device_memory_gib"]
    if memory is None or report["memory_limit_gib"] is not None:
        return None
    over = [r["name"] for r in report["schedules"] if r["peak_activation_gib"] > memory]
    if not over:
        return None
    device = report["profile"]["device"]
    if len(over) == len(report["schedules"]):
        return (f"note: no schedule's activations fit one {device} ({memory:g} GiB) at this shape: raise "
                f"--tensor-model-parallel-size or pp, recompute activations or lower the micro-batch size first")
    return (f"note: {', '.join(over)} hold more activations than one {device} has ({memory:g} GiB): give "
            f"--memory-gib (the memory left after weights and optimizer state) to rank only what fits")


def text(report: dict) -> str:
    """The report as a ranked table, the tie and the arguments to use."""
    cost = report["per_microbatch_s"]
    layer = cost["layer"]
    measured = report["profile"]["measured_shape"]
    head = (f"{_shape_text(report['model'])}\npp={report['pp']}, tp={report['tp']}, {report['microbatches']} "
            f"microbatches; costs from {report['profile']['source']} ({report['profile']['device'] or 'GPU'}, measured "
            f"at hidden {measured['hidden']}, sequence {measured['seq']}) scaled by FLOPs: per layer and microbatch "
            f"F {1e3 * layer['f']:.3g} / B {1e3 * layer['b']:.3g} / W {1e3 * layer['w']:.3g} ms, "
            f"activations {report['layer_activation_gib']:.3g} GiB; p2p {1e3 * cost['p2p']:.3g} ms")
    rows = [[str(r["rank"]), r["name"], str(r["chunks"]), f"{r['step_s']:.4g}", f"{r['vs_fastest']:.3f}",
             f"{r['peak_activation_gib']:.3g}", _num(r["peak_activation_units"], 2), "tie" if r["tie"] else "",
             ",".join(map(str, r["layers_per_stage"]))] for r in report["schedules"]]
    rows += [["-", r["name"], "", "not ranked: " + r["note"]] for r in report["not_ranked"]]
    out = [head, "", table(["rank", "schedule", "chunks", "step s", "vs fastest", "peak act GiB", "peak (mb)",
                            "within error", "layers per stage"], rows, right=[True, False, True, True, True, True,
                                                                               True, False, False])]
    out.append(f"\npeak act GiB: the largest rank's activations (peak (mb): in microbatches of a rank's layer "
               f"share); weights, gradients and optimizer state come on top.")
    over = _over_device_memory(report)
    if over:
        out.append(over)
    best = report["recommended"]
    if best:
        out.append(f"within the model's error ({report['tie_percent']:g}% of the fastest step): "
                   f"{', '.join(best)}" + (" (a tie: least activation memory first)" if len(best) > 1 else ""))
        by_name = {r["name"]: r for r in report["schedules"]}
        out += ["use: " + shlex.join(by_name[n]["arguments"]) for n in best]
    return "\n".join(out)
