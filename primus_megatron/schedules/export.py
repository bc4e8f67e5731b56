"""Export a schedule: a stable JSON form (`to_dict`, versioned by FORMAT_VERSION), or torch.distributed.pipelining actions."""
from __future__ import annotations

import json
from typing import Any, Optional

from .costs import Costs
from .ir import B, BW, F, W, Op, Schedule
from .simulation import simulate

FORMAT_VERSION = 1
_TORCH_KIND = {F: "F", B: "I", W: "W", BW: "B"}


def to_dict(schedule: Schedule, costs: Optional[Costs] = None) -> dict[str, Any]:
    """`{"schedule", "pp", "microbatches", "chunks_per_rank", "placement", "ranks", "stats"}`;
    each op is `{"op", "mb", "chunk", "stage"}`, stats come from the simulator."""
    result = simulate(schedule, costs)
    return {
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


def to_json(schedule: Schedule, costs: Optional[Costs] = None) -> str:
    return json.dumps(to_dict(schedule, costs), indent=1)


def from_dict(data: dict[str, Any]) -> Schedule:
    """Inverse of `to_dict` (stats are ignored)."""
    ranks = tuple(tuple(Op(o["op"], int(o["mb"]), int(o.get("chunk", 0))) for o in ops) for ops in data["ranks"])
    return Schedule(data["schedule"], int(data["pp"]), int(data["microbatches"]), int(data["chunks_per_rank"]),
                    data["placement"], ranks)


def torch_actions(schedule: Schedule) -> list[list[str]]:
    """Per rank, torch.distributed.pipelining action strings: `{stage}{F|I|W|B}{mb}`
    (I is the input gradient, B a full backward)."""
    return [[f"{schedule.stage(r, op)}{_TORCH_KIND[op.kind]}{op.mb}" for op in ops]
            for r, ops in enumerate(schedule.ranks)]
