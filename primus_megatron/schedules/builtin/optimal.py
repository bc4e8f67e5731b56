"""ZB-optimal: minimum iteration time under the cost and memory model, by integer
programming (HiGHS). For small cases only: it measures how far the heuristics
are from optimal. The iteration time is the makespan (an optimizer barrier ends
every iteration) or, under post-validation, the longest per-rank span (each rank
starts its next iteration when it ends this one: the simulator's async bubble)."""
from __future__ import annotations

import itertools
import math
from typing import NamedTuple, Optional

from ..costs import StageCosts
from ..deps import input_of, runs_after
from ..errors import ScheduleError
from ..ir import B, F, LOOP, W, Op, stage_of
from ..registry import register

MAX_OPS_PER_RANK = 36
TIME_LIMIT_S = 60.0


@register("zb-optimal", order=90, memory="limit", cost_driven=True, needs_extra="ilp",
          description="optimal zero-bubble order by ILP (HiGHS); small cases only",
          splits_backward=True)
def zb_optimal(pp: int, microbatches: int, *, costs: StageCosts, memory_limit: Optional[float] = None,
               chunks: int = 1, placement: str = LOOP, time_limit: float = TIME_LIMIT_S,
               post_validation: bool = False, **_) -> list[list[Op]]:
    limit = float(pp) if memory_limit is None else memory_limit
    warm = _heuristic_order(pp, microbatches, costs, limit, chunks, placement, post_validation)
    solution = solve(pp, microbatches, costs, limit, chunks=chunks, placement=placement, time_limit=time_limit,
                     warm=warm, post_validation=post_validation)
    if solution is None:
        raise ScheduleError(f"zb-optimal found no schedule within the memory limit {limit:g}")
    return solution.ranks


class Solution(NamedTuple):
    """The best order the solver found, its iteration time (`makespan`: the makespan, or under
    post-validation the longest per-rank span), the solver's lower bound on any order's, and
    whether it proved the order optimal."""

    ranks: list[list[Op]]
    makespan: float
    bound: float
    optimal: bool


def solve(pp: int, m: int, costs: StageCosts, memory_limit: float, *, chunks: int = 1, placement: str = LOOP,
          time_limit: float = TIME_LIMIT_S, warm: Optional[list[list[Op]]] = None,
          post_validation: bool = False) -> Optional[Solution]:
    """The order with the shortest iteration (the makespan; with `post_validation` the longest
    per-rank span) within `memory_limit` for this placement, or the best found in `time_limit`
    seconds (None if none was); `warm`, a valid order of the same pipeline, is the solver's
    first incumbent, so the answer is never worse than it."""
    try:
        import highspy
    except ImportError:
        raise ScheduleError("zb-optimal needs highspy: pip install 'primus_megatron[ilp]'") from None
    if 3 * m * chunks > MAX_OPS_PER_RANK:
        raise ScheduleError(f"zb-optimal solves an integer program and allows at most {MAX_OPS_PER_RANK // (3 * chunks)} "
                            f"microbatches here (got {m}); use zb-auto")
    ops = [(r, k, j, c, stage_of(placement, pp, r, c)) for r in range(pp) for c in range(chunks)
           for j in range(m) for k in (F, B, W)]  # (rank, kind, mb, chunk, stage)
    dur = [costs.duration(k, s, j) for _, k, j, _, s in ops]  # per microbatch (`costs.mb_scale`)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit))
    start = [h.addVariable(lb=0.0) for _ in ops]
    makespan = h.addVariable(lb=0.0)
    for i, d in enumerate(dur):
        h.addConstr(makespan - start[i] >= d)
    # Under post-validation the objective is the longest span: `period` >= each op's end less
    # its rank's first start. A rank's first op is its chunk 0's F of microbatch 0, pinned to
    # start as soon as its input arrives, as the simulator and the runtime start it (a later
    # start would shorten the span on paper only). The makespan stays a variable (bounded, not
    # minimised) for the warm start.
    objective, first = makespan, None
    if post_validation:
        objective = h.addVariable(lb=0.0)
        index = {(k, j, s): i for i, (_, k, j, _, s) in enumerate(ops)}
        first = [index[(F, 0, stage_of(placement, pp, r, 0))] for r in range(pp)]
        for r in range(1, pp):
            src = index[(F, 0, stage_of(placement, pp, r - 1, 0))]
            arrival = dur[src] + costs.comm[ops[src][4]]
            h.addConstr(start[first[r]] - start[src] <= arrival)  # (>= holds by the dependency)
        for i, (r, *_rest) in enumerate(ops):
            h.addConstr(objective - start[i] + start[first[r]] >= dur[i])
    fixed = _dependencies(h, ops, start, dur, costs, pp * chunks)
    binaries = _rank_orders(h, highspy, ops, start, dur, fixed, costs, memory_limit, pp, m, chunks)
    h.changeColCost(objective.index, 1.0)  # (set before the start: a model change drops it)
    incumbent = None if warm is None else _warm_start(warm, pp, m, costs, chunks, placement, ops, dur)
    if incumbent is not None:
        _set_start(h, highspy, incumbent, start, makespan, binaries, dur, ops, objective, first)
    h.run()
    if h.getInfo().primal_solution_status != 2:  # no feasible point found
        return None
    value = h.getSolution().col_value
    ranks: list[list[tuple[float, int, Op]]] = [[] for _ in range(pp)]
    for i, (r, k, j, c, _) in enumerate(ops):
        ranks[r].append((round(value[i], 6), i, Op(k, j, c)))
    optimal = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    best = value[objective.index]
    bound = h.getInfo().mip_dual_bound
    bound = best if optimal else (min(best, bound) if math.isfinite(bound) else 0.0)
    return Solution([[op for *_, op in sorted(row)] for row in ranks], best, bound, optimal)


def _dependencies(h, ops: list, start: list, dur: list, costs: StageCosts, n: int) -> set:
    """Constrain every op to start after its input (the dependency rule, plus the hop
    between ranks) and after the same op of the previous microbatch; returns the pairs
    (i, j) this orders on one rank: i runs before j."""
    index = {(k, j, s): i for i, (_, k, j, _, s) in enumerate(ops)}
    owner = {s: r for r, _, _, _, s in ops}

    def after(i: int, j: int, gap: float) -> None:  # op j starts >= end of op i + gap
        h.addConstr(start[j] - start[i] >= dur[i] + gap)

    fixed = set()
    for i, (r, k, j, c, s) in enumerate(ops):
        src = input_of(k, s, n)
        if src is not None:
            after(index[(src[0], j, src[1])], i, costs.comm[src[1]] if owner[src[1]] != r else 0.0)
        if runs_after(k) is not None:  # a stage runs F, then B, then W of a microbatch
            fixed.add((index[(runs_after(k), j, s)], i))
        if j > 0:  # a stage runs each kind in microbatch order
            after(index[(k, j - 1, s)], i, 0.0)
            fixed.add((index[(k, j - 1, s)], i))
    return fixed


def _rank_orders(h, highspy, ops: list, start: list, dur: list, fixed: set, costs: StageCosts, limit: float,
                 pp: int, m: int, chunks: int) -> list:
    """One binary per pair of a rank's ops not ordered by `fixed` (big-M disjunction), and
    the memory bound after every op that adds memory; returns (variable, i, j) per binary."""
    big = sum(dur) + 2 * m * pp * chunks * max(costs.comm) + 1.0
    binaries = []  # (variable, i, j): 1 if op i precedes op j on their rank
    before = {}  # (i, j) -> 1 if i precedes j (constant or binary)
    for r in range(pp):
        mine = [i for i, op in enumerate(ops) if op[0] == r]
        for i, j in itertools.combinations(mine, 2):
            if (i, j) in fixed:
                before[(i, j)], before[(j, i)] = 1, 0
            elif (j, i) in fixed:
                before[(i, j)], before[(j, i)] = 0, 1
            else:
                x = h.addVariable(lb=0, ub=1, type=highspy.HighsVarType.kInteger)
                h.addConstr(start[j] - start[i] + big * (1 - x) >= dur[i])
                h.addConstr(start[i] - start[j] + big * x >= dur[j])
                before[(i, j)], before[(j, i)] = x, 1 - x
                binaries.append((x, i, j))
        # Memory after every op that adds some (F, and B when mem_b > 0): what
        # every earlier op of the rank added, plus its own.
        for i in mine:
            if costs.memory(ops[i][1], ops[i][4]) <= 0:
                continue
            expr = costs.memory(ops[i][1], ops[i][4])
            for j in mine:
                if j != i:
                    expr = expr + costs.memory(ops[j][1], ops[j][4]) * before[(j, i)]
            if not isinstance(expr, (int, float)):
                h.addConstr(expr <= limit)
            elif expr > limit + 1e-9:
                raise ScheduleError(f"memory limit {limit:g} is too small for zb-optimal")
    return binaries


def _set_start(h, highspy, warm: tuple, start: list, makespan, binaries: list, dur: list, ops: list,
               objective, first: Optional[list]) -> None:
    """Hand the solver a first incumbent: the warm start's times and orders (and, under
    post-validation, its longest span; `first`: each rank's first op)."""
    starts, position = warm
    values = [0.0] * h.getNumCol()
    for i, t in enumerate(starts):
        values[start[i].index] = t
    values[makespan.index] = max(t + d for t, d in zip(starts, dur))
    if first is not None:
        values[objective.index] = max(t + d - starts[first[op[0]]] for t, d, op in zip(starts, dur, ops))
    for x, i, j in binaries:
        values[x.index] = 1.0 if position[i] < position[j] else 0.0
    solution = highspy.HighsSolution()
    solution.col_value = values
    solution.value_valid = True
    h.setSolution(solution)


def _heuristic_order(pp: int, m: int, costs: StageCosts, limit: float, chunks: int,
                     placement: str, post_validation: bool = False) -> Optional[list[list[Op]]]:
    """zb-auto's order under the same costs and memory limit (loop placement, one chunk),
    the solver's warm start; None where it does not apply or finds nothing. Without one
    HiGHS may spend its whole time limit finding any feasible order."""
    from ..registry import info

    if chunks != 1 or placement != LOOP:
        return None
    try:
        return info("zb-auto").generator(pp, m, chunks=1, costs=costs, memory_limit=limit,
                                         post_validation=post_validation)
    except ScheduleError:
        return None


def _warm_start(ranks: list[list[Op]], pp: int, m: int, costs: StageCosts, chunks: int, placement: str, ops: list,
                dur: list) -> Optional[tuple[list[float], list[int]]]:
    """(start time, position on its rank) per op of the program for a given order, or
    None where the order has an op the program does not have (a fused BW)."""
    from ..ir import Schedule
    from ..simulation import end_times

    index = {(r, op.kind, op.mb, op.chunk): i for i, (r, op) in
             enumerate((r, Op(k, j, c)) for r, k, j, c, _ in ops)}
    order = [[index.get((r, op.kind, op.mb, op.chunk)) for op in row] for r, row in enumerate(ranks)]
    if any(i is None for row in order for i in row):
        return None
    ends = end_times(Schedule("warm", pp, m, chunks, placement, tuple(map(tuple, ranks))), costs)
    starts, position = [0.0] * len(ops), [0] * len(ops)
    for row, row_ends in zip(order, ends):
        for k, (i, end) in enumerate(zip(row, row_ends)):
            starts[i], position[i] = end - dur[i], k
    return starts, position
