"""Checkpoints with megatron-core's distributed checkpointing, resumable under
another schedule or pipeline size.

Tensors are saved as ShardedTensors keyed by their global name (megatron's
sharded_state_dict numbers layers globally; under V placement we answer its
layer-offset questions by global stage while it builds the dict), so a run
saved with `1f1b` on 4 pipeline ranks resumes with `zbv` on 2. Model chunks sit
under `model.stage<S>` and the optimizer state is keyed through the model's
ShardedTensors, so neither depends on how stages map to ranks.

On CPU (`--cpu`) shards are written in this process: megatron's writer forks
worker processes (from a rank running gloo threads) and waits for them with no
timeout, so a worker that dies before reporting hangs the rank for good (seen
in CI: a worker failed on a missing psutil); here a failure is an exception.
On GPU megatron's own parallel writer is used unchanged.

A checkpoint is written to `iter_NNNNNNN.partial` and renamed only after every
rank finished; `latest_checkpointed_iteration.txt` is updated last (atomically).
A checkpoint interrupted by a crash is never taken for a complete one. Dropout
needs no RNG state: it is reseeded per (iteration, microbatch, layer).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from typing import Optional

import torch
import torch.distributed as dist

from ..options import PipelineSpec

TRACKER = "latest_checkpointed_iteration.txt"
FORMAT = "primus_megatron/1"
_ITER = re.compile(r"iter_(\d{7})(\.partial)?")


def _placement(args, spec: Optional[PipelineSpec]):
    if spec is None:
        return contextlib.nullcontext()
    from ..runtime.placement import layer_placement

    return layer_placement(args.pipeline_model_parallel_size, spec.placement, spec.chunks)


def _model_state(args, spec: Optional[PipelineSpec], model) -> dict:
    with _placement(args, spec):
        # the unwrapped modules: keys without the data-parallel / fp16 wrappers' "module." prefix
        return {f"stage{getattr(_inner(chunk), 'pipeline_stage', i)}": _inner(chunk).sharded_state_dict()
                for i, chunk in enumerate(model)}


def _inner(chunk):
    while hasattr(chunk, "module"):
        chunk = chunk.module
    return chunk


def _state(args, spec: Optional[PipelineSpec], model, optimizer, *, loading: bool) -> dict:
    model_sd = _model_state(args, spec, model)
    state = {"model": model_sd}
    if optimizer is not None and not (loading and (args.no_load_optim or args.finetune)):
        # fully_reshardable: the distributed optimizer's state in the model's parameter
        # layout, so a run resumes at another pipeline or data-parallel size (megatron-core
        # 0.16.1's default, fully_sharded_model_space, fails on flattened ranges here).
        state["optimizer"] = optimizer.sharded_state_dict(
            model_sd, is_loading=loading, metadata={"distrib_optim_sharding_type": "fully_reshardable"})
    return state


def save(args, spec: Optional[PipelineSpec], model, optimizer, scheduler, iteration: int,
         consumed_samples: int) -> str:
    """Write iteration `iteration` under --save (see the module doc); returns its directory."""
    from megatron.core import dist_checkpointing

    final = os.path.join(args.save, f"iter_{iteration:07d}")
    partial = final + ".partial"
    if dist.get_rank() == 0:
        shutil.rmtree(partial, ignore_errors=True)
        os.makedirs(partial, exist_ok=True)
    dist.barrier()
    state = _state(args, spec, model, optimizer, loading=False)
    from ..compat import cpu

    if cpu.is_enabled():  # shards written in this process (compat.checkpoint_writer)
        from ..compat.checkpoint_writer import write_in_process

        write_in_process()
    dist_checkpointing.save(state, partial)
    dist.barrier()  # every rank wrote its shards
    if dist.get_rank() == 0:
        meta = {"format": FORMAT, "iteration": iteration, "consumed_samples": consumed_samples,
                "scheduler": scheduler.state_dict() if scheduler is not None else None,
                "schedule": spec.name if spec is not None else None, "pp": args.pipeline_model_parallel_size,
                "tp": args.tensor_model_parallel_size, "num_layers": args.num_layers}
        with open(os.path.join(partial, "primus_meta.json"), "w") as f:
            json.dump(meta, f)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(partial, final)
        tmp = os.path.join(args.save, TRACKER + ".tmp")
        with open(tmp, "w") as f:
            f.write(str(iteration))
        os.replace(tmp, os.path.join(args.save, TRACKER))
        print(f"saved checkpoint at iteration {iteration:7d} to {final}", flush=True)
    dist.barrier()
    return final


class CheckpointError(RuntimeError):
    """A checkpoint asked for cannot be loaded; the message says which and why."""


def _complete(load_dir: str, iteration: int) -> bool:
    return os.path.isfile(os.path.join(load_dir, f"iter_{iteration:07d}", "primus_meta.json"))


def _scan(load_dir: str) -> tuple[list[int], list[str]]:
    """(iterations of complete checkpoints, names of interrupted ones) in load_dir."""
    complete, partial = [], []
    try:
        entries = sorted(os.listdir(load_dir))
    except OSError:
        return [], []
    for name in entries:
        m = _ITER.fullmatch(name)
        if m is None:
            continue
        if m.group(2) or not _complete(load_dir, int(m.group(1))):
            partial.append(name)
        else:
            complete.append(int(m.group(1)))
    return complete, partial


def latest(load_dir: str, step=None, *, log=None):
    """(iteration, directory) of the checkpoint to load, or None to train from scratch.

    With `step` (--ckpt-step) that iteration's checkpoint must be complete. Otherwise
    the tracker's iteration if its checkpoint is complete, else the newest complete
    one: a save interrupted by a crash (iter_N.partial, or a tracker naming a
    checkpoint that is missing or incomplete) is never loaded. `log(text)` hears why
    a checkpoint was skipped or none is loaded."""
    log = log or (lambda text: None)
    if step is not None:
        if not _complete(load_dir, step):
            path = os.path.join(load_dir, f"iter_{step:07d}")
            what = "an interrupted save" if os.path.isdir(path + ".partial") or os.path.isdir(path) else "missing"
            raise CheckpointError(f"--ckpt-step {step}: {path} is not a complete checkpoint ({what}); complete ones "
                                  f"in {load_dir}: {_scan(load_dir)[0] or 'none'}")
        return step, os.path.join(load_dir, f"iter_{step:07d}")
    tracked = None
    why = []
    tracker = os.path.join(load_dir, TRACKER)
    if os.path.isfile(tracker):
        try:
            with open(tracker) as f:
                tracked = int(f.read().strip())
        except (OSError, ValueError):
            why.append(f"{TRACKER} is unreadable")
    if tracked is not None and _complete(load_dir, tracked):
        return tracked, os.path.join(load_dir, f"iter_{tracked:07d}")
    complete, partial = _scan(load_dir)
    if tracked is not None:
        why.append(f"{TRACKER} names iteration {tracked}, whose checkpoint is missing or incomplete")
    if partial:
        why.append(f"interrupted save(s): {', '.join(partial)}")
    if complete:
        if why:
            log(f"--load {load_dir}: {'; '.join(why)}; loading the newest complete checkpoint, iteration "
                f"{complete[-1]}")
        return complete[-1], os.path.join(load_dir, f"iter_{complete[-1]:07d}")
    if why:
        log(f"--load {load_dir} has no complete checkpoint ({'; '.join(why)}): training from scratch")
    return None


def load(args, spec: Optional[PipelineSpec], model, optimizer, scheduler) -> tuple[int, int]:
    """Restore model, optimizer, LR schedule; returns (iteration, consumed samples)."""
    from megatron.core import dist_checkpointing

    def log(text: str) -> None:
        if dist.get_rank() == 0:
            print(text, flush=True)

    found = latest(args.load, args.ckpt_step, log=log)
    if found is None:
        if not _scan(args.load)[1] and not os.path.isfile(os.path.join(args.load, TRACKER)):
            log(f"no checkpoint in {args.load}: training from scratch")
        return 0, 0
    iteration, path = found
    with open(os.path.join(path, "primus_meta.json")) as f:
        meta = json.load(f)
    if meta.get("num_layers") != args.num_layers:
        raise CheckpointError(f"--load {path} was saved with --num-layers {meta.get('num_layers')}, not {args.num_layers}")
    state = _state(args, spec, model, optimizer, loading=True)
    loaded = dist_checkpointing.load(state, path)
    with _placement(args, spec):
        for i, chunk in enumerate(model):
            key = f"stage{getattr(_inner(chunk), 'pipeline_stage', i)}"
            _inner(chunk).load_state_dict(loaded["model"][key])
    if "optimizer" in loaded:
        optimizer.load_state_dict(loaded["optimizer"])
    if args.finetune:
        return 0, 0
    if scheduler is not None and meta.get("scheduler"):
        scheduler.load_state_dict(meta["scheduler"])
    if dist.get_rank() == 0:
        print(f"loaded checkpoint {path} (iteration {iteration}, saved with schedule {meta.get('schedule')} "
              f"pp={meta.get('pp')})", flush=True)
    return iteration, meta["consumed_samples"]
