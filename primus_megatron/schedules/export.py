"""Export a schedule: a stable JSON form (`to_dict`, versioned by FORMAT_VERSION), or torch.distributed.pipelining actions."""
from __future__ import annotations

import json
import math
from typing import Any, Optional

from .costs import Costs
from .ir import B, BW, F, W, Op, Pair, Schedule
from .simulation import simulate

FORMAT_VERSION = 1
_TORCH_KIND = {F: "F", B: "I", W: "W", BW: "B"}


def to_dict(schedule: Schedule, costs: Optional[Costs] = None, offload: Any = None) -> dict[str, Any]:
    """`{"schedule", "pp", "microbatches", "chunks_per_rank", "placement", "ranks", "stats"}`;
    each op is `{"op", "mb", "chunk", "stage"}`, stats come from the simulator (without offload).
    A schedule with overlapped pairs also has `"pairs"`: per rank the positions where a pair (that op,
    an F, and the next, a B or BW) starts.
    With `offload` (a `schedules.offload.OffloadResult` of this schedule) also `"offload"`
    (`offload_dict`): what the text report says of the plan."""
    result = simulate(schedule, costs)
    out = {
        "format_version": FORMAT_VERSION,
        "schedule": schedule.name,
        "pp": schedule.pp,
        "microbatches": schedule.microbatches,
        "chunks_per_rank": schedule.chunks_per_rank,
        "placement": schedule.placement,
        "ranks": [[{"op": op.kind, "mb": op.mb, "chunk": op.chunk, "stage": schedule.stage(r, op)} for op in ops]
                  for r, ops in enumerate(schedule.ranks)],
        "stats": result.stats(),
    }
    if schedule.has_pairs:
        out["pairs"] = [sorted(schedule.paired(r)) for r in range(schedule.pp)]
    if offload is not None:
        out["offload"] = offload_dict(offload, result)
    return out


def offload_dict(moved: Any, plain: Any) -> dict[str, Any]:
    """An offload plan's outcome: `{"mode", "bandwidth" (activation units per time unit per lane;
    null: unlimited), "makespan", "makespan_without", "bubble_sync", "bubble_async",
    "max_resident_peak", "max_peak_without", "ranks"}`; per rank `{"resident_peak", "peak_without",
    "reload_wait" (time its B and W ops waited for reloads), "to_host"}`, each entry of `to_host`
    `{"what": "activations" | "w_share", "mb", "chunk", "reload_before": {"op", "mb", "chunk"}}`
    (an F's activations, or what a B keeps for its W; the op whose start issues the reload)."""
    plan = moved.plan
    ranks = []
    for r, peak in enumerate(moved.peak_memory):
        to_host = [{"what": "w_share" if len(key) == 3 else "activations", "mb": key[0], "chunk": key[1],
                    "reload_before": {"op": op.kind, "mb": op.mb, "chunk": op.chunk}}
                   for key, op in sorted(plan.reload_at[r].items())]
        ranks.append({"resident_peak": _round(peak), "peak_without": _round(plain.peak_memory[r]),
                      "reload_wait": _round(moved.stall[r]), "to_host": to_host})
    return {"mode": plan.mode, "bandwidth": None if math.isinf(plan.bandwidth) else plan.bandwidth,
            "makespan": _round(moved.makespan), "makespan_without": _round(plain.makespan),
            "bubble_sync": _round(moved.bubble_sync), "bubble_async": _round(moved.bubble_async),
            "max_resident_peak": _round(moved.max_peak_memory), "max_peak_without": _round(plain.max_peak_memory),
            "ranks": ranks}


def _round(x: float) -> float:
    return round(float(x), 6)


def to_json(schedule: Schedule, costs: Optional[Costs] = None) -> str:
    return json.dumps(to_dict(schedule, costs), indent=1)


def from_dict(data: dict[str, Any]) -> Schedule:
    """Inverse of `to_dict` (stats are ignored)."""
    ranks = tuple(tuple(Op(o["op"], int(o["mb"]), int(o.get("chunk", 0))) for o in ops) for ops in data["ranks"])
    pairs = tuple(frozenset(int(p) for p in starts) for starts in data.get("pairs") or ())
    return Schedule(data["schedule"], int(data["pp"]), int(data["microbatches"]), int(data["chunks_per_rank"]),
                    data["placement"], ranks, {}, pairs)


def torch_actions(schedule: Schedule) -> list[list[str]]:
    """Per rank, torch.distributed.pipelining action strings: `{stage}{F|I|W|B}{mb}`
    (I is the input gradient, B a full backward); an overlapped pair as torch writes its
    OVERLAP_F_B action, `({f};{b})OVERLAP_F_B`."""
    def one(r: int, op: Op) -> str:
        return f"{schedule.stage(r, op)}{_TORCH_KIND[op.kind]}{op.mb}"

    return [[f"({one(r, item.f)};{one(r, item.b)})OVERLAP_F_B" if isinstance(item, Pair) else one(r, item)
             for item in schedule.items(r)] for r in range(schedule.pp)]
