"""The training loop of examples/pretrain_gpt.py (Megatron-LM's pretrain() on megatron-core)."""
from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import time
from functools import partial
from typing import Optional

import torch
import torch.distributed as dist

from ..runtime.p2p import PipelineTimeout


def log0(*parts) -> None:
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(*parts, flush=True)


def initialize(args: argparse.Namespace) -> None:
    """Process groups, CPU mode, seeds."""
    notes = []
    if args.cpu:
        from ..compat import cpu, fallback_warnings

        notes.append(fallback_warnings.silence())  # before megatron-core's modules are imported
        cpu.enable()
        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
        args.time_sharing = cpu_time_sharing(int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1"))))
        if args.time_sharing:
            notes.append(time_sharing_note(*args.time_sharing))
        if os.environ.get("PRIMUS_PIN_RANKS") == "1":  # benchmarks, the demo with enough cores: one core per rank
            cores = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(0, {cores[int(os.environ.get("LOCAL_RANK", "0")) % len(cores)]})
    else:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group(args.distributed_backend,
                                timeout=datetime.timedelta(minutes=args.distributed_timeout_minutes))
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    ps.initialize_model_parallel(args.tensor_model_parallel_size, args.pipeline_model_parallel_size,
                                 distributed_timeout_minutes=args.distributed_timeout_minutes)
    torch.manual_seed(args.seed)  # same on every rank: dropout masks follow the data, not the placement
    model_parallel_cuda_manual_seed(args.seed)
    configure_checks(args)
    for note in notes:
        log0(f"note: {note}")


def cpu_time_sharing(ranks_here: int) -> Optional[tuple[int, int]]:
    """(rank processes on this host, cores this process may use) when there are
    more ranks than cores, else None. Read before any pinning."""
    cores = len(os.sched_getaffinity(0))
    return (ranks_here, cores) if ranks_here > cores else None


def time_sharing_note(ranks: int, cores: int) -> str:
    return (f"{ranks} rank processes share {cores} core{'s' * (cores != 1)} here, so measured op times and gaps are mostly the "
            f"operating system switching between ranks, not the schedule's bubbles; each op's CPU time is measured "
            f"too, and the executed order replayed from it (the log's replayed bubble, the picture's replayed "
            f"timeline) is what one core per rank would show")


# -- forward step (Megatron-LM's pretrain_gpt.forward_step) --------------------------------------

def loss_func(loss_mask: torch.Tensor, output_tensor: torch.Tensor):
    losses = output_tensor.float().view(-1)
    mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * mask)
    if _training() and _CHECKS["nan_loss_at"] == _iteration() + 1:
        loss = loss * float("nan")  # --inject-nan-loss-at (testing aid)
    if _CHECKS["nan_check"] and _training():
        _note_nonfinite(_CHECKS["last_stage"], loss)
    num_tokens = mask.sum().clone().detach().to(torch.int)
    report = torch.cat([loss.clone().detach().view(1), num_tokens.float().view(1)])
    return loss, num_tokens, {"lm loss": report}


def forward_step(data_iterator, model):
    """Reads the microbatch only where it is needed: tokens on the chunk with
    the first stage, labels on the chunk with the last (both on rank 0 under V)."""
    from megatron.core.utils import get_attr_wrapped_model

    pre = get_attr_wrapped_model(model, "pre_process")
    post = get_attr_wrapped_model(model, "post_process")
    batch = next(data_iterator) if (pre or post) else None
    tokens = batch["tokens"] if pre else None
    position_ids = batch["position_ids"] if pre else None
    attention_mask = batch.get("attention_mask") if batch is not None else None
    labels = batch["labels"] if post else None
    _before_forward()
    output = model(tokens, position_ids, attention_mask, labels=labels)
    if _CHECKS["nan_check"] and _training() and isinstance(output, torch.Tensor):
        _note_nonfinite(_stage_of(model), output)
    return output, partial(loss_func, batch["loss_mask"] if post else None)


# -- reliability: the NaN/inf loss check and fault injection (testing aids) ----------------------

class NonFiniteLoss(RuntimeError):
    """The reduced training loss is NaN or inf (Megatron-LM stops there too)."""


# nan_check: --check-for-nan-in-loss (default on); last_stage: the loss stage's number;
# nan_loss_at / kill_at / kill_rank: --inject-nan-loss-at / --inject-kill-at / --inject-kill-rank
_CHECKS: dict = {"nan_check": False, "last_stage": 0, "nan_loss_at": None, "kill_at": None, "kill_rank": None}
# per training iteration: forward ops run on this rank, and per pipeline stage a lazily evaluated
# "some output was not finite" flag (a tensor: no device sync on the healthy path)
_STEP: dict = {"iteration": None, "forwards": 0, "flags": {}}


def configure_checks(args: argparse.Namespace) -> None:
    chunks = getattr(args, "pipeline_chunks_resolved", 1)
    _CHECKS.update(nan_check=getattr(args, "check_for_nan_in_loss", True),
                   last_stage=args.pipeline_model_parallel_size * chunks - 1,
                   nan_loss_at=getattr(args, "inject_nan_loss_at", None),
                   kill_at=getattr(args, "inject_kill_at", None), kill_rank=getattr(args, "inject_kill_rank", None))
    _STEP.update(iteration=None, forwards=0, flags={})
    _LOSS_NAMES.clear()


def _iteration() -> int:
    from . import determinism

    return determinism._state["iteration"]  # the loop's 0-based index; the log numbers it + 1


def _training() -> bool:
    return torch.is_grad_enabled()  # evaluation runs under torch.no_grad()


def _before_forward() -> None:
    if not _training():
        return
    iteration = _iteration()
    if _STEP["iteration"] != iteration:
        _STEP.update(iteration=iteration, forwards=0, flags={})
    _STEP["forwards"] += 1
    if _CHECKS["kill_at"] == iteration + 1 and _STEP["forwards"] == 2 and \
            _CHECKS["kill_rank"] in (None, dist.get_rank() if dist.is_initialized() else 0):
        import signal

        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)  # --inject-kill-at (testing aid): die as kill -9 would


def _stage_of(model) -> int:
    inner = model
    while not hasattr(inner, "pipeline_stage") and hasattr(inner, "module"):
        inner = inner.module
    stage = getattr(inner, "pipeline_stage", None)
    if stage is None:  # megatron's own schedules: one chunk per rank
        from megatron.core import parallel_state as ps

        stage = ps.get_pipeline_model_parallel_rank()
    return stage


def _note_nonfinite(stage: int, tensor: torch.Tensor) -> None:
    bad = ~torch.isfinite(tensor.detach()).all()
    flags = _STEP["flags"]
    flags[stage] = flags[stage] | bad if stage in flags else bad


def check_loss(args: argparse.Namespace, losses: dict, iteration: int, flags: dict) -> None:
    """After a training step (every rank, with the reduced losses and the
    step's flags from `post_losses`): raise NonFiniteLoss naming the iteration
    and the first pipeline stage (and the global rank holding it) whose output
    or loss was NaN/inf."""
    if not getattr(args, "check_for_nan_in_loss", True) or all(math.isfinite(v) for v in losses.values()):
        return
    world, rank = dist.get_world_size(), dist.get_rank()
    last = _CHECKS["last_stage"]
    stages = sorted(s for s, flag in flags.items() if bool(flag))
    # the earliest stage in pipeline order, then the lowest global rank; else the loss stage's holder
    # (a loss can be NaN with finite outputs everywhere, e.g. with no loss tokens)
    mine = stages[0] * world + rank if stages else (last + 1) * world + (rank if _loss_holder(args) else world)
    from ..runtime.collectives import collective_device

    value = torch.tensor([mine], dtype=torch.long, device=collective_device())
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    stage, holder = divmod(int(value.item()), world)
    where = f"pipeline stage {min(stage, last)}, rank {holder}" if stage <= last + 1 else f"pipeline stage {last}"
    raise NonFiniteLoss(f"NaN/inf loss at iteration {iteration} (computed on {where})")


# -- logging helpers ---------------------------------------------------------------------------

def _loss_holder(args) -> bool:
    """Does this rank hold the last pipeline stage (and is it tp rank 0)?"""
    from megatron.core import parallel_state as ps

    from .. import schedules as S

    pp, rank = args.pipeline_model_parallel_size, ps.get_pipeline_model_parallel_rank()
    if args.pipeline_schedule is None:
        last = rank == pp - 1
    else:
        entry = S.info(args.pipeline_schedule)
        n = pp * args.pipeline_chunks_resolved
        last = S.owner_of(entry.placement, pp, n - 1)[0] == rank
    return last and ps.get_tensor_model_parallel_rank() == 0


_LOSS_NAMES: list = []  # every rank's view of the loss keys, learnt once (the loss function fixes them)


def _loss_names(args, store: list) -> list[str]:
    mine = sorted(store[0]) if store and _loss_holder(args) else []
    if not _LOSS_NAMES:
        seen: list = [None] * dist.get_world_size()
        dist.all_gather_object(seen, mine)  # once per process: ranks without the loss stage learn the names
        _LOSS_NAMES.extend(sorted({k for names in seen for k in names}) or ["lm loss"])
    if mine and mine != _LOSS_NAMES:
        raise ValueError(f"the loss function reported {mine} after reporting {_LOSS_NAMES}; its keys must not change")
    return _LOSS_NAMES


class PendingLosses:
    """A loss reduction in flight: posting it costs no synchronisation, so
    under post-validation the pipeline ranks do not meet at every iteration."""

    def __init__(self, args, store: list, flags: Optional[dict] = None, what: str = "losses") -> None:
        from ..runtime.collectives import collective_device

        self.what, self.timeout_s = what, float(getattr(args, "pipeline_p2p_timeout", None) or 600)
        self.names = _loss_names(args, store)
        totals = torch.zeros(2 * len(self.names), dtype=torch.float64)
        if _loss_holder(args):
            for i, key in enumerate(self.names):
                for item in store:
                    value = item[key].detach().double().view(-1).cpu()
                    totals[2 * i] += value[0]
                    totals[2 * i + 1] += value[1] if value.numel() > 1 else 1.0
        self.totals = totals.to(collective_device())
        self.flags = flags  # the iteration's non-finite flags, for check_loss
        # loss holders of every dp replica contribute; the others add zeros
        self.work = dist.all_reduce(self.totals, async_op=True)

    def wait(self) -> dict[str, float]:
        """Token-weighted mean of every reported loss over microbatches and data-parallel ranks."""
        try:
            self.work.wait(timeout=datetime.timedelta(seconds=self.timeout_s))
        except Exception as exc:
            raise PipelineTimeout(
                f"rank {dist.get_rank()} waited up to {self.timeout_s:g} s for every rank's {self.what}; at least one "
                f"rank died, hangs or is elsewhere in its program [{type(exc).__name__}]") from exc
        t = self.totals.cpu()
        return {k: float(t[2 * i] / t[2 * i + 1]) if t[2 * i + 1] > 0 else float("nan")
                for i, k in enumerate(self.names)}


def post_losses(args, store: list) -> PendingLosses:
    """Start reducing a training step's losses; `wait()` gives them on every rank."""
    flags, _STEP["flags"] = _STEP["flags"], {}
    return PendingLosses(args, store, flags, what=f"losses of iteration {_iteration() + 1}")


def reduce_losses(args, store: list) -> dict[str, float]:
    """Token-weighted mean of every reported loss over microbatches and data-parallel
    ranks, available on every rank."""
    return PendingLosses(args, store, what="evaluation losses").wait()


def measured_bubble(timelines: list[list]) -> float:
    """1 - busy / (pp * span) of one executed iteration (all ranks' op records)."""
    spans = [r for tl in timelines for r in tl]
    if not spans:
        return float("nan")
    start = min(r.start for r in spans)
    end = max(r.end for r in spans)
    busy = sum(r.end - r.start for r in spans)
    return max(0.0, 1.0 - busy / (len(timelines) * (end - start)))


def gather_timeline(runner) -> Optional[list[list]]:
    """The last step's op records of every pipeline rank (on pipeline group members)."""
    from megatron.core import parallel_state as ps

    if runner is None or getattr(runner, "last_step", None) is None:
        return None
    from .cpu_replay import ExecutedOp, cpu_seconds

    group = ps.get_pipeline_model_parallel_group()
    records = [(r.op, r.stage, r.start, r.end, cpu_seconds(r)) for r in runner.last_step.timeline]
    gathered: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, (ps.get_pipeline_model_parallel_rank(), records), group=group)
    out: list[list] = [[] for _ in gathered]
    for rank, recs in gathered:
        out[rank] = [ExecutedOp(rank, *rec) for rec in recs]
    return out


def costs_from_timeline(timeline: list[list], num_stages: int, *, time_shared: bool = False):
    """Per-stage F/B/W costs (median op durations, the timeline's unit; the shortest
    when ranks time-share cores, since an op that had its core alone shows its own
    cost) and the p2p latency (the shortest gap between an activation's producer
    on one rank and its consumer on another) of one executed iteration: what the
    plan panel simulates."""
    import statistics

    from ..schedules import B, BW, F, W, Costs
    from ..schedules.costs import measured_backward
    from .cpu_replay import p2p_latency

    durations: dict = {}
    for tl in timeline:
        for r in tl:
            durations.setdefault((r.op.kind, r.stage), []).append(r.end - r.start)

    pick = min if time_shared else statistics.median

    def per_stage(kind, default=0.0):
        return [pick(durations[(kind, s)]) if (kind, s) in durations else default for s in range(num_stages)]

    f = per_stage(F)
    b, w, bw = measured_backward(per_stage(B), per_stage(W), per_stage(BW, None))
    return Costs(f=f, b=b, w=w, comm=p2p_latency(timeline), bw=bw)


def write_timeline(args, timeline: list[list], title: str, plan=None) -> None:
    """The picture of one iteration: with `plan` (the executed Schedule), the plan
    simulated from this iteration's measured op costs above the measurement, on one
    time axis (ms); where ranks time-share cores, the costs are the ops' CPU times and the
    executed order replayed from them (`cpu_replay`) sits between the two; plus a Chrome
    trace of the measurement."""
    from dataclasses import replace

    from ..schedules import simulate
    from ..schedules.plot import plot_timeline
    from ..schedules.trace import write_chrome_trace
    from .cpu_replay import p2p_latency, replayed

    t0 = min(r.start for tl in timeline for r in tl)
    # milliseconds since the iteration's first op (the trace's time unit)
    shifted = [[r._replace(start=1e3 * (r.start - t0), end=1e3 * (r.end - t0),
                           cpu=None if r.cpu is None else 1e3 * r.cpu) for r in tl] for tl in timeline]
    time_shared = bool(getattr(args, "time_sharing", None))
    # ranks time-sharing cores: the executed order, each op taking the CPU time it used
    again = replayed(shifted) if time_shared else None
    panels, notes = {}, {}
    measured = "measured (this run, wall clock)" if again else "measured (this run)"
    if plan is not None:
        costs = (replace(costs_from_timeline(again, plan.num_stages), comm=p2p_latency(shifted)) if again
                 else costs_from_timeline(shifted, plan.num_stages, time_shared=time_shared))
        planned = simulate(plan, costs)
        what = "CPU times" if again else "costs"
        panels[f"planned (the schedule simulated from this run's measured op {what})"] = planned
    if again:
        panels["replayed (the order this run executed, each op taking the CPU time it used: one core per rank)"] = again
    panels[measured] = shifted
    if time_shared:
        ranks, cores = args.time_sharing
        notes[measured] = (f"{ranks} rank processes time-share {cores} core{'s' * (cores != 1)}: gaps are mostly the "
                           f"operating system switching between ranks, not pipeline bubbles")
    os.makedirs(os.path.dirname(os.path.abspath(args.timeline)), exist_ok=True)
    plot_timeline(panels, args.timeline, title=title, time_unit="ms", notes=notes)
    trace = os.path.splitext(args.timeline)[0] + ".json"
    write_chrome_trace(shifted, trace, name=title)
    args.timeline_written = (args.timeline, trace)
