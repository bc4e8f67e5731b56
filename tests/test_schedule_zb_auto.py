"""zb-auto: never worse than the handcrafted schedules at their memory, always within its limit."""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primus_megatron.schedules import Costs, ScheduleError, generate, simulate

SCALE = float(os.environ.get("PLANNER_EXAMPLES", "1"))
EPS = 1e-9
times = st.floats(min_value=0.1, max_value=4.0, allow_nan=False)
comms = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@st.composite
def time_costs(draw, pp):
    def value(elements):
        return draw(st.one_of(elements, st.lists(elements, min_size=pp, max_size=pp)))
    return Costs(f=value(times), b=value(times), w=value(times), comm=value(comms))


def makespan(name, p, m, costs, limit=None):
    return simulate(generate(name, p, m, costs=costs, memory_limit=limit), costs)


def check_not_worse(p, m, costs):
    h1 = makespan("zb-h1", p, m, costs)
    auto_p = generate("zb-auto", p, m, costs=costs, memory_limit=p)
    r = simulate(auto_p, costs)
    assert r.makespan <= h1.makespan + EPS and r.max_peak_memory <= p + EPS
    # default limit is 1F1B's memory, p
    default = simulate(generate("zb-auto", p, m, costs=costs), costs)
    assert default.makespan == pytest.approx(r.makespan) and default.max_peak_memory <= p + EPS
    h2 = makespan("zb-h2", p, m, costs)
    assert h2.max_peak_memory <= 2 * p - 1 + EPS  # zb-h2 fits under the limit it is compared at
    r2 = makespan("zb-auto", p, m, costs, 2 * p - 1)
    assert r2.makespan <= h2.makespan + EPS and r2.max_peak_memory <= 2 * p - 1 + EPS
    assert r2.makespan <= r.makespan + EPS  # more memory never hurts


@pytest.mark.parametrize("p", [2, 3, 4, 6, 8])
def test_not_worse_than_handcrafted_equal_costs(p):
    for m in sorted({1, p - 1, p, 2 * p - 1, 3 * p}):
        check_not_worse(p, m, Costs())


@settings(max_examples=int(25 * SCALE))
@given(data=st.data())
def test_not_worse_than_handcrafted_random_costs(data):
    p = data.draw(st.integers(2, 8), label="pp")
    m = data.draw(st.integers(1, 24), label="m")
    check_not_worse(p, m, data.draw(time_costs(p), label="costs"))


@settings(max_examples=int(30 * SCALE))
@given(data=st.data())
def test_respects_every_limit_it_accepts(data):
    p = data.draw(st.integers(2, 10), label="pp")
    m = data.draw(st.integers(1, 32), label="m")
    costs = data.draw(time_costs(p), label="costs")
    if data.draw(st.booleans(), label="mem split"):
        costs = Costs(f=costs.f, b=costs.b, w=costs.w, comm=costs.comm, mem_f=1.0, mem_b=-0.5, mem_w=-0.5)
    limit = data.draw(st.floats(min_value=0.5, max_value=3.0 * p), label="limit")
    try:
        sched = generate("zb-auto", p, m, costs=costs, memory_limit=limit)
    except ScheduleError as exc:
        # only a limit below one microbatch's activations may be refused: with one unit a rank runs F B W
        assert limit < 1, f"limit {limit} refused: {exc}"
        assert "memory limit" in str(exc)
        return
    r = simulate(sched, costs)
    assert r.max_peak_memory <= limit + EPS
    assert sched.meta["memory_limit"] == limit


@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_limit_one_unit_is_accepted(p):
    """With memory for a single activation every rank runs F B W back to back: zb-auto must
    still produce that schedule (it is the only one), with peak memory exactly 1."""
    m = 2 * p
    r = simulate(generate("zb-auto", p, m, memory_limit=1))
    assert r.max_peak_memory == pytest.approx(1.0)


def test_strictly_better_than_handcrafted_with_unequal_costs():
    """f=1, b=2, w=1, comm=0.1 at twice 1F1B's memory: for m >= 2p auto reaches the lower bound
    m(f+b+w) + (p-1)(f+comm) (rank p-1 cannot start before p-1 forwards and hops, then is never
    idle), strictly below both zb-h1 and zb-h2, which leave gaps when B is longer than F."""
    f, b, w, comm = 1.0, 2.0, 1.0, 0.1
    costs = Costs(f=f, b=b, w=w, comm=comm)
    wins = []
    for p in (2, 3, 4, 6, 8):
        for m in (p, 2 * p, 3 * p, 24):
            auto = makespan("zb-auto", p, m, costs, 2 * p).makespan
            h1 = makespan("zb-h1", p, m, costs).makespan
            h2 = makespan("zb-h2", p, m, costs).makespan
            bound = m * (f + b + w) + (p - 1) * (f + comm)
            assert bound - EPS <= auto <= min(h1, h2) + EPS
            if m >= 2 * p:
                assert auto == pytest.approx(bound), (p, m)
                assert auto < min(h1, h2) - 1e-6, (p, m, auto, h1, h2)
            wins.append(auto < h1 - 1e-6)
    assert any(wins)


@settings(max_examples=int(15 * SCALE))
@given(data=st.data())
def test_more_memory_never_hurts(data):
    p = data.draw(st.integers(2, 6), label="pp")
    m = data.draw(st.integers(1, 16), label="m")
    costs = data.draw(time_costs(p), label="costs")
    low = data.draw(st.floats(min_value=1.0, max_value=2.0 * p), label="low")
    high = low + data.draw(st.floats(min_value=0.0, max_value=2.0 * p), label="extra")
    assert makespan("zb-auto", p, m, costs, high).makespan <= makespan("zb-auto", p, m, costs, low).makespan + EPS


@pytest.mark.parametrize("p", [2, 3, 4, 6])
def test_more_memory_never_hurts_sweep(p):
    """Where the memory limit matters most (B longer than F), raise the limit one unit at a time."""
    costs = Costs(f=1.0, b=2.0, w=1.0, comm=0.1)
    for m in (p, 2 * p + 1):
        spans = [makespan("zb-auto", p, m, costs, limit).makespan for limit in range(1, 2 * p + 3)]
        assert all(later <= earlier + EPS for earlier, later in zip(spans, spans[1:])), spans


B_HOLDS = Costs(mem_f=1.0, mem_b=0.5, mem_w=-1.5)  # B keeps half a unit more until W frees everything


@pytest.mark.parametrize("p,m", [(2, 2), (3, 4), (4, 8)])
def test_memory_added_by_b_is_planned_for(p, m):
    """Costs allow mem_b > 0 (B adds memory that W frees). zb-auto accepts a limit of 1.5 (F B W
    back to back), so every larger limit, including its default of p, must be accepted too, within
    the limit and no slower."""
    tight = makespan("zb-auto", p, m, B_HOLDS, 1.5)
    assert tight.max_peak_memory <= 1.5 + EPS
    for limit in [1.5, 2.0, 2.5, 3.0, p + 0.5, 2.0 * p]:
        try:
            r = makespan("zb-auto", p, m, B_HOLDS, limit)
        except ScheduleError as exc:
            pytest.fail(f"pp={p} m={m}: limit {limit} refused although limit 1.5 is met: {exc}")
        assert r.max_peak_memory <= limit + EPS and r.makespan <= tight.makespan + EPS
    generate("zb-auto", p, m, costs=B_HOLDS)  # the default limit, p units


@pytest.mark.parametrize("limit", [None, 0.5, 3.0])
def test_activations_without_memory(limit):
    """mem_f = 0 (measured activations too small to count): memory is no constraint,
    so zb-auto plans as if it had room for every microbatch (it divided by zero)."""
    costs = Costs(f=2.0, b=1.0, w=[1.5, 0.0, 2.0, 0.0], mem_f=0.0, mem_b=0.0, mem_w=0.0)
    free = makespan("zb-auto", 4, 6, costs, limit)
    roomy = makespan("zb-auto", 4, 6, Costs(f=2.0, b=1.0, w=[1.5, 0.0, 2.0, 0.0]), 12.0)
    assert free.max_peak_memory == 0.0
    assert free.makespan == roomy.makespan


@pytest.mark.parametrize("mem_f", [1e-300, 1e-320])
def test_activations_of_negligible_memory(mem_f):
    """limit / (one microbatch's activations) overflows to infinity: planned as unbounded."""
    costs = Costs(mem_f=mem_f, mem_b=0.0, mem_w=-mem_f)
    assert makespan("zb-auto", 4, 8, costs, 1e10).makespan == makespan("zb-auto", 4, 8, Costs(), 16.0).makespan


def test_default_limit_is_one_f_one_b_s_memory_on_an_uneven_split():
    """A layer split that gives rank 0 five of eight layers: its activations are 1.25x an
    average rank's, so 1F1B itself holds 2.5 units there. zb-auto's default limit is what
    1F1B holds (not pp units), so it may run zb-h1's order and is never slower than it."""
    from primus_megatron.schedules import balance
    from primus_megatron.schedules.balance import ModelCosts, Part
    from primus_megatron.schedules.layer_split import LayerSplit

    model = ModelCosts(layer=Part(5.7, 6.1, 3.1), head=Part(17.8, 6.9, 12.2), comm=0.5)
    costs = balance.stage_costs(model, LayerSplit(8, first=5), 2, 1)
    one_f_one_b = simulate(generate("1f1b", 2, 8, costs=costs), costs)
    auto = simulate(generate("zb-auto", 2, 8, costs=costs), costs)
    h1 = simulate(generate("zb-h1", 2, 8, costs=costs), costs)
    assert max(one_f_one_b.peak_memory) > 2.0 + EPS  # the case this is about
    assert max(auto.peak_memory) <= max(one_f_one_b.peak_memory) + EPS
    assert auto.makespan <= h1.makespan + EPS


@settings(max_examples=int(20 * SCALE))
@given(data=st.data())
def test_each_objective_gets_the_better_plan_by_its_own_measure(data):
    """Planned for post-validation (the longest span) or for a barrier (the makespan) from the same
    candidates under the same limit: each plan is at least as good as the other by its own measure,
    and the post-validation plan never spans longer than zb-h1's / zb-h2's where they fit."""
    p = data.draw(st.integers(2, 8), label="pp")
    m = data.draw(st.integers(1, 24), label="m")
    costs = data.draw(time_costs(p), label="costs")
    kept = data.draw(st.sampled_from([1.0, 0.4, 0.2]), label="W's share")
    costs = Costs(f=costs.f, b=costs.b, w=costs.w, comm=costs.comm, mem_b=-(1 - kept), mem_w=-kept)
    limit = data.draw(st.sampled_from([p, 1.5 * p, 2 * p]), label="limit")
    post = simulate(generate("zb-auto", p, m, costs=costs, memory_limit=limit, post_validation=True), costs)
    sync = simulate(generate("zb-auto", p, m, costs=costs, memory_limit=limit), costs)
    assert max(post.span) <= max(sync.span) + EPS and sync.makespan <= post.makespan + EPS
    assert post.max_peak_memory <= limit + EPS
    for name in ("zb-h1", "zb-h2"):
        fixed = simulate(generate(name, p, m, costs=costs), costs)
        if fixed.max_peak_memory <= limit + EPS:
            assert max(post.span) <= max(fixed.span) + EPS, name
