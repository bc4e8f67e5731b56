"""In-flight health, the runner's side: keep the last steps' op records, and every
`--pipeline-health-interval` training steps reduce them to this rank's `RankSample`, gather every
pipeline rank's in one collective and report on the first pipeline rank (health/inflight.py says
what is compared; docs/health.md).

Per op the executor already records two marks (host timestamps on CPU, CUDA/HIP events recorded
on the stream on a GPU: `profiler.clock_for`); this module only keeps references to the last
`SAMPLED` steps' records, so a step between gathers costs one append. At a gather, events are read
(`Event.elapsed_time`) only for steps before the newest, which the device finished long ago: the
read does not wait. The gather's `.tolist()` of a device tensor waits for the collective, once per
interval.

Why the gather cannot hang: it runs after `run_step` has returned on every pipeline rank, that is
after each rank's last op of the step and after all its sends completed (`_Step.finish` waits for
them), at a training-step count every rank shares (every rank runs every step of the pipeline,
forward-only steps are not counted). No p2p is pending on any rank there, so the collective is the
only thing the group runs, as with the profiling window's gather at the same point
(`ProfilingWindow.finish`), and the validator's proof of the step's p2p is unchanged by it.
"""
from __future__ import annotations

import collections
import json
import socket
import statistics
import time
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist

from ..health import inflight
from .collectives import collective_device

SAMPLED = 8  # steps kept and reduced per gather (the last ones of the interval)
COMPUTE = {"F", "B", "W", "BW"}


class HealthGather:
    """Counts training steps; every `interval` of them gathers and reports (0: off)."""

    def __init__(self, interval: int = 100, *, threshold: float = 1.15, patience: int = 3,
                 json_path: Optional[str] = None, log: Optional[Callable[[str], None]] = None) -> None:
        self.interval = interval
        self.monitor = inflight.Monitor(threshold, patience)
        self.json_path = json_path
        self.log = log or _print
        self.steps = 0
        self.kept: collections.deque = collections.deque(maxlen=SAMPLED)
        self.plan_costs: Any = None  # the plan's cost model when the runner's spec has none (emulation)
        self._plans: dict = {}
        self.last: Optional[inflight.Interval] = None  # the latest interval this rank assessed
        # wall and CPU (all threads) seconds this rank spent here, gathers included: the wall time counts
        # waiting at the gather for the pipeline's last rank to end its step (benchmarks/health_overhead.py)
        self.spent_s = self.spent_cpu_s = 0.0
        self.last_samples: list = []  # the latest gather's samples and plan (runtime/drift.py re-plans from them)
        self.last_plan: Optional[inflight.Plan] = None
        self.replans = 0

    def step_done(self, result, sched, costs, group, rank: int, forward_only: bool) -> bool:
        """After a step's `run_step`, on every pipeline rank (module doc: why this cannot hang); True
        when this step gathered."""
        if forward_only or not self.interval:
            return False
        begin, cpu = time.perf_counter(), time.process_time()
        try:
            return self._step_done(result, sched, costs, group, rank)
        finally:
            self.spent_s += time.perf_counter() - begin
            self.spent_cpu_s += time.process_time() - cpu

    def _step_done(self, result, sched, costs, group, rank: int) -> bool:
        self.steps += 1
        if self.steps > 1 and result.marks:  # the run's first step pays start-up (first contact, allocator)
            self.kept.append((result.timeline, result.marks, result.clock))
        if self.steps % self.interval or self.steps == 1:  # every rank alike: nothing is sampled yet at step 1
            return False
        sample = reduce_steps(self.kept)
        self.kept.clear()
        self.last_samples = gather(sample, group)
        self.last_plan = self._plan(sched, costs if costs is not None else self.plan_costs)
        self.last = self.monitor.update(self.last_samples, self.last_plan, self.steps)
        try:
            report(self.last, rank, group, self.json_path, self.log)
        except Exception as exc:  # a full disk or a writer's error: this rank alone would stop, its peers hang
            self.log(f"WARNING pipeline health: the report failed ({type(exc).__name__}: {exc}); training goes on")
        return True

    def _plan(self, sched, costs) -> inflight.Plan:
        key = (id(sched), id(costs))
        if key not in self._plans:  # the entry holds sched and costs: their ids cannot be reused while cached
            self._plans = {key: (sched, costs, inflight.plan_of(sched, costs))}  # one plan runs at a time
        return self._plans[key][2]


def reduce_steps(kept) -> inflight.RankSample:
    """This rank's sample: every kept step but, on a GPU, the newest (its events may still run). Each
    kind counts as its median op time times its op count: one op held up (a page fault, a late
    wake-up on a busy host) does not make a rank look slow, a rank whose every op is slow does."""
    sample = inflight.RankSample(global_rank=dist.get_rank(), host=socket.gethostname())
    steps = list(kept)
    if len(steps) > 1 and getattr(steps[-1][2], "kind", "") == "events":
        steps = steps[:-1]
    durations: dict = collections.defaultdict(list)
    for timeline, (begin, end), clock in steps:
        sample.period += clock.elapsed(begin, end)
        sample.steps += 1
        for r in timeline:
            if r.op.kind in COMPUTE and r.pair != "dup":  # a combined pair's second record repeats its time
                durations["pair" if r.pair else r.op.kind, r.pair == "half"].append(r.end - r.start)
    for (kind, half), seconds in durations.items():
        # a pair run as two ops: each half is half a pair
        sample.add_op(kind, statistics.median(seconds) * len(seconds), len(seconds) / 2 if half else len(seconds))
    return sample


def gather(sample: inflight.RankSample, group) -> list:
    """Every pipeline rank's sample, in pipeline-rank order: one all_gather of a small float64 tensor."""
    device = collective_device(group)
    mine = torch.tensor(sample.to_vector(), dtype=torch.float64, device=device)
    out = torch.zeros(dist.get_world_size(group) * inflight.VECTOR_LENGTH, dtype=torch.float64, device=device)
    dist.all_gather_into_tensor(out, mine, group=group)
    values = out.view(-1, inflight.VECTOR_LENGTH).tolist()
    return [inflight.RankSample.from_vector(v) for v in values]


def report(got: inflight.Interval, rank: int, group, json_path: Optional[str], log: Callable[[str], None]) -> None:
    """The first pipeline rank logs (every pipeline over threshold; global rank 0's always) and writes
    the JSON line; any rank holding Megatron-LM's TensorBoard or W&B writer writes the scalars."""
    write_scalars(got)
    if rank != 0:
        return
    if dist.get_rank() == 0 or got.over:
        log(inflight.line(got))
        for warning in got.warnings:
            log("WARNING " + warning)
    text = json.dumps({"pipeline_health": inflight.record(got)})
    if json_path:
        with open(json_path, "a", encoding="utf-8") as f:
            f.write(text + "\n")  # one write per line: pipelines sharing the file do not interleave lines
    elif dist.get_rank() == 0 or got.over:
        log(text)


def write_scalars(got: inflight.Interval) -> None:
    """Through Megatron-LM's own writers, where its training loop made them (none otherwise)."""
    try:
        from megatron.training import global_vars
    except Exception:  # megatron-core alone (our script, emulation): no writers
        return
    tensorboard = global_vars.get_tensorboard_writer() if hasattr(global_vars, "get_tensorboard_writer") else None
    wandb = global_vars.get_wandb_writer() if hasattr(global_vars, "get_wandb_writer") else None
    if tensorboard is None and wandb is None:
        return
    args = getattr(global_vars, "_GLOBAL_ARGS", None)
    step = getattr(args, "curr_iteration", None) or got.step
    values = inflight.scalars(got)
    for tag, value in values.items():
        if tensorboard is not None:
            tensorboard.add_scalar(tag, value, step)
    if wandb is not None:
        wandb.log(values, step)


def _print(text: str) -> None:
    print(text, flush=True)
