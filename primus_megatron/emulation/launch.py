"""Starting the ranks: `run` forks P local gloo ranks from the preloaded fork server
(`runtime.local_ranks`) and runs every variant in the same processes on the same kind of
emulated chunks (`chunks`): our schedules through `get_forward_backward_func` (strict
NCCL-order p2p on gloo), megatron's through its own `forward_backward_func`, torch's
through its pipelining schedules (`torch_stages`); each step optionally ends with the
emulated optimizer step (`optimizer`). Per variant it returns `measure.summarise`'s numbers.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Optional, Sequence

from .. import schedules as S
from .measure import host_costs, summarise
from .optimizer import EmulatedOptimizer
from .variants import Variant, for_layout, make_variant


def _rank_body(rank: int, case: dict) -> dict:
    import torch.distributed as dist

    from .chunks import tighten_timer_slack

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
    import gc

    import torch
    from megatron.core import parallel_state as ps

    # what the ranks hold by now (torch, megatron, earlier variants) out of the collector's way: otherwise a
    # full collection of it lands, every rank at once, in whichever variant's step crosses the threshold
    gc.collect()
    gc.freeze()
    if v.megatron and v.chunks > 1:
        ps.set_virtual_pipeline_model_parallel_world_size(v.chunks)
    try:
        result = _steps(rank, case, v)
    except BaseException:
        _linger(case)
        raise
    finally:
        if v.megatron and v.chunks > 1:
            ps.set_virtual_pipeline_model_parallel_world_size(None)
    torch.distributed.barrier()
    return result


def _linger(case: dict) -> None:
    """A rank that failed waits a while for its peers to fail too, keeping its connections open: they
    then time out on their own waits and name them, as behind a rank that hangs, instead of finding a
    closed connection. Not longer than two p2p timeouts: a peer stalled for good (`--fault stall`) is
    not waited for until gloo's own limit (60 s or more)."""
    import datetime

    import torch.distributed as dist

    try:
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=2 * case["p2p_timeout_s"] + 5))
    except RuntimeError:
        pass  # a peer did not come: the launch is failing already


def _steps(rank: int, case: dict, v: Variant) -> dict:
    """Variant `v`'s warm-up and timed steps on this rank: per timed step its times, each chunk's
    op log and weight gradient, and the runtime's executed ops; the final weights."""
    import torch.distributed as dist

    from .chunks import forward_step_func

    m, shape = case["microbatches"], (1, 1, case["elements"])
    chunks, runner, fbf = _variant_runner(rank, case, v)
    opt = _optimizer(rank, case, v, chunks)
    if hasattr(opt, "take_validation"):
        fbf.validation = opt.take_validation  # post-validation: the next step validates this one
    steps = []
    for step in range(case["warmup"] + case["steps"]):
        for chunk in chunks:
            chunk.log.reset()
        _straggle(case, rank, step + 1, chunks, opt)
        if opt is None:
            for chunk in chunks:
                chunk.zero_grad(set_to_none=True)
            dist.barrier()  # the optimizer step's global synchronisation: every step starts together
        else:
            opt.zero_grad()  # under post-validation: once the pending step is validated
        t0, cpu0, main0 = time.monotonic(), time.process_time(), time.thread_time()
        health0 = (fbf.health.spent_s, fbf.health.spent_cpu_s) if hasattr(fbf, "health") else (0.0, 0.0)
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
                record.update(_executed(fbf.last_step, v, rank))
                # in-flight health's host time in the step: wall, CPU
                record["health_s"] = (fbf.health.spent_s - health0[0], fbf.health.spent_cpu_s - health0[1])
            steps.append(record)
    if opt is not None and hasattr(opt, "finish"):
        opt.finish()  # validate the last step
    return {"steps": steps, "params": [_weight(chunk).detach().clone() for chunk in chunks]}


def _straggle(case: dict, rank: int, step: int, chunks: list, opt) -> None:
    """`--straggler RANK:FACTOR[@STEP]`: from training step STEP on (counted from 1, the warm-up step
    included, as the health line counts), every op of that rank, and its optimizer step, take FACTOR
    times as long."""
    slow = case.get("straggler")
    if not slow or slow["rank"] != rank:
        return
    factor = slow["factor"] if step >= slow.get("from_step", 1) else 1.0
    for chunk in chunks:
        chunk.slowdown = factor
    inner = getattr(opt, "optimizer", opt)
    if inner is not None and hasattr(inner, "base_step_s"):
        inner.step_s = inner.base_step_s * factor


def _variant_runner(rank: int, case: dict, v: Variant) -> tuple:
    """(this rank's emulated chunks, torch's runner or None, the forward-backward function or None):
    torch.distributed.pipelining's schedules run their own stage modules; ours and megatron's run
    EmulatedChunks at the variant's placement."""
    from .chunks import EmulatedChunk, emulated_config
    from ..schedules.ir import stage_of

    pp, elements = case["pp"], case["elements"]
    if v.torch:
        from .torch_stages import TorchRunner

        runner = TorchRunner(v.label, rank, pp, case["microbatches"], v.times, epoch=case["epoch"], elements=elements)
        return runner.modules, runner, None
    # megatron's interleaved schedule at pp=2 only with overlapped, unbatched p2p: batched, the previous and
    # next rank are one peer and an activation and a gradient of one shape swap silently (NVIDIA/Megatron-LM#1450;
    # Megatron-LM refuses it, arguments.py:573-582 at core_v0.16.1). Deeper pipelines keep megatron-core's
    # defaults (batched, not overlapped), as the published tables were measured.
    p2p = {"overlap_p2p_comm": True, "batch_p2p_comm": False} if v.megatron and v.chunks > 1 and pp == 2 else {}
    config, n = emulated_config(pp=pp, chunks=v.chunks, elements=elements, **p2p), pp * v.chunks
    chunks = []
    for c in range(v.chunks):
        stage = stage_of(v.placement, pp, rank, c)
        times = v.times[stage] if v.megatron else replace(v.times[stage], recv_stall=case.get("recv_stall", 1.0))
        chunks.append(EmulatedChunk(config, stage, n, times, epoch=case["epoch"],
                                    vp_stage=c if v.chunks > 1 else None))
    fault = case.get("fault")
    if fault and fault["rank"] == rank and not v.megatron:  # `--fault`: on our schedule's first chunk
        chunks[0].fault = (fault["action"], fault["kind"], fault["mb"])
    if v.megatron:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        return chunks, None, get_forward_backward_func()
    import primus_megatron as pm

    off = v.offload or {}
    health = v.health if v.health is not None else case.get("health", {})
    replans = _plans_by_name(v, health, off)
    fbf = pm.get_forward_backward_func(v.schedule.name if replans else v.schedule, p2p_timeout_s=case["p2p_timeout_s"],
                                      record_timeline=True, **health, chunks=v.chunks if replans else None,
                                      p2p_mode=case.get("p2p_mode"), recv_policy=case.get("recv_policy", "early"),
                                      p2p_groups=case.get("p2p_groups", "one"),
                                      offload=off["plan"] if "plan" in off else off.get("mode", "off"),
                                      offload_bandwidth=None if "plan" in off else off.get("bandwidth"),
                                      costs=v.costs if replans else off.get("costs"), memory_limit=off.get("memory_limit"),
                                      post_validation=replans and v.post_validation)
    fbf.emulated_copy_seconds = off.get("scale")  # offload copies take their planned time
    fbf.health.plan_costs = v.costs  # the plan's op times (the runner runs the schedule as given)
    fbf.health.log = _to_stderr  # stdout may carry the report as JSON
    if replans and rank == 0:  # what the re-plan says (its predicted gain) goes where the health lines go
        fbf.log = fbf.planner.log = _to_stderr
    return chunks, None, fbf


def _plans_by_name(v: Variant, health: dict, offload: dict) -> bool:
    """--pipeline-health-replan on and a registered schedule planned from costs (no offload plan): the runner
    plans it by name from the variant's costs (the same plan), so that it can plan again on a drift
    (runtime/drift.py); otherwise the variant's plan runs as it is."""
    from ..schedules import registry

    if not health.get("health_replan") or offload:
        return False
    try:
        return registry.info(v.schedule.name).uses_costs
    except ValueError:  # a baseline's order run by our runtime: not a registered schedule
        return False


def _to_stderr(text: str) -> None:
    import sys

    print(text, file=sys.stderr, flush=True)


def _chunk_records(chunks: list, grads: list) -> list:
    return [{"spans": list(chunk.log.spans), "emulated": chunk.log.emulated, "comm_wait": chunk.log.comm_wait,
             "w_runs": dict(chunk.log.w_runs), "deferred": chunk.log.deferred,
             "w_in_backward": chunk.log.w_in_backward, "stalled": chunk.log.stalled, "grad": grad} for chunk, grad in zip(chunks, grads)]


def _executed(last_step, v: Variant, rank: int) -> dict:
    """What our runtime executed in the step: its compute ops (count, time, timeline), its pairs' halves
    (`measure.host_gaps`'s partners) and copies."""
    ops = [r for r in last_step.timeline if r.op.kind in ("F", "B", "W", "BW")]
    sched, mine = v.schedule, v.schedule.ranks[rank]
    out = {"ops": len(ops), "op_time": sum(r.end - r.start for r in ops),
           "timeline": [(r.op.kind, r.op.mb, r.op.chunk, r.stage, r.start, r.end) for r in ops],
           "partners": {("F", mine[p].mb, sched.stage(rank, mine[p])):
                        (mine[p + 1].kind, mine[p + 1].mb, sched.stage(rank, mine[p + 1])) for p in sched.paired(rank)}}
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
    opt.base_step_s = step_s  # what `_straggle` multiplies
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


def run(variants: list[Variant], pp: int, microbatches: int, *, elements: int, steps: int, warmup: int = 1,
        p2p_timeout_s: Optional[float] = None, timeout_s: Optional[float] = None, p2p_mode: Optional[str] = None,
        optimizer: Optional[dict] = None, recv_policy: str = "early",
        fault: Optional[dict] = None, recv_stall: float = 1.0, straggler: Optional[dict] = None,
        health: Optional[dict] = None, p2p_groups: str = "one") -> tuple[list[Optional[dict]], dict]:
    """Run every variant on `pp` forked gloo ranks; (per variant its summary or None when skipped,
    memory per rank). A rank's failure (a named p2p timeout included) raises RuntimeError. `fault`:
    {"action": "stall" or "kill", "rank", "kind": "F" or "B", "mb"} (`EmulatedChunk.fault_point`).
    `recv_stall`: ROCm's pending-receive stall on our schedules' ops (`chunks.TimedWaits`). `straggler`:
    {"rank", "factor", "from_step"} (`_straggle`). `health`: get_forward_backward_func's health_* options.
    `p2p_groups`: one, or per-direction (our schedules' p2p on a group per direction)."""
    from ..runtime import local_ranks

    epoch = time.monotonic()
    if p2p_timeout_s is None:
        p2p_timeout_s = default_p2p_timeout(variants, pp)
    case = {"pp": pp, "microbatches": microbatches, "elements": elements, "steps": steps, "warmup": warmup,
            "p2p_timeout_s": p2p_timeout_s, "gloo_timeout": max(60, int(2 * p2p_timeout_s)), "epoch": epoch,
            "p2p_mode": p2p_mode, "optimizer": optimizer, "recv_policy": recv_policy, "fault": fault,
            "recv_stall": recv_stall, "straggler": straggler, "health": health or {}, "p2p_groups": p2p_groups,
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
