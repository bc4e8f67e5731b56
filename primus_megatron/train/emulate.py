"""Run schedules on emulated devices: P local gloo ranks, the real runtime, timed ops.

`plan` builds what is run (our schedule, validated here, before any rank starts,
and megatron-core's own 1F1B / interleaved 1F1B as baselines) with each variant's
per-stage op times and its simulation; `run` forks the ranks from the preloaded fork
server (`runtime.local_ranks`) and runs every variant in the same processes on the same
kind of emulated chunks (`runtime.emulated`), our schedules through
`get_forward_backward_func` (strict NCCL-order p2p on gloo), megatron's through its
own `forward_backward_func`; `summarise` turns the measured op spans into the
numbers the simulator gives: makespan, bubble rate, per-rank busy and idle.

Time: the emulated ops wait on CLOCK_MONOTONIC, one clock for every process of the
host, so spans from all ranks share one axis. Before each measured step the ranks
meet at a barrier (the optimizer step's global synchronisation in a run without
post-validation), so a step's makespan is from the earliest op start to the latest
op end over all ranks, as the simulator's `makespan`, and its bubble rate is the
paper's (cost - work) / cost with cost = P x makespan and work the emulated op time
(`bubble_rate`, the simulator's sync bubble); `bubble_rate_async` uses the longest
rank's own span instead (the simulator's async bubble: no barrier between steps).
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

from .. import schedules as S

MEGATRON_1F1B = "megatron-1f1b"
MEGATRON_INTERLEAVED = "megatron-interleaved"
# torch.distributed.pipelining's zero-bubble schedules (runtime.emulated_torch.SCHEDULES)
TORCH_BASELINES = ("torch-interleaved-zb", "torch-zbv", "torch-dualpipev")
BASELINES = (MEGATRON_1F1B, MEGATRON_INTERLEAVED, *TORCH_BASELINES)


@dataclass
class Variant:
    """One thing to run: our schedule (`schedule` set) or a megatron baseline."""

    label: str
    schedule: S.Schedule  # ours: the plan run; a baseline: its counterpart's plan (for the simulation)
    megatron: bool
    times: list  # runtime.emulated.StageTimes per virtual stage, seconds
    simulated: dict  # makespan (seconds), bubble_rate, bubble_rate_async
    skipped: Optional[str] = None  # why it is not run (a baseline whose constraints this setting breaks)
    sim_timeline: Any = None  # the simulator's timeline (seconds), kept in the launcher
    post_validation: bool = False  # with an optimizer step: ours steps under post-validation
    # activation offload (ours): {"mode", "bandwidth" (units per time unit), "costs", "memory_limit",
    # "scale" (seconds per time unit)}: the runner plans it, the copies take the time the bandwidth says;
    # or {"plan" (an OffloadPlan chosen once, here), "costs", "scale"}: every rank runs that plan (an
    # `auto` plan at pp=32 costs each rank seconds of CPU, which 32 ranks on a few cores pay in turn)
    offload: Optional[dict] = None
    torch: bool = False  # a torch.distributed.pipelining baseline (`label` is its TORCH_BASELINES name)
    costs: Any = None  # the cost units it was planned with (for `with_host_work`)

    @property
    def chunks(self) -> int:
        return self.schedule.chunks_per_rank

    @property
    def placement(self) -> str:
        return self.schedule.placement


def for_layout(costs, chunks: int) -> S.Costs:
    """`costs` for a schedule of `chunks` per rank: a profile's (`balance.LayoutCosts`, a callable:
    its stage costs depend on how the layers split into chunks) is asked; plain Costs are as given."""
    return costs(chunks) if callable(costs) else costs


def simulated(sched: S.Schedule, costs: S.Costs, scale: float) -> dict:
    sim = S.simulate(sched, costs)
    return {"makespan": scale * sim.makespan, "bubble_rate": sim.bubble_sync, "bubble_rate_async": sim.bubble_async,
            "busy": [scale * b for b in sim.busy], "peak_memory": max(sim.peak_memory)}


def make_variant(label: str, sched: S.Schedule, costs: S.Costs, *, scale: float, megatron: bool = False,
                 skipped: Optional[str] = None, torch: bool = False) -> Variant:
    """A variant running `sched` (or, `megatron`, megatron's own schedule of its shape) on chunks
    whose op times are `costs` x `scale` seconds (a profile's: those of the schedule's own layout)."""
    costs = for_layout(costs, sched.chunks_per_rank)
    from ..runtime.emulated import stage_times

    pp = sched.pp
    return Variant(label, sched, megatron, stage_times(costs, pp, sched.chunks_per_rank, sched.placement, scale=scale),
                   simulated(sched, costs, scale), skipped,
                   [[(sp.op.kind, sp.op.mb, sp.op.chunk, scale * sp.start, scale * sp.end) for sp in row]
                    for row in S.simulate(sched, costs).timeline], torch=torch, costs=costs)


def with_host_work(v: Variant, overhead_s: float, scale: float, hop_s: float = 0.0) -> dict:
    """`v`'s simulation with the runtime's measured costs added (`host_costs`): `overhead_s` of
    host work on every op (`auto.with_op_overhead`) and each message between ranks taking at least
    `hop_s`. Makespan (seconds) and bubble rates are counted as the measured ones are, against the
    emulated op time alone. What is left between this and the measured numbers is neither."""
    import dataclasses

    from ..schedules.auto import with_op_overhead

    sched, pp = v.schedule, v.schedule.pp
    work = sum(S.simulate(sched, v.costs).busy)
    costs = with_op_overhead(v.costs, overhead_s / scale, pp, sched.chunks_per_rank, sched.placement)
    if hop_s > 0:
        comm = costs.resolve(pp, sched.chunks_per_rank, sched.placement).comm
        costs = dataclasses.replace(costs, comm=tuple(max(c, hop_s / scale) for c in comm))
    host = S.simulate(sched, costs)
    return {"makespan": scale * host.makespan, "bubble_rate": 1.0 - work / (pp * host.makespan),
            "bubble_rate_async": 1.0 - work / (pp * max(host.span)), "overhead": overhead_s, "hop": hop_s}


def host_gaps(timelines: list) -> tuple[Optional[float], Optional[float]]:
    """(hop, between) of one step, seconds, means: `hop`, the time from an op's end to the start of
    the op on another rank that takes its message (an activation to the next stage, a gradient to
    the previous one), over the messages whose consumer was waiting for them (its rank's previous
    op had ended by then); `between`, the time from an op's end to its rank's next op's start when
    that op was not waiting for a message (the executor's work between ops: posting, reaping).
    `timelines`: per rank, (kind, mb, chunk, stage, start, end) of its ops."""
    where = {}
    for rank, row in enumerate(timelines):
        for kind, mb, _chunk, stage, start, end in row:
            if kind != "W":  # a W sends nothing
                where[("F" if kind == "F" else "B", mb, stage)] = (rank, start, end)

    def source(kind: str, mb: int, stage: int):
        if kind == "W":
            return None
        key = ("F", mb, stage - 1) if kind == "F" else ("B", mb, stage + 1)
        return where.get(key)

    hops, between = [], []
    for rank, row in enumerate(timelines):
        row = sorted(row, key=lambda t: t[4])
        for prev, (kind, mb, _chunk, stage, start, _end) in zip([None, *row], row):
            src = source(kind, mb, stage)
            remote = src is not None and src[0] != rank
            if remote and (prev is None or prev[5] <= src[2]):  # idle until the message's op ended
                hops.append(start - src[2])
            elif prev is not None:  # its input was there when its rank became free
                between.append(start - prev[5])
    return (statistics.fmean(hops) if hops else None, statistics.fmean(between) if between else None)


def torch_variant(label: str, pp: int, microbatches: int, costs: S.Costs, *, scale: float) -> Variant:
    """torch's `label` schedule as a baseline, or a skipped variant saying which of torch's constraints
    this shape breaks (torch's own message)."""
    from ..runtime.emulated_torch import SCHEDULES, torch_order

    try:
        order = torch_order(label, pp, microbatches)
    except ValueError as exc:
        return Variant(label, S.generate("1f1b", pp, microbatches), False, [], {}, torch=True,
                       skipped=f"torch's {SCHEDULES[label][0]} refuses pp={pp}, {microbatches} microbatches: {exc}")
    return make_variant(label, order, costs, scale=scale, torch=True)


AUTO = "auto"


def choose(pp: int, microbatches: int, costs: S.Costs, *, scale: float, op_overhead_s: float,
           memory_limit: Optional[float] = None, post_validation: bool = False) -> tuple[str, list]:
    """`auto` on emulated devices: (the registered schedule with the lowest simulated iteration
    time, every candidate), each op charged the runtime's host work per op (`op_overhead_s`
    seconds, as `measure_op_overhead` finds it), which weighs most on schedules of many small ops."""
    return S.auto.choose(pp, microbatches, costs, memory_limit, post_validation=post_validation,
                         op_overhead=op_overhead_s / scale)


def planning_costs(name: str, pp: int, costs: S.Costs, op_overhead: float, chunks: Optional[int] = None) -> S.Costs:
    """The costs `name` is planned on: `costs` with `op_overhead` (cost units) of host work added to
    every op when the schedule's order depends on its costs (`auto.with_op_overhead`), else `costs`.
    The host work per op does not shrink with an op's share, so it moves a cost-driven plan (fewer,
    larger ops under a fixed overhead) as it moves `auto`'s choice."""
    from ..schedules.auto import with_op_overhead
    from ..schedules.registry import info, resolve_chunks

    entry = info(name)
    if not op_overhead or not entry.uses_costs:
        return costs
    return with_op_overhead(costs, op_overhead, pp, resolve_chunks(entry, chunks), entry.placement)


def plan(name: str, pp: int, microbatches: int, costs: S.Costs, *, scale: float, memory_limit: Optional[float] = None,
         chunks: Optional[int] = None, post_validation: bool = False, baselines: Sequence[str] = (),
         label: Optional[str] = None, op_overhead_s: float = 0.0) -> list[Variant]:
    """The variants of one emulate run (module doc); ScheduleError / ValueError for bad input.
    `name` "auto": the schedule `choose` picks with `op_overhead_s`, labelled auto=NAME. A schedule
    whose order depends on the costs (`uses_costs`: zb-auto, the V family) is planned on the costs
    with `op_overhead_s` charged to every op (`planning_costs`), as `choose` compares it; its
    emulated op times, and the simulated numbers reported, stay the given costs."""
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise ValueError(f"--baselines takes {', '.join(BASELINES)}, got {', '.join(unknown)}")
    if name == AUTO:
        name, _ = choose(pp, microbatches, costs, scale=scale, op_overhead_s=op_overhead_s,
                         memory_limit=memory_limit, post_validation=post_validation)
        label = label or f"{AUTO}={name}"
    from ..schedules.registry import resolve_chunks

    own = for_layout(costs, resolve_chunks(S.info(name), chunks))
    sched = S.generate(name, pp, microbatches, costs=planning_costs(name, pp, own, op_overhead_s / scale, chunks),
                       memory_limit=memory_limit, chunks=chunks, post_validation=post_validation)

    def variant(lbl: str, s: S.Schedule, megatron: bool, skipped: Optional[str] = None) -> Variant:
        return make_variant(lbl, s, costs, scale=scale, megatron=megatron, skipped=skipped)

    out = [variant(label or sched.name, sched, False)]
    for base in baselines:
        if base == MEGATRON_1F1B:
            out.append(variant(base, S.generate("1f1b", pp, microbatches), True))
            continue
        if base in TORCH_BASELINES:
            out.append(torch_variant(base, pp, microbatches, costs, scale=scale))
            continue
        n = chunks if chunks and chunks >= 2 else 2
        if microbatches % pp:
            # megatron-core 0.16.1 schedules.py:995-1015 (groups of pp microbatches per virtual stage)
            out.append(Variant(base, sched, True, [], {}, skipped=f"megatron's interleaved schedule needs the "
                               f"microbatch count to be a multiple of pp ({microbatches} is not of {pp})"))
            continue
        out.append(variant(base, S.generate("interleaved-1f1b", pp, microbatches, chunks=n), True))
    return out


# -- the emulated optimizer step ---------------------------------------------------------------------

class EmulatedOptimizer:
    """megatron's optimizer interface, as its training loop and `PostValidationOptimizer` use it, over
    the emulated chunks' real parameters: a torch SGD step that also waits `step_s` (the emulated
    optimizer time). `step()` is megatron's synchronous path: the global all-reduce of the gradient
    norm's square (every rank waits for the slowest: the synchronisation post-validation removes),
    then clipping and the step. `clip_grad` > 0 makes post-validation snapshot and check every step."""

    is_stub_optimizer = False

    def __init__(self, params, *, step_s: float, clip_grad: float = 1.0e6, lr: float = 1.0e-3) -> None:
        import types

        import torch

        self.optimizer = torch.optim.SGD(list(params), lr=lr)
        self.config = types.SimpleNamespace(clip_grad=clip_grad, use_precision_aware_optimizer_no_fp8_or_ds_fp8=False)
        self.step_s = step_s

    def get_parameters(self) -> list:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def get_main_grads_for_grad_norm(self) -> list:
        return [p.grad for p in self.get_parameters() if p.grad is not None]

    def get_grad_stats_parallel_group(self):
        return None  # the whole world: every pipeline rank's gradients count

    def prepare_grads(self) -> bool:
        return False  # fp32: the gradients are the main gradients, nothing to unscale

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step_with_ready_grads(self) -> bool:
        from ..runtime.emulated import wait_until

        wait_until(time.monotonic() + self.step_s)
        self.optimizer.step()
        return True

    def step(self) -> tuple:
        import torch
        import torch.distributed as dist
        from megatron.core.optimizer import clip_grads

        grads = self.get_main_grads_for_grad_norm()
        total = torch.zeros(1) + sum(float(g.double().pow(2).sum()) for g in grads)
        dist.all_reduce(total)  # the global synchronisation
        norm = float(total.item()) ** 0.5
        if self.config.clip_grad > 0 and self.config.clip_grad / (norm + 1.0e-6) < 1.0:
            clip_grads.clip_grad_by_total_norm_fp32(self.get_parameters(), max_norm=self.config.clip_grad,
                                                    total_norm=norm)
        self.step_with_ready_grads()
        return True, norm, None


# -- the ranks -------------------------------------------------------------------------------------

def _rank_body(rank: int, case: dict) -> dict:
    import torch.distributed as dist

    from ..runtime.emulated import tighten_timer_slack

    tighten_timer_slack()
    results = []
    for v in case["variants"]:
        if v.skipped:
            results.append(None)
            continue
        dist.barrier()
        results.append(_run_variant(rank, case, v))
    return {"variants": results, "memory": _memory_kib()}


def _run_variant(rank: int, case: dict, v: Variant) -> dict:
    import torch
    from megatron.core import parallel_state as ps

    if v.megatron and v.chunks > 1:
        ps.set_virtual_pipeline_model_parallel_world_size(v.chunks)
    try:
        return _steps(rank, case, v)
    finally:
        if v.megatron and v.chunks > 1:
            ps.set_virtual_pipeline_model_parallel_world_size(None)
        torch.distributed.barrier()


def _steps(rank: int, case: dict, v: Variant) -> dict:
    """Variant `v`'s warm-up and timed steps on this rank: per timed step its times, each chunk's
    op log and weight gradient, and the runtime's executed ops; the final weights."""
    import torch.distributed as dist

    from ..runtime.emulated import forward_step_func

    m, shape = case["microbatches"], (1, 1, case["elements"])
    chunks, runner, fbf = _variant_runner(rank, case, v)
    opt = _optimizer(rank, case, v, chunks)
    if hasattr(opt, "take_validation"):
        fbf.validation = opt.take_validation  # post-validation: the next step validates this one
    steps = []
    for step in range(case["warmup"] + case["steps"]):
        for chunk in chunks:
            chunk.log.reset()
        if opt is None:
            for chunk in chunks:
                chunk.zero_grad(set_to_none=True)
            dist.barrier()  # the optimizer step's global synchronisation: every step starts together
        else:
            opt.zero_grad()  # under post-validation: once the pending step is validated
        t0, cpu0, main0 = time.monotonic(), time.process_time(), time.thread_time()
        if runner is not None:
            losses = runner.step()
        else:
            data = [None] * len(chunks) if len(chunks) > 1 else None  # megatron's interleaved wants one per chunk
            losses = fbf(forward_step_func=forward_step_func(shape), data_iterator=data,
                         model=chunks if len(chunks) > 1 else chunks[0], num_microbatches=m, seq_length=1,
                         micro_batch_size=1, forward_only=False)
        grads = [_weight(chunk).grad.clone() if _weight(chunk).grad is not None else None for chunk in chunks]
        if opt is not None:
            opt.step()
        t1, cpu1, main1 = time.monotonic(), time.process_time(), time.thread_time()
        if step >= case["warmup"]:
            record = {"begin": t0, "end": t1, "cpu": cpu1 - cpu0, "cpu_main": main1 - main0,
                      "chunks": _chunk_records(chunks, grads), "ops": 0, "op_time": 0.0,
                      "losses": [float(d["lm loss"]) for d in losses] if losses else []}
            if fbf is not None and not v.megatron and fbf.last_step is not None:
                record.update(_executed(fbf.last_step, v))
            steps.append(record)
    if opt is not None and hasattr(opt, "finish"):
        opt.finish()  # validate the last step
    return {"steps": steps, "params": [_weight(chunk).detach().clone() for chunk in chunks]}


def _variant_runner(rank: int, case: dict, v: Variant) -> tuple:
    """(this rank's emulated chunks, torch's runner or None, the forward-backward function or None):
    torch.distributed.pipelining's schedules run their own stage modules; ours and megatron's run
    EmulatedChunks at the variant's placement."""
    from ..runtime.emulated import EmulatedChunk, emulated_config
    from ..schedules.ir import stage_of

    pp, elements = case["pp"], case["elements"]
    if v.torch:
        from ..runtime.emulated_torch import TorchRunner

        runner = TorchRunner(v.label, rank, pp, case["microbatches"], v.times, epoch=case["epoch"], elements=elements)
        return runner.modules, runner, None
    config, n = emulated_config(pp=pp, chunks=v.chunks, elements=elements), pp * v.chunks
    chunks = []
    for c in range(v.chunks):
        stage = stage_of(v.placement, pp, rank, c)
        chunks.append(EmulatedChunk(config, stage, n, v.times[stage], epoch=case["epoch"],
                                    vp_stage=c if v.chunks > 1 else None))
    if v.megatron:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        return chunks, None, get_forward_backward_func()
    import primus_megatron as pm

    off = v.offload or {}
    fbf = pm.get_forward_backward_func(v.schedule, p2p_timeout_s=case["p2p_timeout_s"], record_timeline=True,
                                      p2p_mode=case.get("p2p_mode"),
                                      offload=off["plan"] if "plan" in off else off.get("mode", "off"),
                                      offload_bandwidth=None if "plan" in off else off.get("bandwidth"),
                                      costs=off.get("costs"), memory_limit=off.get("memory_limit"))
    fbf.emulated_copy_seconds = off.get("scale")  # offload copies take their planned time
    return chunks, None, fbf


def _chunk_records(chunks: list, grads: list) -> list:
    return [{"spans": list(chunk.log.spans), "emulated": chunk.log.emulated, "comm_wait": chunk.log.comm_wait,
             "w_runs": dict(chunk.log.w_runs), "deferred": chunk.log.deferred,
             "w_in_backward": chunk.log.w_in_backward, "grad": grad} for chunk, grad in zip(chunks, grads)]


def _executed(last_step, v: Variant) -> dict:
    """What our runtime executed in the step: its compute ops (count, time, timeline) and copies."""
    ops = [r for r in last_step.timeline if r.op.kind in ("F", "B", "W", "BW")]
    out = {"ops": len(ops), "op_time": sum(r.end - r.start for r in ops),
           "timeline": [(r.op.kind, r.op.mb, r.op.chunk, r.stage, r.start, r.end) for r in ops]}
    if v.offload:
        out["copies"] = last_step.copies
    return out


def _weight(chunk):
    """The emulated chunk's small linear weight (ours and megatron's: its ColumnParallelLinear; torch's: its own)."""
    return chunk.linear.weight if hasattr(chunk, "linear") else chunk.weight


def _optimizer(rank: int, case: dict, v: Variant, chunks: list):
    """The emulated optimizer step of `case["optimizer"]` (None: a barrier between steps instead):
    synchronous, or under post-validation for our schedules (megatron's own cannot validate)."""
    spec = case.get("optimizer")
    if not spec:
        return None
    step_s = spec["step_s"] * (spec.get("straggler_factor", 1.0) if rank == spec.get("straggler_rank") else 1.0)
    opt = EmulatedOptimizer([p for c in chunks for p in c.parameters()], step_s=step_s)
    if v.post_validation and not v.megatron and not v.torch:
        from ..optim import PostValidationOptimizer

        return PostValidationOptimizer(opt, chunks, timeout_s=case["p2p_timeout_s"])
    return opt




def _memory_kib() -> dict:
    """This process's resident memory: all of it (RSS, shared pages of the fork server included)
    and its own (private pages: what one more rank costs)."""
    out = {"rss": 0, "private": 0}
    try:
        with open("/proc/self/smaps_rollup", encoding="ascii") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key == "Rss":
                    out["rss"] = int(rest.split()[0])
                elif key in ("Private_Clean", "Private_Dirty"):
                    out["private"] += int(rest.split()[0])
    except OSError:
        pass
    return out


# -- the launcher ----------------------------------------------------------------------------------

def run(variants: list[Variant], pp: int, microbatches: int, *, elements: int, steps: int, warmup: int = 1,
        p2p_timeout_s: Optional[float] = None, timeout_s: Optional[float] = None, p2p_mode: Optional[str] = None,
        optimizer: Optional[dict] = None) -> tuple[list[Optional[dict]], dict]:
    """Run every variant on `pp` forked gloo ranks; (per variant its summary or None when skipped,
    memory per rank). A rank's failure (a named p2p timeout included) raises RuntimeError."""
    from ..runtime import local_ranks

    epoch = time.monotonic()
    if p2p_timeout_s is None:
        p2p_timeout_s = default_p2p_timeout(variants, pp)
    case = {"pp": pp, "microbatches": microbatches, "elements": elements, "steps": steps, "warmup": warmup,
            "p2p_timeout_s": p2p_timeout_s, "gloo_timeout": max(60, int(2 * p2p_timeout_s)), "epoch": epoch,
            "p2p_mode": p2p_mode, "optimizer": optimizer,
            "variants": [replace(v, sim_timeline=None) for v in variants]}
    work = sum(v.simulated.get("makespan", 0.0) for v in variants) * (steps + warmup)
    limit = timeout_s if timeout_s is not None else 120.0 + 3.0 * work + 2.0 * p2p_timeout_s
    per_rank = local_ranks.run_ranks(_rank_body, case, pp, timeout_s=limit)
    out = []
    for i, v in enumerate(variants):
        out.append(None if v.skipped else summarise(v, [r["variants"][i] for r in per_rank]))
    memory = {"rss_kib": [r["memory"]["rss"] for r in per_rank],
              "private_kib": [r["memory"]["private"] for r in per_rank]}
    return out, memory


def default_p2p_timeout(variants: Sequence[Variant], pp: int) -> float:
    """How long a rank may wait on another when none is given, seconds: 60, plus twice the longest
    planned step (a correct schedule never waits longer than its step) and one per rank (starting
    and first contact take longer, and each op's host work waits longer for a core, as pp grows)."""
    return 60.0 + 2.0 * max((v.simulated.get("makespan", 0.0) for v in variants), default=0.0) + 1.0 * pp


def measure_op_overhead(pp: int, costs: S.Costs, *, scale: float, elements: int, p2p_mode: Optional[str] = None,
                        p2p_timeout_s: Optional[float] = None) -> float:
    """The runtime's host work per op on this machine, seconds (`host_costs`): zb-h1 (F, B and W
    ops) with `pp` microbatches on these emulated chunks, one warm-up and one step."""
    costs = for_layout(costs, 1)
    probe = make_variant("zb-h1", S.generate("zb-h1", pp, pp, costs=costs), costs, scale=scale)
    (result,), _ = run([probe], pp, pp, elements=elements, steps=1, p2p_mode=p2p_mode, p2p_timeout_s=p2p_timeout_s)
    return host_costs(result)[0] or 0.0


def summarise(v: Variant, ranks: list[dict]) -> dict:
    """Measured numbers of one variant from every rank's step records (median over steps)."""
    pp = len(ranks)
    nsteps = len(ranks[0]["steps"])
    makespans, syncs, asyncs, busies, overheads, hops, betweens = [], [], [], [], [], [], []
    for s in range(nsteps):
        recs = [r["steps"][s] for r in ranks]
        starts, ends, busy, spans = [], [], [], []
        for rec in recs:
            ops = [sp for c in rec["chunks"] for sp in c["spans"]]
            first, last = min(sp[1] for sp in ops), max(sp[2] for sp in ops)
            starts.append(first)
            ends.append(last)
            spans.append(last - first)
            busy.append(sum(c["emulated"] for c in rec["chunks"]))
        makespan = max(ends) - min(starts)
        work = sum(busy)
        makespans.append(makespan)
        syncs.append(1.0 - work / (pp * makespan))
        asyncs.append(1.0 - work / (pp * max(spans)))
        busies.append(busy)
        if all("timeline" in rec for rec in recs):
            hop, gap = host_gaps([rec["timeline"] for rec in recs])
            if hop is not None and gap is not None:
                hops.append(hop)
                betweens.append(gap)
        n_ops = sum(rec["ops"] for rec in recs)
        if n_ops:
            inside = sum(c["emulated"] + c["comm_wait"] for rec in recs for c in rec["chunks"])
            overheads.append((sum(rec["op_time"] for rec in recs) - inside) / n_ops)
    # steps back to back (an optimizer step, no barrier): the iteration is the slowest rank's period
    periods = [(r["steps"][-1]["end"] - r["steps"][0]["begin"]) / nsteps for r in ranks]
    mid = sorted(range(nsteps), key=lambda i: makespans[i])[nsteps // 2]  # the median step
    # host work: every rank's CPU time in the step (all its threads) per emulated op, and the cores
    # that work needs at the measured pace (more than the machine has: the times include waiting for one)
    cpu = sum(r["steps"][mid]["cpu"] for r in ranks)
    cpu_main = sum(r["steps"][mid].get("cpu_main", 0.0) for r in ranks)
    n_emulated = sum(len(c["spans"]) for r in ranks for c in r["steps"][mid]["chunks"])
    mean_op = (sum(busies[mid]) / max(1, sum(len(c["spans"]) for r in ranks for c in r["steps"][mid]["chunks"])))
    busy = busies[mid]
    return {
        "label": v.label,
        "makespan": statistics.median(makespans),
        "makespan_min": min(makespans),
        "makespan_max": max(makespans),
        "bubble_rate": statistics.median(syncs),
        "bubble_rate_async": statistics.median(asyncs),
        "busy": busy,
        "idle": [makespans[mid] - b for b in busy],
        "overhead_per_op": statistics.median(overheads) if overheads else None,
        "hop_latency": statistics.median(hops) if hops else None,
        "between_ops": statistics.median(betweens) if betweens else None,
        "iteration": max(periods),
        "cpu_per_op": cpu / max(1, n_emulated),
        "main_cpu_per_op": cpu_main / max(1, n_emulated),  # the rank's main thread: executor, megatron, autograd
        "cores_busy": cpu / makespans[mid],
        "params": [r.get("params") for r in ranks],
        "mean_op_time": mean_op,
        "steps": nsteps,
        "timeline": _timeline(ranks, mid),
        "records": ranks,
    }


def _timeline(ranks: list[dict], step: int) -> list[list[tuple]]:
    """Per rank (kind, mb, chunk, start, end) of one step's emulated ops, seconds from the step's first op."""
    rows = [[(sp[0], None, c, sp[1], sp[2]) for c, ch in enumerate(r["steps"][step]["chunks"]) for sp in ch["spans"]]
            for r in ranks]
    origin = min(sp[3] for row in rows for sp in row)
    return [sorted(((k, mb, c, a - origin, b - origin) for k, mb, c, a, b in row), key=lambda t: t[3]) for row in rows]


# -- what the command prints ---------------------------------------------------------------------

def first_failure(text: str, most: int = 4) -> str:
    """Each failing rank's error line out of `local_ranks.run_ranks`'s RuntimeError text, on one line
    (a rank that timed out first and the ranks left waiting on it all show)."""
    lines = text.splitlines()
    found = [f"{line[:-len(' failed:')]}: {lines[i + 1]}" for i, line in enumerate(lines)
             if line.startswith("rank ") and line.endswith("failed:") and i + 1 < len(lines)]
    if not found:
        return lines[0] if lines else text
    more = f"; and {len(found) - most} more rank(s)" if len(found) > most else ""
    return "; ".join(found[:most]) + more


def _ms(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(1e3 * x, 4)


def _measured(r: dict) -> dict:
    return {"makespan": _ms(r["makespan"]), "makespan_min": _ms(r["makespan_min"]),
            "makespan_max": _ms(r["makespan_max"]),
            "bubble_rate": round(r["bubble_rate"], 5), "bubble_rate_async": round(r["bubble_rate_async"], 5),
            "busy": [_ms(b) for b in r["busy"]], "idle": [_ms(i) for i in r["idle"]],
            "overhead_per_op": _ms(r["overhead_per_op"]), "mean_op_time": _ms(r["mean_op_time"]), "steps": r["steps"],
            "iteration": _ms(r["iteration"]), "cpu_per_op": _ms(r["cpu_per_op"]),
            "main_cpu_per_op": _ms(r["main_cpu_per_op"]), "hop_latency": _ms(r.get("hop_latency")),
            "between_ops": _ms(r.get("between_ops")),
            "cores_busy": round(r["cores_busy"], 2)}


def _simulated(v: Variant) -> dict:
    s = v.simulated
    busy = s["busy"]
    return {"makespan": _ms(s["makespan"]), "bubble_rate": round(s["bubble_rate"], 5),
            "bubble_rate_async": round(s["bubble_rate_async"], 5), "busy": [_ms(b) for b in busy],
            "idle": [_ms(s["makespan"] - b) for b in busy]}


def host_costs(r: dict) -> tuple[Optional[float], Optional[float]]:
    """(host work per op, message time) of one measured variant, seconds, as the simulator takes
    them: an op's wall time beyond its emulated time plus the executor's work before the next op
    (`between_ops`), and a message's time from its op's end to its waiting consumer's start less
    that same work between ops (the producer's share, which the op now carries)."""
    overhead, between, hop = r.get("overhead_per_op"), r.get("between_ops"), r.get("hop_latency")
    if overhead is None:
        return None, None
    per_op = max(0.0, overhead + (between or 0.0))
    return per_op, (None if hop is None else max(0.0, hop - (between or 0.0)))


def launch_costs(variants: Sequence[Variant], results: list) -> tuple[Optional[float], Optional[float]]:
    """(host work per op, message time) of one launch, seconds (`host_costs`): the medians over our
    schedules (megatron's and torch's runtimes are not ours to time per op); None where none ran."""
    ours = [host_costs(r) for v, r in zip(variants, results) if r is not None and not v.megatron and not v.torch]
    per_op = [o for o, _ in ours if o is not None]
    hops = [h for _, h in ours if h is not None]
    return (statistics.median(per_op) if per_op else None, statistics.median(hops) if hops else None)


def report(variants: list[Variant], results: list, memory: dict, *, pp: int, microbatches: int, unit_ms: float,
           elements: int, p2p_mode: str, optimizer: Optional[dict] = None) -> dict:
    """One JSON-friendly object: the schedule's measured and simulated numbers (times in ms), the
    baselines' likewise (or why one did not run), memory per rank (KiB)."""
    head, rest = variants[0], list(zip(variants[1:], results[1:]))
    # one host work per op for the launch (ours measure it; megatron's and torch's ops are not ours to time)
    overhead, hop = launch_costs(variants, results)

    def host(v: Variant) -> Optional[dict]:
        if overhead is None or v.costs is None:
            return None
        h = with_host_work(v, overhead, unit_ms / 1000.0, hop or 0.0)
        return {"makespan": _ms(h["makespan"]), "bubble_rate": round(h["bubble_rate"], 5),
                "bubble_rate_async": round(h["bubble_rate_async"], 5), "host_per_op": _ms(overhead),
                "message": _ms(hop)}

    out = {"schedule": head.label, "pp": pp, "microbatches": microbatches, "chunks": head.chunks,
           "placement": head.placement, "time_unit_ms": unit_ms, "activation_bytes": 4 * elements,
           "p2p_mode": p2p_mode, "units": "ms", "optimizer": optimizer,
           "post_validation": head.post_validation,
           "measured": _measured(results[0]), "simulated": _simulated(head),
           "simulated_with_host_work": host(head), "baselines": []}
    for v, r in rest:
        if r is None:
            out["baselines"].append({"name": v.label, "skipped": v.skipped})
        else:
            out["baselines"].append({"name": v.label, "chunks": v.chunks, "measured": _measured(r),
                                     "simulated": _simulated(v), "simulated_with_host_work": host(v)})
    private = memory["private_kib"]
    out["memory_per_rank_kib"] = {"rss_max": max(memory["rss_kib"]), "private_max": max(private),
                                  "private_mean": round(sum(private) / len(private))}
    return out


def report_text(rep: dict) -> str:
    def num(x) -> str:
        return "-" if x is None else f"{x:.2f}"

    none = {"bubble_rate": None, "bubble_rate_async": None, "makespan": None}
    rows = [(rep["schedule"], rep["measured"], rep["simulated"], rep.get("simulated_with_host_work") or none)]
    rows += [(b["name"], b["measured"], b["simulated"], b.get("simulated_with_host_work") or none)
             for b in rep["baselines"] if "measured" in b]

    def rate(x) -> str:
        return f"{'-':>8s}" if x is None else f"{x:8.4f}"

    lines = [f"emulated {rep['schedule']}: pp={rep['pp']}, {rep['microbatches']} microbatches, {rep['chunks']} "
             f"chunk(s) per rank; 1 cost unit = {rep['time_unit_ms']:g} ms; activations {rep['activation_bytes']} "
             f"bytes; p2p {rep['p2p_mode']}; median of {rep['measured']['steps']} steps (times in ms)", ""]
    header = (f"{'schedule':24s} {'makespan':>10s} {'sim':>10s} {'sim+host':>10s} {'bubble':>8s} {'sim':>8s} "
              f"{'sim+host':>8s} {'async':>8s} {'sim':>8s} {'sim+host':>8s} {'overhead/op':>12s}")
    lines += [header, "-" * len(header)]
    for name, meas, sim, hw in rows:
        lines.append(f"{name:24s} {num(meas['makespan']):>10s} {num(sim['makespan']):>10s} {num(hw['makespan']):>10s} "
                     f"{meas['bubble_rate']:8.4f} {sim['bubble_rate']:8.4f} {rate(hw['bubble_rate'])} "
                     f"{meas['bubble_rate_async']:8.4f} {sim['bubble_rate_async']:8.4f} "
                     f"{rate(hw['bubble_rate_async'])} {num(meas['overhead_per_op']):>12s}")
    for b in rep["baselines"]:
        if "skipped" in b:
            lines.append(f"{b['name']:24s} not run: {b['skipped']}")
    meas, sim = rep["measured"], rep["simulated"]
    hw0 = rep.get("simulated_with_host_work") or {}
    if rep.get("optimizer"):
        lines += ["", "iteration with the optimizer step (steps back to back, slowest rank's period): "
                  + "; ".join(f"{name} {num(m_['iteration'])}" for name, m_, _ in rows)]
    lines += ["", f"{'rank':>4s} {'busy':>10s} {'idle':>10s} {'sim idle':>10s}"]
    for r, (busy, idle) in enumerate(zip(meas["busy"], meas["idle"])):
        lines.append(f"{r:4d} {num(busy):>10s} {num(idle):>10s} {num(sim['idle'][r]):>10s}")
    mem = rep["memory_per_rank_kib"]
    cores = os.cpu_count() or 1
    lines += ["", f"host work: {num(meas['cpu_per_op'])} ms of CPU per op (all ranks' threads; "
                  f"{num(meas['main_cpu_per_op'])} ms in the main threads: executor, megatron, autograd), "
                  f"{meas['cores_busy']:.2f} cores busy on average over the step; this machine has {cores}"
                  + (" (fewer: the measured times include waiting for a core; emulate longer ops with --time-unit)"
                     if meas["cores_busy"] > 0.8 * cores else "")]
    lines += ["", f"overhead/op: an op's wall time beyond its emulated time (megatron's forward_step/backward_step, "
                  f"the executor's bookkeeping, the wake-up), mean op {num(meas['mean_op_time'])} ms; between ops: from an "
                  f"op's end to the next one's start when it waited for nothing, {num(meas.get('between_ops'))} ms; hop: "
                  f"from an op's end to the start of the waiting op that takes its message, "
                  f"{num(meas.get('hop_latency'))} ms; sim+host: the simulator with every op costing overhead + "
                  f"between more and every message at least hop - between (medians over our schedules in this "
                  f"launch: {num(hw0.get('host_per_op'))} and {num(hw0.get('message'))} ms); what is left between it "
                  f"and the measured number is neither; memory per rank: "
                  f"{mem['private_max'] / 1024:.1f} MiB of its own (max), {mem['rss_max'] / 1024:.0f} MiB resident "
                  f"with the pages shared with the fork server"]
    return "\n".join(lines)


class _Span:
    __slots__ = ("op", "start", "end", "stage")

    def __init__(self, op, start, end) -> None:
        self.op, self.start, self.end, self.stage = op, start, end, None


def spans(timeline: list) -> list[list]:
    """(kind, mb, chunk, start, end) rows as objects the trace writer takes."""
    return [[_Span((k, mb, c), a, b) for k, mb, c, a, b in row] for row in timeline]
