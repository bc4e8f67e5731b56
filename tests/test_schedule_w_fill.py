"""Cost-aware V schedules: W re-placed from the costs (`w_fill`), the steady-state
window of block compaction, the deepest-first greedy, and what they promise:
never slower and never more memory than the fixed patterns they start from."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primus_megatron.schedules import Costs, Schedule, generate, simulate, validate
from primus_megatron.schedules.blocks import compact, repeat, slot_order, steady_window, v_half_block, v_min_block
from primus_megatron.schedules.builtin.one_f_one_b import one_f_one_b
from primus_megatron.schedules.builtin.zb_h1 import zb_h1
from primus_megatron.schedules.builtin.zbv import zbv_pattern
from primus_megatron.schedules.ir import LOOP, V, W
from primus_megatron.schedules.simulation import rank_spans, peak_memory, score_of
from primus_megatron.schedules.w_fill import fill_w
from test_schedule_properties import SCALE, cost_models

# Costs the paper's patterns were not built for: B twice F, a p2p latency.
UNEQUAL = Costs(f=2.0, b=4.0, w=2.0, comm=0.05)


def _schedule(pp, m, chunks, placement, ranks):
    return Schedule("t", pp, m, chunks, placement, tuple(map(tuple, ranks)))


def _bases(pp, m, v_costs, loop_costs):
    """(costs, chunks, placement, order) fill_w starts from: the fixed V patterns and two loop-placement ones."""
    sc_v = v_costs.resolve(pp, 2, V)
    yield v_costs, 2, V, zbv_pattern(pp, m)
    yield v_costs, 2, V, slot_order(pp, repeat(pp, m, v_half_block(pp)))
    yield v_costs, 2, V, slot_order(pp, compact(pp, repeat(pp, m, v_min_block(pp)), sc_v))
    yield loop_costs, 1, LOOP, zb_h1(pp, m)
    yield loop_costs, 1, LOOP, one_f_one_b(pp, m)


@st.composite
def cases(draw):
    pp = draw(st.integers(2, 5))
    m = draw(st.integers(1, 3 * pp))
    return pp, m, draw(cost_models(pp, 2)), draw(cost_models(pp, 1))


@settings(max_examples=int(40 * SCALE), deadline=None)
@given(cases())
def test_fill_w_keeps_f_b_order_stays_within_memory_and_scores_like_the_simulator(case):
    pp, m, v_costs, loop_costs = case
    for costs, chunks, placement, ranks in _bases(pp, m, v_costs, loop_costs):
        sc = costs.resolve(pp, chunks, placement)
        base = _schedule(pp, m, chunks, placement, ranks)
        limit = max(peak_memory(base, sc))
        filled, score = fill_w(pp, m, chunks, placement, sc, ranks, limit)
        out = _schedule(pp, m, chunks, placement, filled)
        validate(out, costs=costs, memory_limit=limit)  # complete, in dependency order, hang-free
        for before, after in zip(ranks, filled):  # only W moved
            assert [op for op in after if op.kind != W] == [op for op in before if op.kind != W]
            assert sorted(after) == sorted(before)
        assert score == score_of(rank_spans(out, sc), peak_memory(out, sc))
        assert score[2] <= limit + 1e-9


@settings(max_examples=int(25 * SCALE), deadline=None)
@given(cases())
def test_cost_aware_v_schedules_are_never_slower_nor_bigger_than_their_fixed_patterns(case):
    pp, m, costs, _ = case
    fixed = {
        "zbv": zbv_pattern(pp, m),
        "v-half": slot_order(pp, repeat(pp, m, v_half_block(pp))),
        "v-min": slot_order(pp, repeat(pp, m, v_min_block(pp))),
    }
    for name, ranks in fixed.items():
        pattern = simulate(_schedule(pp, m, 2, V, ranks), costs)
        ours = simulate(generate(name, pp, m, costs=costs), costs)
        assert ours.makespan <= pattern.makespan + 1e-9, name
        assert ours.max_peak_memory <= pattern.max_peak_memory + 1e-9, name


@pytest.mark.parametrize("pp, m", [(4, 8), (4, 16), (8, 24)])
def test_zbv_under_unequal_costs_beats_its_fixed_pattern(pp, m):
    # The fixed pattern leaves gaps when B takes twice F and messages take time;
    # its W re-placed into them shortens the step at the same peak memory.
    pattern = simulate(_schedule(pp, m, 2, V, zbv_pattern(pp, m)), UNEQUAL)
    ours = simulate(generate("zbv", pp, m, costs=UNEQUAL), UNEQUAL)
    assert ours.makespan < pattern.makespan - 1e-6
    assert ours.max_peak_memory <= pattern.max_peak_memory + 1e-9


@pytest.mark.parametrize("name, block", [("v-half", v_half_block), ("v-min", v_min_block)])
def test_v_half_and_v_min_under_unequal_costs_beat_every_block_order(name, block):
    pp, m = 4, 8
    sc = UNEQUAL.resolve(pp, 2, V)
    slots = repeat(pp, m, block(pp))
    orders = [slot_order(pp, slots), slot_order(pp, compact(pp, slots, sc))]
    best_block = min(simulate(_schedule(pp, m, 2, V, o), UNEQUAL).makespan for o in orders)
    ours = simulate(generate(name, pp, m, costs=UNEQUAL), UNEQUAL)
    assert ours.makespan < best_block - 1e-6
    assert ours.max_peak_memory <= max(peak_memory(_schedule(pp, m, 2, V, orders[0]), sc)) + 1e-9


def test_one_slot_costs_leave_the_fixed_patterns_alone():
    assert Costs().resolve(4, 2, V).one_slot and Costs(f=3, b=3, w=3).resolve(4, 2, V).one_slot
    assert not Costs(comm=0.1).resolve(4, 2, V).one_slot
    assert not Costs(b=2.0).resolve(4, 2, V).one_slot
    assert not Costs(f=[1, 1, 1, 2]).resolve(4, 2, V).one_slot
    assert [list(r) for r in generate("zbv", 4, 8).ranks] == zbv_pattern(4, 8)


@pytest.mark.parametrize("pp, m", [(4, 8), (6, 12), (8, 24)])
def test_compact_keeps_the_steady_window_in_place_and_only_moves_ops_earlier(pp, m):
    sc = Costs().resolve(pp, 2, V)
    slots = repeat(pp, m, v_half_block(pp))
    lo, hi = steady_window(slots, m)
    assert 0 < lo < hi
    ends = compact(pp, slots, sc, keep=(lo, hi))
    everything = compact(pp, slots, sc)
    assert all(ends[key] == t for key, t in slots.items() if lo <= t <= hi)
    assert all(ends[key] <= t for key, t in slots.items())
    # Warm-up ops do move, and compacting everything moves some steady-state op too.
    assert any(ends[key] < t for key, t in slots.items() if t < lo)
    assert any(everything[key] < t for key, t in slots.items() if lo <= t <= hi)


@settings(max_examples=int(25 * SCALE), deadline=None)
@given(pp=st.integers(2, 5), extra=st.integers(0, 8), a2a=st.sampled_from([0.2, 0.5, 0.9]),
       w=st.sampled_from([0.5, 1.0, 2.0]))
def test_fill_w_places_w_around_overlapped_pairs_and_scores_like_the_simulator(pp, extra, a2a, w):
    """DualPipeV's phases with every pair's backward split (F&B pairs, each W after its pair): fill_w moves
    only W, keeps every pair a pair with its halves, and its replay times pairs as the simulator does."""
    from primus_megatron.schedules.builtin.dualpipev import _rank
    from primus_megatron.schedules.ir import Pair, flatten_pairs

    m = 2 * pp + extra
    costs = Costs(f=1.0, b=1.0, w=w, a2a=a2a, comm=0.05)
    sc = costs.resolve(pp, 2, V, m)
    ranks = [_rank(pp, m, r, split_pairs=True) for r in range(pp)]

    def sched(items):
        flat = [flatten_pairs(row) for row in items]
        return Schedule("t", pp, m, 2, V, tuple(ops for ops, _ in flat), {}, tuple(p for _, p in flat))

    limit = max(peak_memory(sched(ranks), sc))
    filled, score = fill_w(pp, m, 2, V, sc, ranks, limit)
    out = sched(filled)
    validate(out, costs=costs, memory_limit=limit)
    for before, after in zip(ranks, filled):
        assert [i for i in after if type(i) is Pair or i.kind != W] == [i for i in before if type(i) is Pair or i.kind != W]
        assert sorted(map(str, after)) == sorted(map(str, before))
    assert score == pytest.approx(score_of(rank_spans(out, sc), peak_memory(out, sc)))
    assert score[0] == pytest.approx(simulate(out, costs).makespan)
