"""Which data microbatch runs as which schedule microbatch, when microbatches cost different amounts.

With packed variable-length data the microbatches of one step cost different amounts
(`costs.mb_scale`: one factor per microbatch on its op times). A schedule runs its microbatches
in a fixed order, so the step's data can be handed to it in any order: `choose_order` returns the
permutation `order` (schedule microbatch k runs data microbatch `order[k]`) whose simulated
iteration time is lowest among a few candidates, each simulated under the permuted factors (a
cost-driven schedule is planned again for each order, since its costs changed):

* identity: the data order as it is;
* heaviest first / lightest first: sorted by factor;
* mountain: light microbatches at both ends, rising to the heaviest in the middle (sorted
  lightest first, dealt alternately to the front and the back). The first microbatch's F
  crosses every stage before the pipeline is full (warm-up) and the last one's backward crosses
  them all after it empties (cool-down): nothing overlaps those, so light microbatches there
  shorten the step, and neighbours of similar cost keep the steady state from stalling (an
  exhaustive search at pp=4, m=7 finds its optima in this shape);
* local search: from the best of those, swaps of two microbatches, kept where they shorten
  the step, until none does or `budget` simulations are spent.

Identity is tried first and kept on ties, so the order chosen is never slower than the data's
own. `benchmarks/mb_order.py` measures the gains on long-tailed packed data (docs/schedules.md).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional, Sequence

from .costs import Costs
from .errors import ScheduleError
from .registry import generate
from .simulation import simulate


class OrderCandidate(NamedTuple):
    """One order tried: its name, the permutation, and its simulated iteration time."""

    label: str
    order: tuple[int, ...]
    iteration: float


def permuted(costs: Costs, order: Sequence[int]) -> Costs:
    """`costs` as the schedule sees them when schedule microbatch k runs data microbatch order[k]."""
    factors = costs.mb_scale
    if factors is None:
        raise ScheduleError("choosing a microbatch order needs per-microbatch factors (cost-mb-scale)")
    if sorted(order) != list(range(len(factors))):
        raise ScheduleError(f"a microbatch order must be a permutation of 0..{len(factors) - 1}, got {list(order)}")
    return dataclasses.replace(costs, mb_scale=tuple(factors[i] for i in order))


def iteration_time(name: str, pp: int, costs: Costs, order: Sequence[int], *, memory_limit: Optional[float] = None,
                   chunks: Optional[int] = None, post_validation: bool = False) -> float:
    """Simulated iteration time of schedule `name` with its microbatches in `order`: the makespan, or
    under post-validation the longest per-rank span (`variants.objective`)."""
    own = permuted(costs, order)
    sched = generate(name, pp, len(order), costs=own, memory_limit=memory_limit, chunks=chunks, validate=False,
                     post_validation=post_validation)
    result = simulate(sched, own)
    return max(result.span) if post_validation else result.makespan


def seed_orders(factors: Sequence[float]) -> list[tuple[str, tuple[int, ...]]]:
    """The fixed candidates (module doc), identity first; sorts are stable (ties keep data order)."""
    m = len(factors)
    up = tuple(sorted(range(m), key=lambda i: factors[i]))
    down = tuple(sorted(range(m), key=lambda i: -factors[i]))
    out = [("identity", tuple(range(m))), ("heaviest first", down), ("lightest first", up)]
    if m >= 3:
        out.append(("mountain", up[0::2] + up[1::2][::-1]))
    return out


def choose_order(name: str, pp: int, costs: Costs, *, memory_limit: Optional[float] = None,
                 chunks: Optional[int] = None, post_validation: bool = False,
                 budget: int = 32) -> tuple[tuple[int, ...], list[OrderCandidate]]:
    """(the order to run the data's microbatches in, every candidate tried) for schedule `name` on
    `pp` ranks, with `costs.mb_scale` the data's per-microbatch factors (module doc). `budget`:
    simulations the local search may spend after the fixed candidates (0: none)."""
    if costs.mb_scale is None:
        raise ScheduleError("choosing a microbatch order needs per-microbatch factors (cost-mb-scale)")
    search = _Search(lambda order: iteration_time(name, pp, costs, order, memory_limit=memory_limit, chunks=chunks,
                                                  post_validation=post_validation))
    best, best_time = None, None
    for label, order in seed_orders(costs.mb_scale):
        value = search.evaluate(label, order)
        if best_time is None or value < best_time:  # strictly: identity wins ties
            best, best_time = order, value
    best = search.swaps(best, best_time, budget)
    return best, search.table


class _Search:
    """Orders simulated so far (each once), in the order tried."""

    def __init__(self, time_of) -> None:
        self.time_of, self.seen, self.table = time_of, {}, []

    def evaluate(self, label: str, order: tuple[int, ...], *, listed: bool = True) -> float:
        """The order's iteration time, simulated once; listed in the table when new or when `listed`."""
        fresh = order not in self.seen
        if fresh:
            self.seen[order] = self.time_of(order)
        if fresh or listed:
            self.table.append(OrderCandidate(label, order, self.seen[order]))
        return self.seen[order]

    def swaps(self, order: tuple[int, ...], value: float, budget: int) -> tuple[int, ...]:
        """From `order`, swap two positions where that is faster (the first such swap), again,
        until no swap helps or `budget` orders not simulated before are spent."""
        spent, m = 0, len(order)
        pairs = [(i, j) for i in range(m - 1) for j in range(i + 1, m)]
        improved = True
        while improved:
            improved = False
            for i, j in pairs:
                trial = list(order)
                trial[i], trial[j] = trial[j], trial[i]
                trial_t = tuple(trial)
                if trial_t not in self.seen:
                    if spent >= budget:
                        return order
                    spent += 1
                got = self.evaluate(f"swap {i}<->{j}", trial_t, listed=False)
                if got < value - 1e-12:
                    order, value, improved = trial_t, got, True
                    break
        return order


def table_text(candidates: Sequence[OrderCandidate], chosen: Sequence[int]) -> str:
    """The comparison as text: a line per fixed order and one for the best order the swaps found,
    the chosen one marked."""
    identity = next((c.iteration for c in candidates if c.label == "identity"), None)
    swaps = [c for c in candidates if c.label.startswith("swap")]
    shown = [c for c in candidates if not c.label.startswith("swap")]
    if swaps:
        best = min(swaps, key=lambda c: c.iteration)
        shown.append(OrderCandidate(f"swaps ({len(swaps)})", best.order, best.iteration))
    lines = [f"{'order':16s} {'iteration':>10s} {'vs identity':>11s}  microbatches"]
    for c in sorted(shown, key=lambda c: c.iteration):
        gain = f"{c.iteration / identity:11.4f}" if identity else f"{'-':>11s}"
        mark = "  <- chosen" if tuple(c.order) == tuple(chosen) else ""
        lines.append(f"{c.label:16s} {c.iteration:10.4g} {gain}  {','.join(map(str, c.order))}{mark}")
    return "\n".join(lines)
