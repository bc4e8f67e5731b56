"""`auto` picks the fastest registered schedule that fits the memory limit, by the same
simulator the comparison table shows; `--pipeline-schedule auto` trains with that choice."""
from __future__ import annotations

import pytest

from primus_megatron import schedules as S
from primus_megatron.schedules import auto

COSTS = {
    "equal": S.Costs(),
    "slow-w": S.Costs(f=1.0, b=1.0, w=2.0, comm=0.05),
    "comm-heavy": S.Costs(f=1.0, b=2.0, w=1.0, comm=0.6),
    "unequal-ranks": S.Costs(f=[1.0, 1.4, 1.0, 0.8], b=[2.0, 2.5, 2.0, 1.6], w=[1.0, 1.2, 0.9, 0.8], comm=0.1),
}


def brute_force(pp, m, costs, limit, post_validation):
    best = None
    for name in S.names():
        if S.info(name).needs_extra == "ilp":
            continue
        try:
            sched = S.generate(name, pp, m, costs=costs, memory_limit=limit if S.info(name).cost_driven else None)
        except S.ScheduleError:
            continue
        r = S.simulate(sched, costs)
        if max(r.peak_memory) > limit + 1e-9:
            continue
        t = max(r.span) if post_validation else r.makespan
        key = (t, max(r.peak_memory))
        if best is None or key < best[0]:
            best = (key, name)
    return best


@pytest.mark.parametrize("post_validation", [False, True])
@pytest.mark.parametrize("m", [4, 8, 13])
@pytest.mark.parametrize("which", COSTS)
def test_choice_is_the_fastest_that_fits(which, m, post_validation):
    costs, pp = COSTS[which], 4
    for limit in (None, 3.0, 6.0):
        name, rows = auto.choose(pp, m, costs, limit, post_validation=post_validation)
        expected = brute_force(pp, m, costs, pp if limit is None else limit, post_validation)
        chosen = next(r for r in rows if r.name == name)
        assert chosen.iteration == pytest.approx(expected[0][0], rel=1e-12), (which, m, limit)
        assert chosen.peak <= (pp if limit is None else limit) + 1e-9
        assert not chosen.note
        # what the logged table shows: the chosen row is marked and has the smallest time among fitting rows
        text = auto.table(rows, name)
        marked = [line for line in text.splitlines() if line.endswith("<- chosen")]
        assert len(marked) == 1 and marked[0].split()[0] == name


def test_a_limit_no_schedule_meets_is_refused():
    with pytest.raises(S.ScheduleError, match=r"no registered schedule fits the memory limit 0.5"):
        auto.choose(4, 8, S.Costs(), 0.5)


def test_memory_limit_changes_the_choice_to_a_smaller_schedule():
    roomy, _ = auto.choose(4, 8, S.Costs(), 8.0)
    tight, rows = auto.choose(4, 8, S.Costs(), 2.5)
    limit = 2.5 if S.info(tight).cost_driven else None
    assert S.simulate(S.generate(tight, 4, 8, memory_limit=limit)).max_peak_memory <= 2.5
    assert roomy != tight
