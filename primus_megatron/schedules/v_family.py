"""Candidates shared by the block-based V schedules (V-Half, V-Min), scored by the
costs they will run under; `variants.best_of` keeps the fastest within memory.

- the block repeated and squeezed, and compacted (warm-up and cool-down ops
  moved into free slots while memory allows);
- with `gaps`, the compacted block list-scheduled so B and W may run in gaps;
  with p2p latency also the block compacted at its ends only and the plain
  block (compaction packs slots assuming messages are free; the steady state's
  slack absorbs latency);
- a greedy list schedule under the block's own peak memory, deepest work
  first (`DEEPEST_FIRST` below): it follows the costs rather than the slots;
- then the winner's W re-placed where the costs leave gaps (`w_fill`).
"""
from __future__ import annotations

from typing import Optional

from .blocks import compact, memory_profile, repeat, slot_order, slot_policy, steady_window
from .costs import StageCosts
from .ir import B, BW, F, V, W, Op
from .listsched import Policy, list_schedule_scored
from .variants import best_of

# Greedy priority under a memory limit: the chunk-1 backward, the chunk-1 forward,
# the chunk-0 backward, the chunk-0 forward (each oldest microbatch first); W only
# fills gaps or makes room. Work that finishes a microbatch's trip round the V
# frees memory soonest.
_RANK = {(B, 1): 0, (F, 1): 1, (B, 0): 2, (F, 0): 3}


def _deepest_first_key(kind: str, mb: int, chunk: int, stage: int, state) -> tuple:
    if kind == W:
        return (4, mb)
    return (_RANK[(B if kind == BW else kind, chunk)], mb)


DEEPEST_FIRST = Policy(_deepest_first_key, name="deepest first")


def v_family(pp: int, m: int, block, sc: StageCosts, memory_limit: Optional[float], what: str, *,
             gaps: bool = True, post_validation: bool = False) -> list[list[Op]]:
    """The fastest candidate (module doc) within `memory_limit`: by the makespan, or with
    `post_validation` by the longest per-rank span (`variants.objective`)."""
    slots = repeat(pp, m, block)
    packed = compact(pp, slots, sc)
    candidates = [("squeezed", lambda: slot_order(pp, slots)), ("compacted", lambda: slot_order(pp, packed))]
    if gaps:
        candidates.append(("list-scheduled", lambda: list_schedule_scored(pp, m, 2, V, sc, None, slot_policy(packed))))
        if max(sc.comm) > 0:
            ends = compact(pp, slots, sc, keep=steady_window(slots, m))
            candidates.append(("list-scheduled ends", lambda: list_schedule_scored(pp, m, 2, V, sc, None, slot_policy(ends))))
            candidates.append(("list-scheduled plain", lambda: list_schedule_scored(pp, m, 2, V, sc, None, slot_policy(slots))))
    if not sc.one_slot:  # one-slot costs: the cost model the block is built for
        block_peak = max(max(row) for row in memory_profile(pp, slots, sc))
        limit = block_peak if memory_limit is None else min(block_peak, memory_limit)
        candidates.append(("deepest first", lambda: list_schedule_scored(pp, m, 2, V, sc, limit, DEEPEST_FIRST)))
    return best_of(candidates, pp=pp, m=m, chunks=2, placement=V, sc=sc, memory_limit=memory_limit, what=what, fill=True,
                   post_validation=post_validation)
