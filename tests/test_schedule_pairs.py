"""Overlapped F&B pairs in the schedule IR (issue 39 item 1) and DeepSeek's DualPipeV built from them.

A pair is an F of one (microbatch, chunk) and a B or BW of another run as one op: it starts when both
inputs are there, both halves end together, nothing is posted between them, and it costs both
computations plus what of each half's all-to-all the other's compute cannot hide. Each half keeps its
own inputs and outputs: the dependency rule, completeness, the W order and the hang check are the
ones every schedule goes through."""
from __future__ import annotations

import math
import os
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primus_megatron import schedules as S
from primus_megatron.options import parse_costs
from primus_megatron.schedules import B, BW, F, W, Op, Pair
from primus_megatron.schedules.export import from_dict, to_dict
from primus_megatron.schedules.ir import flatten_pairs
from primus_megatron.schedules.lowering import Batch, Recv, Send

A2A = S.Costs(f=1.0, b=1.0, w=1.0, a2a=0.5)


@pytest.mark.parametrize("f, b, a, expected", [
    (1.0, 1.0, 0.0, 2.0),    # no all-to-all: the two ops' time
    (1.0, 1.0, 0.5, 1.0),    # each half's a2a (0.5) exactly under the other's compute (0.5)
    (1.0, 1.0, 0.8, 1.6),    # compute 0.2 each: 0.6 of each a2a stays exposed (0.4 + 2 x 0.6)
    (1.0, 2.0, 0.5, 2.0),    # F's a2a under B's compute; B's under F's
])
def test_a_pair_costs_both_computations_plus_what_neither_hides(f, b, a, expected):
    sc = S.Costs(f=f, b=b, w=1.0, a2a=a).resolve(2, 1, S.LOOP)
    assert sc.pair_duration(0, B, 1) == pytest.approx(expected)


def test_the_all_to_all_cannot_exceed_the_op_it_is_part_of():
    with pytest.raises(S.ScheduleError, match="cost-a2a is the all-to-all part of an F and of a B"):
        S.Costs(f=1.0, b=0.4, a2a=0.5).resolve(2, 1, S.LOOP)
    assert parse_costs("1,2,1,a2a=0.5").a2a == 0.5


def _two_rank_pair() -> S.Schedule:
    """pp=2, 1F1B-like, rank 1's steady state F1 & BW0 as one pair."""
    ranks = [[Op(F, 0), Op(F, 1), Op(BW, 0), Op(BW, 1)],
             [Op(F, 0), Pair(Op(F, 1), Op(BW, 0)), Op(BW, 1)]]
    flat = [flatten_pairs(r) for r in ranks]
    return S.Schedule("pair", 2, 2, 1, S.LOOP, tuple(o for o, _ in flat), {}, tuple(p for _, p in flat))


def test_a_pair_starts_with_both_inputs_and_both_halves_end_together():
    sched = _two_rank_pair()
    S.validate(sched)
    res = S.simulate(sched, S.Costs(f=1.0, b=1.0, w=1.0, a2a=0.5))
    f1, bw0 = res.timeline[1][1], res.timeline[1][2]
    # rank 1: F0 [1, 2] (after rank 0's F0); F1's input comes from rank 0's F1, which ends at 2; BW0
    # needs only rank 1's own F0: the pair starts at 2 and takes pair_duration
    assert (f1.start, f1.end) == (bw0.start, bw0.end) and f1.start == pytest.approx(2.0)
    sc = S.Costs(f=1.0, b=1.0, w=1.0, a2a=0.5).resolve(2, 1, S.LOOP)
    assert f1.end - f1.start == pytest.approx(sc.pair_duration(1, BW, 1))
    assert res.busy[1] == pytest.approx(1.0 + sc.pair_duration(1, BW, 1) + 2.0)  # the pair counted once


@pytest.mark.parametrize("pp, m", [(2, 4), (3, 7), (4, 10)])
def test_nothing_is_posted_between_a_pairs_halves(pp, m):
    """DualPipeV's pairs on every rank: F of one chunk (its activation sent on) and BW of the other (its
    gradient received, another sent): the halves stay adjacent in the lowered list, the B half's gradient
    is received before the F half, and the F half's activation goes out after the B half."""
    sched = S.generate("dualpipev", pp, m)
    lowered = S.lower(sched)
    checked = 0
    for r in range(pp):
        items = list(lowered.ranks[r])
        flat = [(i, p) for i, item in enumerate(items) for p in (
            item.items if isinstance(item, Batch) else (item,) if isinstance(item, (Send, Recv)) else ())]
        for pair in (x for x in sched.items(r) if isinstance(x, Pair)):
            at = items.index(pair.f)
            assert items[at + 1] == pair.b, (r, pair)
            for i, post in flat:
                if post.msg.mb == pair.b.mb and post.msg.kind == B and isinstance(post, Recv) \
                        and sched.stage(r, pair.b) == post.msg.dst_stage:
                    assert i < at, (r, pair, post)
                    checked += 1
                if post.msg.mb == pair.f.mb and post.msg.kind == F and isinstance(post, Send) \
                        and sched.stage(r, pair.f) == post.msg.src_stage:
                    assert i > at + 1, (r, pair, post)
                    checked += 1
    assert checked > 0


@pytest.mark.parametrize("ranks, pairs, message", [
    ([[Op(F, 0), Op(BW, 0)], [Op(F, 0), Op(BW, 0)]], (frozenset({1}), frozenset()), "has no second op"),
    ([[Op(F, 0), Op(BW, 0)], [Op(F, 0), Op(BW, 0)]], (frozenset(), frozenset({1})), "has no second op"),
    ([[Op(F, 0), Op(F, 1), Op(BW, 0), Op(BW, 1)], [Op(F, 0), Op(BW, 0), Op(F, 1), Op(BW, 1)]],
     (frozenset(), frozenset({1})), "must be an F and then a B or BW, got BW0 and F1"),
    ([[Op(F, 0), Op(F, 1), Op(BW, 0), Op(BW, 1)], [Op(F, 0), Op(F, 1), Op(BW, 0), Op(BW, 1)]],
     (frozenset({1}), frozenset()), "must be an F and then a B or BW, got F1 and BW0"),
])
def test_malformed_pairs_are_refused(ranks, pairs, message):
    sched = S.Schedule("bad", 2, len(ranks[0]) // 2, 1, S.LOOP, tuple(map(tuple, ranks)), {}, pairs)
    if "got F1 and BW0" in message:  # rank 0's F1 & BW0 is a valid pair: what fails is its input
        with pytest.raises(S.ScheduleError, match="deadlocks"):
            S.validate(sched)
        return
    with pytest.raises(S.ScheduleError, match=message):
        S.validate(sched)


def test_a_pair_whose_b_needs_its_own_f_is_a_deadlock():
    """B of (mb 0, chunk 1) needs F of (mb 0, chunk 1), which needs F (mb 0, chunk 0): a pair of
    F0.0 and a backward downstream of it cannot start."""
    ranks = [[Op(F, 0), Pair(Op(F, 1), Op(BW, 0)), Op(BW, 1)], [Op(F, 0), Op(F, 1), Op(BW, 0), Op(BW, 1)]]
    flat = [flatten_pairs(r) for r in ranks]
    sched = S.Schedule("self", 2, 2, 1, S.LOOP, tuple(o for o, _ in flat), {}, tuple(p for _, p in flat))
    with pytest.raises(S.ScheduleError, match="deadlocks"):
        S.validate(sched)


def test_pairs_survive_the_json_form_and_the_fingerprint():
    from primus_megatron.runtime.planner import schedule_fingerprint

    sched = S.generate("dualpipev", 4, 10)
    back = from_dict(to_dict(sched))
    assert back.ranks == sched.ranks and back.pairs == sched.pairs
    assert schedule_fingerprint(sched.with_ranks(sched.ranks)) != schedule_fingerprint(sched)  # pairs dropped


# -- DualPipeV -------------------------------------------------------------------------------------

@given(pp=st.integers(2, 8), extra=st.integers(0, 12))
def test_dualpipev_is_complete_valid_and_pairs_its_steady_state(pp, extra):
    m = 2 * pp + extra
    sched = S.generate("dualpipev", pp, m)  # validated: complete, W order, dependencies, hang-free
    for r in range(pp):
        steady = m - 2 * pp + r + 1
        pairs = len(sched.paired(r))
        # step 4: two pairs a round (the last rank's first round one), step 5: one a round
        assert pairs == 2 * steady - (r == pp - 1) + (pp - r - 1)
        for item in sched.items(r):
            if isinstance(item, Pair):
                assert item.f.kind == F and item.b.kind == BW and item.f.chunk != item.b.chunk
        # each B's W is deferred (zero-bubble phases), every other backward whole
        ops = sched.ranks[r]
        assert sum(op.kind == B for op in ops) == sum(op.kind == W for op in ops) == 2 * (pp - r - 1) + r + 1


@pytest.mark.parametrize("m", [1, 3, 5])
def test_dualpipev_with_fewer_than_2p_microbatches_drops_the_extra_ones(m):
    sched = S.generate("dualpipev", 3, m)
    assert all(op.mb < m for ops in sched.ranks for op in ops)


def test_dualpipev_hides_the_all_to_all_best():
    """At pp=4, m=16, F=B=W=1 with half of each F and B all-to-all: DualPipeV's steady state (an F with a
    whole backward) hides more of it than zbv's pairs (an F with a B), and with no all-to-all to hide its
    whole-backward ops leave it behind zbv."""
    plain = S.Costs(f=1.0, b=1.0, w=1.0)
    dpv, zbv = (S.simulate(S.generate(n, 4, 16, costs=A2A), A2A).makespan for n in ("dualpipev", "zbv"))
    dpv_plain = S.simulate(S.generate("dualpipev", 4, 16, costs=plain), plain).makespan
    zbv_plain = S.simulate(S.generate("zbv", 4, 16, costs=plain), plain).makespan
    assert dpv < 0.9 * zbv < 0.9 * zbv_plain and dpv < dpv_plain
    assert dpv_plain > zbv_plain


@settings(max_examples=30, deadline=None)
@given(pp=st.integers(2, 6), extra=st.integers(0, 10), a2a=st.sampled_from([0.2, 0.5, 0.9]),
       w=st.sampled_from([0.5, 1.0, 2.0]), comm=st.sampled_from([0.0, 0.1]))
def test_dualpipev_planned_with_an_all_to_all_is_never_slower_nor_bigger_than_its_phases(pp, extra, a2a, w, comm):
    """With an all-to-all to hide, dualpipev also tries its phases with split pairs (F&B, W placed around
    them by w_fill); whichever it keeps is valid, no slower than the phases as DeepSeek writes them and
    within their peak memory (the default limit)."""
    from primus_megatron.schedules.builtin.dualpipev import _keep, _rank

    m = 2 * pp + extra
    costs = S.Costs(f=1.0, b=1.0, w=w, a2a=a2a, comm=comm)
    planned = S.simulate(S.generate("dualpipev", pp, m, costs=costs), costs)
    flat = [flatten_pairs(_keep(_rank(pp, m, r), m)) for r in range(pp)]
    phases = S.simulate(S.Schedule("phases", pp, m, 2, S.V, tuple(o for o, _ in flat), {},
                                   tuple(p for _, p in flat)), costs)
    assert planned.makespan <= phases.makespan + 1e-9
    assert planned.max_peak_memory <= phases.max_peak_memory + 1e-9


def _moe_costs(x: float) -> S.Costs:
    """benchmarks/moe_layers.py's Qwen3-30B-A3B-like layer (experts' weight gradients in W) with an
    all-to-all of x times F's compute added to each F and B, as benchmarks/pairs_simulated.py plans."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    import moe_layers
    import pairs_simulated

    return pairs_simulated.with_a2a(moe_layers.costs_for(moe_layers.LAYERS[0], experts_in_w=True), x)


@pytest.mark.parametrize("pp", [8, 16])
@pytest.mark.parametrize("x", [0.5, 1.0])
def test_dualpipev_beats_megatrons_combined_1f1b_at_no_more_memory(pp, x):
    """Simulated on an MoE layer's costs at m = 4p: dualpipev (split pairs, W placed around them) is faster
    than megatron's combined 1F1B at its own ~1F1B memory, and faster still given megatron's peak as limit."""
    from primus_megatron.schedules.builtin.interleaved import combined_1f1b

    costs, m = _moe_costs(x), 4 * pp
    megatron = S.simulate(combined_1f1b(pp, m), costs)
    own = S.simulate(S.generate("dualpipev", pp, m, costs=costs), costs)
    same_memory = S.simulate(S.generate("dualpipev", pp, m, costs=costs, memory_limit=megatron.max_peak_memory), costs)
    assert own.max_peak_memory < 0.75 * megatron.max_peak_memory and own.makespan < megatron.makespan
    assert same_memory.max_peak_memory <= megatron.max_peak_memory and same_memory.makespan < own.makespan


# -- pairing any order -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", [n for n in S.names() if n not in ("zb-optimal", "dualpipev")])
@given(pp=st.integers(2, 4), m=st.integers(1, 10), a2a=st.sampled_from([0.2, 0.5, 0.9]))
def test_pairing_any_registered_order_keeps_it_valid_and_no_slower(name, pp, m, a2a):
    """`pairing.with_pairs` merges every F-then-B neighbour, unmerges the pairs a run shows stuck (a pair
    waits for both inputs: e.g. a B downstream of its own F), and keeps pairs only where the order runs
    and is no slower: the result always validates."""
    from primus_megatron.schedules.ir import flatten_pairs
    from primus_megatron.schedules.pairing import with_pairs

    costs = S.Costs(f=1.0, b=1.0, w=1.0, a2a=a2a)
    plain = S.generate(name, pp, m)
    sc = costs.resolve(pp, plain.chunks_per_rank, plain.placement)
    items = with_pairs([list(ops) for ops in plain.ranks], plain, sc)
    flat = [flatten_pairs(r) for r in items]
    paired = plain.with_ranks([ops for ops, _ in flat], tuple(p for _, p in flat))
    assert paired.ranks == plain.ranks  # the same order, some neighbours merged
    S.validate(paired, costs=costs)
    assert S.simulate(paired, costs).makespan <= S.simulate(plain, costs).makespan * (1 + 1e-9)


def test_zbv_takes_pairs_where_there_is_an_all_to_all_to_hide():
    a2a = S.Costs(f=1.0, b=1.0, w=1.0, a2a=0.5)
    with_a2a, without = S.generate("zbv", 4, 16, costs=a2a), S.generate("zbv", 4, 16)
    assert with_a2a.has_pairs and not without.has_pairs
    assert S.simulate(with_a2a, a2a).makespan < 0.95 * S.simulate(without, a2a).makespan
    assert max(S.simulate(with_a2a, a2a).peak_memory) <= max(S.simulate(without, a2a).peak_memory)


@pytest.mark.parametrize("name, costs", [("dualpipev", S.Costs()), ("zbv", A2A), ("dualpipev", A2A)],
                         ids=["dualpipev", "zbv-a2a", "dualpipev-a2a"])
@pytest.mark.parametrize("bandwidth", [4.0, 1.0, 0.25])
def test_activation_offload_plans_pairs_as_one_op(name, costs, bandwidth):
    """Offload with overlapped pairs: a pair's halves start together, so a reload is issued as a pair
    starts (at its F half, never by the pair that made what it brings back), a B half's activations are
    back before its pair starts, and the F half's go out when the pair ends."""
    from primus_megatron.schedules import offload as O

    sched = S.generate(name, 4, 12, costs=costs)
    assert sched.has_pairs
    plain = O.choose(sched, "off", costs=costs)
    every = O.choose(sched, "all", bandwidth=bandwidth, costs=costs)  # check_offload runs inside
    assert every.plan.count == len(O.offloadable(sched)) + len(O.w_shares(sched, costs))
    O.check_given_plan(every.plan, sched)
    for r, row in enumerate(every.timeline):
        seconds = {p + 1 for p in sched.paired(r)}
        position = {op: i for i, op in enumerate(sched.ranks[r])}
        assert not any(position[op] in seconds for op in every.plan.reload_at[r].values())
        start = {span.op: span.start for span in row}
        end = {span.op: span.end for span in row}
        for c in every.copies[r]:
            mb, chunk = c.key[:2]
            made, used = ((Op(B, mb, chunk), Op(W, mb, chunk)) if len(c.key) == 3 else
                          (Op(F, mb, chunk), next(Op(k, mb, chunk) for k in (B, BW) if Op(k, mb, chunk) in start)))
            if c.direction == "D2H":
                assert c.start >= end[made] - 1e-9  # a pair's F half ends with its pair
            else:
                assert c.end <= start[used] + 1e-9  # before the pair holding the consumer starts
        for p in sched.paired(r):  # the halves still start and end together
            a, b = sched.ranks[r][p], sched.ranks[r][p + 1]
            assert (start[a], end[a]) == (start[b], end[b])
    # unlimited bandwidth costs no time; auto under a limit fits it and is never slower than all there
    assert O.choose(sched, "all", bandwidth=math.inf, costs=costs).makespan == pytest.approx(plain.makespan)
    limit = 0.6 * plain.max_peak_memory
    auto = O.choose(sched, "auto", bandwidth=bandwidth, costs=costs, memory_limit=limit)
    assert auto.max_peak_memory <= plain.max_peak_memory
    if every.max_peak_memory <= limit:  # copies fast enough for all to fit (not at 0.25)
        assert auto.max_peak_memory <= limit + 1e-9 and auto.makespan <= every.makespan + 1e-9
    else:
        assert bandwidth == 0.25


def test_a_given_offload_plan_may_not_reload_inside_the_pair_that_makes_it():
    from primus_megatron.schedules import offload as O

    sched = S.generate("dualpipev", 4, 12)
    r = 0
    p = min(q for q in sched.paired(r) if sched.ranks[r][q + 1].kind == BW)
    f_half, b_half = sched.ranks[r][p], sched.ranks[r][p + 1]
    consumer = next(op for op in sched.ranks[r][p + 2:] if (op.mb, op.chunk) == (f_half.mb, f_half.chunk))
    good = O.make_plan(sched, [(r, f_half.mb, f_half.chunk)], 1.0)
    assert good.reload_at[r][(f_half.mb, f_half.chunk)] not in (f_half, b_half)
    for at in (b_half, f_half):  # the pair's own halves start as the F half does: nothing is made yet
        bad = O.OffloadPlan("custom", 1.0, tuple({(f_half.mb, f_half.chunk): at} if q == r else {}
                                                   for q in range(sched.pp)))
        with pytest.raises(S.ScheduleError, match="not between its producer and its consumer"):
            O.check_given_plan(bad, sched)
    # the second half of the consumer's own pair names the pair's start: accepted
    q = sched.ranks[r].index(consumer)
    if q - 1 in sched.paired(r):
        second = O.OffloadPlan("custom", 1.0, tuple({(f_half.mb, f_half.chunk): consumer} if x == r else {}
                                                      for x in range(sched.pp)))
        assert O.check_given_plan(second, sched) is second


