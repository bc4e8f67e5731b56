"""Re-planning on measured drift (issue 61 item 2): a schedule planned from costs (zb-auto, the V
schedules, what `--pipeline-schedule auto` chose) whose ranks' measured op times drift from the plan
is planned again from the measured per-rank costs, at a step boundary, job-wide.

Never on one noisy interval: only once a rank has stayed over `--pipeline-health-threshold` for
`--pipeline-health-patience` health intervals in a row (`inflight.drifted`). Job-wide consistent:
every rank of the job gathers its pipeline's health at the same training-step count, so right after
that gather every rank votes (one all_reduce of a flag over the world: a drift in any pipeline
re-plans all of them, or tensor and data-parallel replicas would run different orders and hang); then
every pipeline's measured costs meet in `agree_across_replicas` (each value the largest any replica
measured: the costs the first profiling window already agrees on), every rank plans from the same
costs, and the planner's fingerprint check runs before the new plan's first op. The planner logs the
predicted gain (the old and new plan simulated under the measured costs) and, for a schedule chosen
for its memory class, keeps the running plan when the new one is not faster at no more memory."""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..health import inflight
from .collectives import collective_device


def may_replan(spec, planner) -> bool:
    """The run plans from costs itself: not a fixed Schedule, not Megatron-LM's --deterministic-mode."""
    return (spec.health_replan and planner._fixed is None and spec.entry.uses_costs and not spec.deterministic
            and spec.health_interval > 0)


def replan_on_drift(health, planner, sched, log) -> bool:
    """After a step's health gather (call only at a gathering step, on every rank of the job): True if
    the job re-planned."""
    want = inflight.drifted(health.monitor)
    flag = torch.tensor([1.0 if want else 0.0], dtype=torch.float32, device=collective_device(None))
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # the whole job decides together
    if flag.item() == 0.0:
        return False
    from .profiler import agree_across_replicas

    got = health.last
    costs = inflight.measured_costs(health.last_samples, health.last_plan, got.scale_s, sched.chunks_per_rank,
                                    planner.spec.costs)
    costs = agree_across_replicas(costs)
    slow = ", ".join(str(r) for r, n in sorted(health.monitor.streak.items()) if n >= health.monitor.patience)
    log(f"pipeline health: drift at step {health.steps} (pipeline rank(s) {slow or 'of another pipeline'} over "
        f"{health.monitor.threshold:g}x the plan for {health.monitor.patience}+ intervals): re-planning "
        f"{sched.name} from the measured per-rank costs")
    planner.replan(sched, costs, health.steps)
    health.monitor.streak.clear()  # the new plan is the new reference
    health.replans += 1
    return True
