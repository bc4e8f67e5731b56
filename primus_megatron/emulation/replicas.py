"""Data-parallel replicas of an emulated pipeline: dp x pp local gloo ranks (megatron's parallel
state: pp pipeline ranks, dp = world / pp replicas), each replica running its own microbatch count
with its own per-microbatch factors every step (`--pipeline-balance-data`: a `balancing.BatchPlan`'s
counts and factors), then an all-reduce of the chunks' weight gradients over the data-parallel group:
the gradient reduce, where the replicas meet, so the slowest replica sets the pace.

`run_replicas(runs, dp, pp, ...)` runs each `ReplicaRun` (our schedule through our runner with
`balance_data` set, or megatron's own 1F1B) in the same processes: first every step of every run
once with ops of zero time (each count planned and checked before timing), then `repeats` timed
passes, each over every run in turn. Per run it gives each step's time (the first rank's start to
the last rank's end of the reduce; the least over the passes), each replica's count and, per
replica and stage, the waits its chunks asked for. `simulated_makespans` is the simulator's
prediction of each replica's pipeline under the same factors (nothing else charged).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Optional, Sequence

from .. import schedules as S
from .baselines import MEGATRON_1F1B


@dataclass(frozen=True)
class ReplicaRun:
    """One thing to run: `schedule` (ours, or `MEGATRON_1F1B`) over `steps`, each step per replica
    the factors of its microbatches (its count: their number)."""

    label: str
    schedule: str
    steps: tuple  # per step, per replica, a tuple of per-microbatch factors
    mode: str = "lb-mini"  # balance_data given to our runner (its per-step count check)


def plan_of(schedule: str, pp: int, microbatches: int) -> S.Schedule:
    """The plan the runner runs (planned without the factors, as `balance_data` plans each count)."""
    return S.generate("1f1b" if schedule == MEGATRON_1F1B else schedule, pp, microbatches)


def simulated_makespans(schedule: str, pp: int, factors: Sequence[Sequence[float]],
                        costs: Optional[S.Costs] = None) -> list[float]:
    """Per replica the simulator's makespan (cost units) of its pipeline under its factors."""
    base = costs or S.Costs()
    out = []
    for f in factors:
        own = replace(base, mb_scale=tuple(f))
        out.append(S.simulate(plan_of(schedule, pp, len(f)), own).makespan)
    return out


def _rank_body(rank: int, case: dict) -> dict:
    """Every run's steps once with zero-time ops, then `repeats` timed passes over all the runs in
    turn (a stall of the host lands on one pass of a run, not on all of them)."""
    from megatron.core import parallel_state as ps

    from .chunks import tighten_timer_slack

    tighten_timer_slack()
    replica, stage = ps.get_data_parallel_rank(), ps.get_pipeline_model_parallel_rank()
    built = [_build(case, run, stage) for run in case["runs"]]  # (chunks, fbf, base times) per run
    for run, (chunks, fbf, base) in zip(case["runs"], built):
        still = [replace(t, f=0.0, b=0.0, w=0.0, bw=0.0, comm_in=0.0, comm_grad_in=0.0) for t in base]
        for factors in run.steps:
            _step(case, chunks, fbf, still, factors[replica])
    passes = [[[_step(case, chunks, fbf, base, factors[replica]) for factors in run.steps]
               for run, (chunks, fbf, base) in zip(case["runs"], built)] for _ in range(case["repeats"])]
    return {"replica": replica, "stage": stage, "passes": passes}


def _build(case: dict, run: ReplicaRun, pp_rank: int) -> tuple:
    """(this rank's emulated chunks, the forward-backward function, the chunks' base times) for `run`."""
    from ..schedules.ir import stage_of
    from .chunks import EmulatedChunk, emulated_config, stage_times

    pp = case["pp"]
    sched = plan_of(run.schedule, pp, pp)
    n = sched.chunks_per_rank
    times = stage_times(case["costs"], pp, n, sched.placement, scale=case["scale"])
    config = emulated_config(pp=pp, chunks=n, elements=case["elements"])
    chunks = []
    for c in range(n):
        stage = stage_of(sched.placement, pp, pp_rank, c)
        chunks.append(EmulatedChunk(config, stage, pp * n, times[stage], epoch=case["epoch"],
                                    vp_stage=c if n > 1 else None))
    if run.schedule == MEGATRON_1F1B:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        fbf = get_forward_backward_func()
    else:
        import primus_megatron as pm

        fbf = pm.get_forward_backward_func(run.schedule, balance_data=run.mode, record_timeline=False,
                                           p2p_timeout_s=case["p2p_timeout_s"])
    return chunks, fbf, [c.times for c in chunks]


def _step(case: dict, chunks: list, fbf, times: list, factors: Sequence[float]) -> dict:
    """One step of this replica's `factors` (its count: their number), then the gradient all-reduce."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from .chunks import forward_step_func

    for chunk, t in zip(chunks, times):  # the chunk's base times, this step's factors
        chunk.times = replace(t, mb_scale=tuple(factors))
        chunk.log.reset()
        chunk.zero_grad(set_to_none=True)
    dist.barrier()  # every step starts together (the optimizer step's synchronisation)
    t0 = time.monotonic()
    fbf(forward_step_func=forward_step_func((1, 1, case["elements"])),
        data_iterator=[None] * len(chunks) if len(chunks) > 1 else None,
        model=chunks if len(chunks) > 1 else chunks[0], num_microbatches=len(factors), seq_length=1,
        micro_batch_size=1, forward_only=False)
    for chunk in chunks:  # the data-parallel gradient reduce: the replicas meet here
        weight = chunk.linear.weight
        grad = weight.grad if weight.grad is not None else torch.zeros_like(weight)
        dist.all_reduce(grad, group=ps.get_data_parallel_group())
    t1 = time.monotonic()
    return {"begin": t0, "end": t1, "count": len(factors), "waits": [list(chunk.log.requested) for chunk in chunks]}


def run_replicas(runs: Sequence[ReplicaRun], dp: int, pp: int, *, scale: float, costs: Optional[S.Costs] = None,
                 elements: int = 64, repeats: int = 1, timeout_s: Optional[float] = None) -> list[dict]:
    """Run every `ReplicaRun` on dp x pp forked gloo ranks, ops at `costs` (cost units, default unit
    F, B, W) x `scale` seconds x their microbatch's factor, `repeats` timed passes (module doc). Per
    run: `step_s` (per step, seconds: the least over the passes, a timed wait is never shorter),
    `passes_s` (per pass, per step), `counts` (per step, per replica) and `waits` (per step, per
    replica, per stage: per chunk the (kind, seconds) waits asked for, in the last pass). A rank's
    failure raises RuntimeError."""
    from ..runtime import local_ranks

    costs = costs or S.Costs()
    spans = [max(simulated_makespans(r.schedule, pp, f, costs)) for r in runs for f in r.steps]
    p2p_timeout = 60.0 + 2.0 * scale * max(spans, default=0.0)
    case = {"pp": pp, "costs": costs, "scale": scale, "elements": elements, "runs": list(runs), "repeats": repeats,
            "epoch": time.monotonic(), "p2p_timeout_s": p2p_timeout, "gloo_timeout": int(2 * p2p_timeout)}
    limit = timeout_s if timeout_s is not None else 120.0 + 3.0 * repeats * scale * sum(spans) + 2.0 * p2p_timeout
    per_rank = local_ranks.run_ranks(_rank_body, case, dp * pp, timeout_s=limit)
    return [_gather(per_rank, i, dp, pp) for i in range(len(runs))]


def _gather(per_rank: list, i: int, dp: int, pp: int) -> dict:
    """Run `i`'s records from every rank: step times per pass, counts and waits per replica and stage."""
    out = {"passes_s": [], "counts": [], "waits": []}
    for one in range(len(per_rank[0]["passes"])):
        recs = [{(r["replica"], r["stage"]): r["passes"][one][i][k] for r in per_rank}
                for k in range(len(per_rank[0]["passes"][one][i]))]
        out["passes_s"].append([max(x["end"] for x in rec.values()) - min(x["begin"] for x in rec.values())
                                for rec in recs])
        out["counts"] = [[rec[(d, 0)]["count"] for d in range(dp)] for rec in recs]
        out["waits"] = [[[rec[(d, s)]["waits"] for s in range(pp)] for d in range(dp)] for rec in recs]
    out["step_s"] = [min(times) for times in zip(*out["passes_s"])]
    return out
