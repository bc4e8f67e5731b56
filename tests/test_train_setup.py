"""Training's start-up (`train.setup`): megatron's parallel groups made again for other sizes
replace the old ones, which are destroyed, not left alive beside them (a launcher's own groups
of other sizes, re-made once per run: each left-behind set holds its communicators)."""
from __future__ import annotations

import argparse

from primus_megatron.runtime import local_ranks


def _sizes(tp: int, pp: int, ep: int) -> argparse.Namespace:
    return argparse.Namespace(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                              expert_model_parallel_size=ep, distributed_timeout_minutes=1)


def _regroup_body(rank: int, case: dict) -> dict:
    """The launcher made groups for tp=1, pp=2; switch to pp=1 x ep=2, back, and again, counting the
    process groups torch holds after each."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from primus_megatron.train.setup import model_parallel_groups

    live = dist.distributed_c10d._world.pg_map
    first_pp = ps.get_pipeline_model_parallel_group()
    counts = [len(live)]
    for sizes in [(1, 1, 2), (1, 1, 2), (1, 2, 1), (1, 1, 2)]:  # the repeat is a no-op
        model_parallel_groups(_sizes(*sizes))
        counts.append(len(live))
    expert = ps.get_expert_model_parallel_group()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total, group=expert)  # the groups made last work
    return {"counts": counts, "first_pp_alive": first_pp in live, "expert_sum": total.item(),
            "ep": ps.get_expert_model_parallel_world_size(), "pp": ps.get_pipeline_model_parallel_world_size()}


def test_regrouping_destroys_the_groups_it_replaces():
    results = local_ranks.run_ranks(_regroup_body, {"pp": 2}, 2, timeout_s=240)
    for r in results:
        start, ep2, ep2_again, pp2, ep2_last = r["counts"]
        # the same sizes make the same number of groups: a re-made set replaces the old one
        assert pp2 == start and ep2_last == ep2, r["counts"]
        assert ep2_again == ep2, r["counts"]
        assert not r["first_pp_alive"]  # the launcher's pipeline group is gone, not merely forgotten
        assert (r["ep"], r["pp"], r["expert_sum"]) == (2, 1, 3.0)
