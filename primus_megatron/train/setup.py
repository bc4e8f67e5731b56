"""examples/pretrain_gpt.py's start-up: process groups, CPU mode, seeds; and whether rank
processes time-share this host's cores (which then shapes what measured timelines mean)."""
from __future__ import annotations

import argparse
import datetime
import os
from typing import Optional

import torch
import torch.distributed as dist


def log0(*parts) -> None:
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(*parts, flush=True)


LOG_WIDTH = 100  # columns: a terminal shows the run's prose lines whole


def wrapped(text: str, indent: str = "  ") -> str:
    """`text` in lines of LOG_WIDTH columns at most (a word longer than that, e.g. a path, on a line of its
    own), the continued lines indented by `indent`."""
    import textwrap

    lead = text[:len(text) - len(text.lstrip(" "))]  # an indented text's continuation lines go deeper
    return textwrap.fill(text, LOG_WIDTH, subsequent_indent=lead + indent, break_long_words=False,
                         break_on_hyphens=False)


def initialize(args: argparse.Namespace) -> Optional[tuple[int, int]]:
    """Process groups, CPU mode, seeds. Returns `cpu_time_sharing`'s answer (read before
    any pinning), or None."""
    notes = []
    time_sharing = None
    if args.cpu:
        from ..compat import cpu, fallback_warnings

        notes.append(fallback_warnings.silence())  # before megatron-core's modules are imported
        cpu.enable()
        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
        time_sharing = cpu_time_sharing(int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1"))))
        if time_sharing:
            notes.append(time_sharing_note(*time_sharing))
        if os.environ.get("PRIMUS_PIN_RANKS") == "1":  # benchmarks, the demo with enough cores: one core per rank
            cores = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(0, {cores[int(os.environ.get("LOCAL_RANK", "0")) % len(cores)]})
    else:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group(args.distributed_backend,
                                timeout=datetime.timedelta(minutes=args.distributed_timeout_minutes))
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    model_parallel_groups(args)
    torch.manual_seed(args.seed)  # same on every rank: dropout masks follow the data, not the placement
    model_parallel_cuda_manual_seed(args.seed)
    for note in notes:
        log0(wrapped(f"note: {note}"))
    return time_sharing


def model_parallel_groups(args: argparse.Namespace) -> None:
    """megatron's tensor, pipeline and expert parallel groups for the arguments, made again where
    groups of other sizes exist (a launcher that set them up already: megatron would otherwise
    build a model for the arguments' expert parallel size over groups of another, silently). The
    groups replaced are destroyed, not left alive beside the new ones."""
    from megatron.core import parallel_state as ps

    wanted = (args.tensor_model_parallel_size, args.pipeline_model_parallel_size, args.expert_model_parallel_size)
    if ps.model_parallel_is_initialized():
        have = (ps.get_tensor_model_parallel_world_size(), ps.get_pipeline_model_parallel_world_size(),
                ps.get_expert_model_parallel_world_size())
        if have == wanted:
            return
        destroy_megatron_groups()
    ps.initialize_model_parallel(*wanted[:2], expert_model_parallel_size=wanted[2],
                                 distributed_timeout_minutes=args.distributed_timeout_minutes)


def destroy_megatron_groups() -> None:
    """megatron's parallel state reset and the process groups it made destroyed. Its
    `destroy_model_parallel` only forgets most of them (it destroys its gloo groups alone), and
    torch keeps every group it was not told to destroy: each re-creation would add a full set."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    # every group megatron's create_group made that this rank belongs to; None stands for the world
    made = [g for g in (getattr(ps, "_global_process_group_list", None) or []) if g is not None]
    ps.destroy_model_parallel()
    live = dist.distributed_c10d._world.pg_map  # megatron checks the same map before destroying
    for group in made:
        if group in live:  # not already destroyed (megatron's gloo groups), nor listed twice
            dist.destroy_process_group(group)


def cpu_time_sharing(ranks_here: int) -> Optional[tuple[int, int]]:
    """(rank processes on this host, cores this process may use) when there are
    more ranks than cores, else None. Read before any pinning."""
    cores = len(os.sched_getaffinity(0))
    return (ranks_here, cores) if ranks_here > cores else None


def time_sharing_note(ranks: int, cores: int) -> str:
    return (f"{ranks} rank processes share {cores} core{'s' * (cores != 1)} here, so on the wall clock op times and "
            f"gaps are mostly the operating system switching between ranks, not the schedule's bubbles; each op's "
            f"CPU time is measured too, and the order each iteration ran is replayed from those times (what one "
            f"core per rank would show)")
