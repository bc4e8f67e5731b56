"""CPU mode for Megatron-LM's arguments (`--cpu`: a dry run of a GPU command line on CPU processes).

Before Megatron-LM validates its arguments, CPU mode switches what does not run on CPU to what
does (`settings`): gloo instead of NCCL, megatron's local layers instead of TransformerEngine's
(unless the installed TransformerEngine runs on CPU: the tests' stand-in), and off what needs a
GPU (FP8 and FP4 without such a TransformerEngine, TransformerEngine's userbuffers overlap, CUDA
graphs, apex's persistent layer norm, fused RoPE and masked softmax, forked DataLoader workers).

Several of our refusals (primus_megatron/unsupported.py) refuse exactly what that switch turns
off: FP8 or --tp-comm-overlap over TransformerEngine layers with a schedule that has W ops, CUDA
graphs. Judged after the switch they pass, and the GPU job is refused only when it starts. So
`cluster_refusals` judges the command line as the GPU run sees it first: what it would refuse and
the switched arguments no longer do is said once (`say_cluster_refusals`, one line each), and the
dry run goes on; what the switched arguments still refuse ends the dry run as it ends the GPU run.
"""
from __future__ import annotations

import argparse
import os
from typing import Any, Optional

# Megatron-LM forks its DataLoader workers (2 per iterator, persistent) when it builds the iterators,
# from a rank whose gloo groups already run threads: fork copies only the calling thread, so a lock
# another thread held at that moment is never released in the worker, which then waits forever (a
# first-stage rank silent on its first batch); the persistent workers are shut down only at interpreter
# exit, where a rank aborted once: both in CI runs (commit 0302a7a, tests/megatron_lm_harness.py). Spawned or
# forkserver workers would be safe but re-import torch and megatron-core in each of a rank's 6
# workers, and on CPU workers compete with the ranks for the same cores; the batches are the same
# either way (the sampler decides them, not the workers).
WORKERS_WHY = ("DataLoader workers forked from a rank that already runs gloo's threads can hang on a lock held "
               "at the fork; the rank loads the same batches itself")

# How the CPU mode line names a setting that turns an option off (Megatron-LM has no --no-X for most)
_OFF = {"apply_rope_fusion": "--no-rope-fusion", "masked_softmax_fusion": "--no-masked-softmax-fusion",
        "fp8": "no --fp8-format", "fp4": "no --fp4-format", "tp_comm_overlap": "no --tp-comm-overlap",
        "enable_cuda_graph": "no --enable-cuda-graph", "external_cuda_graph": "no --external-cuda-graph"}


def _te_on_cpu(args: argparse.Namespace) -> bool:
    from ..compat.cpu import transformer_engine_runs_on_cpu

    return getattr(args, "transformer_impl", None) == "transformer_engine" and transformer_engine_runs_on_cpu()


def settings(args: argparse.Namespace, te_on_cpu: Optional[bool] = None) -> list[tuple[str, Any]]:
    """The (argument, value) pairs CPU mode sets, DataLoader workers aside (`apply` says those apart)."""
    te_on_cpu = _te_on_cpu(args) if te_on_cpu is None else te_on_cpu
    out: list[tuple[str, Any]] = [("distributed_backend", "gloo"), ("no_persist_layer_norm", True)]
    if not te_on_cpu:  # a real TransformerEngine needs CUDA; megatron's local layers have no FP8 or FP4
        out[1:1] = [("transformer_impl", "local"), ("fp8", None), ("fp4", None)]
    # userbuffers (TransformerEngine's TP overlap) and CUDA graphs need a GPU whatever the layers
    out += [("tp_comm_overlap", False), ("cuda_graph_impl", "none"), ("enable_cuda_graph", False),
            ("external_cuda_graph", False)]
    if getattr(args, "position_embedding_type", None) in ("rope", "yarn", "mrope") \
            or getattr(args, "use_rotary_position_embeddings", False):  # the legacy flag: rope, set in validate_args
        # Megatron-LM's default --rope-fusion is TE's fused kernel (megatron-core asks for TE >= 1.4
        # in TransformerConfig.__post_init__): the unfused RoPE runs on CPU
        out.append(("apply_rope_fusion", False))
    if getattr(args, "fp16", False) or getattr(args, "bf16", False):
        # on by default: with 16-bit inputs megatron's softmax imports apex's scaled_masked_softmax_cuda
        # at the first forward (fusions/fused_softmax.py); in fp32 the unfused softmax runs anyway
        out.append(("masked_softmax_fusion", False))
    return out


def problem(args: argparse.Namespace) -> Optional[str]:
    """What CPU mode cannot run at all, in one sentence, or None."""
    if getattr(args, "multi_latent_attention", False) and not _te_on_cpu(args):
        return ("--multi-latent-attention needs TransformerEngine attention: megatron-core's local "
                "DotProductAttention has no separate key and value head sizes (k_channels, v_channels), so with "
                "--cpu it runs only with a TransformerEngine that runs on CPU (--transformer-impl transformer_engine)")
    return None


def apply(args: argparse.Namespace) -> None:
    """Switch the arguments to CPU mode and say what changed, once, on rank 0."""
    said = []
    changed = _set_args(args, settings(args))
    if changed:
        said.append(f"{', '.join(changed)} (TransformerEngine, apex, NCCL, userbuffers, CUDA graphs and CUDA kernels "
                    f"do not run on CPU)")
    workers = getattr(args, "num_workers", 0)
    if _set_args(args, [("num_workers", 0)]):  # Megatron-LM's default is 2
        said.append(f"--num-workers 0 (was {workers}: {WORKERS_WHY})")
    args.cpu = True
    if said and os.environ.get("RANK", "0") == "0":
        print(f"CPU mode: {'; '.join(said)}", flush=True)


def _set_args(args: argparse.Namespace, pairs: list) -> list:
    """Set each (name, value) in Megatron-LM's arguments; the options of those that changed (an
    argument this Megatron-LM does not have is not one: nothing to say about it)."""
    changed = []
    for name, value in pairs:
        if getattr(args, name, value) != value:
            changed.append(_flag(name, value))
        setattr(args, name, value)
    return changed


def _flag(name: str, value: Any) -> str:
    """Megatron-LM's option that sets `name` to `value`: --no-rope-fusion for apply_rope_fusion=False."""
    if value in (False, None) and name in _OFF:
        return _OFF[name]
    return f"--{name.replace('_', '-')}" + ("" if value is True else f" {value}")


def cluster_refusals(args: argparse.Namespace, spec: Any) -> list[str]:
    """Our refusals of the command line as the GPU run sees it (before `apply`) that the arguments
    CPU mode switches to no longer hit, one sentence per refused option (its first rule's); the
    table's order."""
    from ..options import deferred_wgrad_setting
    from ..unsupported import depends_on_installed_te, installed_te_version, refusals

    switched = argparse.Namespace(**vars(args))
    for name, value in settings(args):
        setattr(switched, name, value)
    still = {rule for rule, _ in refusals(deferred_wgrad_setting(switched, spec))}
    out, options = [], set()
    for rule, sentence in refusals(deferred_wgrad_setting(args, spec)):
        if rule in still or rule.option in options:
            continue  # the dry run refuses it too, as the GPU run would; or the option is said already
        options.add(rule.option)
        if depends_on_installed_te(rule):
            here = installed_te_version()
            sentence += (f" (judged for the TransformerEngine installed here, {here}; the cluster's decides)" if here
                         else " (judged with no TransformerEngine installed here; the cluster's decides)")
        out.append(sentence)
    return out


def say_cluster_refusals(args: argparse.Namespace, spec: Any) -> list[str]:
    """Print `cluster_refusals` on rank 0, one line each, before `apply`; returns them."""
    found = cluster_refusals(args, spec) if spec is not None else []
    if found and os.environ.get("RANK", "0") == "0":
        for sentence in found:
            print(f"dry run (--cpu): the GPU run would refuse this command line: {sentence}; CPU mode turns off "
                  f"what it refuses, so this dry run goes on", flush=True)
    return found
