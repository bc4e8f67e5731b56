"""Per-microbatch cost factors (`Costs.mb_scale`, issue 40 item 3) and the microbatch order
(`schedules.mb_order`): microbatches of packed variable-length data cost different amounts.

A factor multiplies the F, B, W, BW and all-to-all times of its microbatch, not the p2p latency
and not the memory. All factors 1.0 give today's numbers exactly; every consumer of op times
(simulator, rendezvous run, list scheduler, paper heuristic, W fill, ILP, offload plan, emulated
chunks) reads the factor of the op's own microbatch."""
from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primus_megatron import schedules as S
from primus_megatron.options import parse_costs
from primus_megatron.schedules import B, BW, F, W
from primus_megatron.schedules.auto_heuristic import KNOBS, paper_order
from primus_megatron.schedules.builtin.zb_auto import heuristic
from primus_megatron.schedules.ir import LOOP, V
from primus_megatron.schedules.listsched import list_schedule_scored
from primus_megatron.schedules.mb_order import choose_order, iteration_time, permuted, seed_orders
from primus_megatron.schedules.rendezvous import run_p2p
from primus_megatron.schedules.variants import score
from primus_megatron.schedules.w_fill import fill_w

SKEWED = (0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 3.0, 3.0)  # two heavy microbatches at the end of the step
NAMES = [n for n in S.names() if S.info(n).needs_extra != "ilp"]


# -- the cost model ------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [(), (1.0, 0.0), (1.0, -2.0), (1.0, float("inf")), 2.0, ("1",)])
def test_factors_must_be_positive_finite_numbers_one_per_microbatch(bad):
    with pytest.raises(S.ScheduleError, match=r"^cost-mb-scale must be a non-empty list of positive finite "
                                              r"factors, one per microbatch, got [^\n]*$"):
        S.Costs(mb_scale=bad)


def test_a_list_of_another_length_than_the_step_is_refused_in_one_sentence():
    costs = S.Costs(mb_scale=(1.0, 2.0, 3.0))
    sentence = r"^cost-mb-scale gives 3 factors, but the step has 4 microbatches \(one factor per microbatch\)$"
    with pytest.raises(S.ScheduleError, match=sentence):
        costs.resolve(2, 1, LOOP, 4)
    with pytest.raises(S.ScheduleError, match=sentence):
        S.generate("zb-h1", 2, 4, costs=costs)
    with pytest.raises(S.ScheduleError, match=sentence):
        S.simulate(S.generate("zb-h1", 2, 4), costs)
    assert costs.resolve(2, 1, LOOP).mb_scale == (1.0, 2.0, 3.0)  # no step given: nothing to check


def test_a_factor_scales_op_times_and_the_all_to_all_not_latency_or_memory():
    sc = S.Costs(f=1.0, b=2.0, w=0.5, bw=2.2, comm=0.3, a2a=0.4, mem_b=-0.5, mem_w=-0.5,
                 mb_scale=(1.0, 3.0)).resolve(2, 1, LOOP, 2)
    assert [sc.duration(k, 1) for k in (F, B, W, BW)] == [1.0, 2.0, 0.5, 2.2]  # no microbatch: the stage's own
    assert [sc.duration(k, 1, 1) for k in (F, B, W, BW)] == [3.0, 6.0, 1.5, pytest.approx(6.6)]
    assert [sc.duration(k, 1, 0) for k in (F, B, W, BW)] == [1.0, 2.0, 0.5, 2.2]
    assert sc.comm == (0.3, 0.3) and sc.memory(F, 0) == 1.0 and sc.memory(B, 0) == -0.5
    # a pair: F of microbatch 0 (1.0, a2a 0.4) with B of microbatch 1 (6.0, a2a 1.2): the F's
    # all-to-all hides under B's compute; B's 1.2 is 0.6 more than F's compute 0.6 covers
    assert sc.pair_duration(0, B, 1, 0, 1) == pytest.approx(0.6 + 4.8 + 0.6)
    assert sc.pair_duration(0, B, 1) == sc.pair_duration(0, B, 1, 0, 0)
    assert not sc.one_slot and S.Costs(mb_scale=(2.0, 2.0)).resolve(2, 1, LOOP).one_slot


# -- all factors 1.0: today's results, exactly ---------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_factors_of_one_change_nothing(name):
    pp, m = 4, 8
    base = S.Costs(f=[1.0, 1.3, 0.8, 1.1], b=[1.2, 1.0, 1.4, 0.9], w=[0.6, 0.5, 0.7, 0.4], comm=0.1,
                   mem_b=-0.3, mem_w=-0.7)
    ones = S.Costs(**{**base.__dict__, "mb_scale": (1.0,) * m})
    plain, scaled = S.generate(name, pp, m, costs=base), S.generate(name, pp, m, costs=ones)
    assert plain.ranks == scaled.ranks and plain.pairs == scaled.pairs
    assert S.simulate(plain, base).stats() == S.simulate(scaled, ones).stats()
    assert S.simulate(plain, base).timeline == S.simulate(scaled, ones).timeline


# -- the simulator and the rendezvous run ----------------------------------------------------------------

def test_one_heavy_microbatch_by_hand():
    """1F1B, pp=2, m=2, F = B = W = 1 (BW = 2), microbatch 1 twice as heavy: rank 0 runs F0 [0,1],
    F1 [1,3]; rank 1 F0 [1,2], BW0 [2,4]; rank 0 BW0 [4,6]; rank 1 F1 [4,6] (free at 4), BW1 [6,10];
    rank 0 BW1 [10,14]."""
    costs = S.Costs(mb_scale=(1.0, 2.0))
    sched = S.generate("1f1b", 2, 2, costs=costs)
    res = S.simulate(sched, costs)
    assert [[(str(s.op), s.start, s.end) for s in row] for row in res.timeline] == [
        [("F0", 0.0, 1.0), ("F1", 1.0, 3.0), ("BW0", 4.0, 6.0), ("BW1", 10.0, 14.0)],
        [("F0", 1.0, 2.0), ("BW0", 2.0, 4.0), ("F1", 4.0, 6.0), ("BW1", 6.0, 10.0)]]
    assert res.makespan == 14.0 and res.busy == [9.0, 9.0]
    sc = costs.resolve(2, 1, LOOP, 2)
    assert run_p2p(S.validate(sched, costs=costs), sc).makespan == 14.0


@pytest.mark.parametrize("name", ["1f1b", "zb-h1", "zbv", "zb-auto", "interleaved-1f1b"])
def test_the_rendezvous_run_times_ops_with_their_microbatchs_factor(name):
    """Without latency a lowered schedule's queue run times every op as the simulator does; with
    latency it is never faster (communication only adds waits)."""
    pp, m = 4, 8
    for comm in (0.0, 0.2):
        costs = S.Costs(f=1.0, b=1.2, w=0.7, comm=comm, mb_scale=SKEWED)
        sched = S.generate(name, pp, m, costs=costs)
        sc = costs.resolve(pp, sched.chunks_per_rank, sched.placement, m)
        run = run_p2p(S.validate(sched, costs=costs), sc)
        sim = S.simulate(sched, costs)
        if comm == 0.0:
            assert [[(op, start, end) for op, start, end in row] for row in run.spans] == \
                [[(s.op, s.start, s.end) for s in row] for row in sim.timeline]
        assert run.makespan >= sim.makespan - 1e-9


# -- planners: their own scores are the simulator's, and knowing the factors pays ------------------------

@settings(max_examples=30, deadline=None)
@given(st.data())
def test_planners_scores_are_the_simulators_with_factors(data):
    """best_of trusts a planner's own score: with factors it must still be exactly what the
    simulator computes from the order alone (list scheduler, paper heuristic, W fill)."""
    pp = data.draw(st.integers(2, 5), label="pp")
    m = data.draw(st.integers(1, 9), label="m")
    factors = data.draw(st.lists(st.floats(0.2, 4.0), min_size=m, max_size=m), label="factors")
    costs = S.Costs(f=1.0, b=1.3, w=0.6, comm=data.draw(st.sampled_from([0.0, 0.25])), mb_scale=factors)
    sc = costs.resolve(pp, 1, LOOP, m)
    warm = data.draw(st.lists(st.integers(1, 2 * pp), min_size=pp, max_size=pp), label="warm-up")
    for made in (list_schedule_scored(pp, m, 1, LOOP, sc, None, heuristic(warm)),
                 paper_order(pp, m, sc, float(pp), data.draw(st.sampled_from(KNOBS))),
                 fill_w(pp, m, 1, LOOP, sc, S.generate("zb-h1", pp, m).ranks, float(pp))):
        assert repr(made.score) == repr(score(pp, m, 1, LOOP, sc, made.ranks))
    scv = costs.resolve(pp, 2, V, m)
    made = fill_w(pp, m, 2, V, scv, [list(r) for r in S.generate("zbv", pp, m).ranks], 2.0 * pp)
    assert repr(made.score) == repr(score(pp, m, 2, V, scv, made.ranks))


@pytest.mark.parametrize("name", ["zb-auto", "zbv", "v-min"])
def test_a_plan_that_knows_the_factors_beats_the_factor_blind_one(name):
    """Two heavy microbatches at the end of the step: planned with the factors, the cost-driven
    schedules end strictly sooner than their factor-blind plan run on the same data, at no more memory."""
    aware = S.Costs(mb_scale=SKEWED)
    blind_sim = S.simulate(S.generate(name, 4, 8), aware)
    aware_sim = S.simulate(S.generate(name, 4, 8, costs=aware), aware)
    assert aware_sim.makespan < blind_sim.makespan - 0.1
    assert aware_sim.max_peak_memory <= blind_sim.max_peak_memory + 1e-9


def test_auto_with_the_factors_chooses_a_faster_plan_than_without():
    aware = S.Costs(mb_scale=SKEWED)
    blind_name, _ = S.auto.choose(4, 8, S.Costs())
    name, rows = S.auto.choose(4, 8, aware)
    chosen = next(c for c in rows if c.name == name)
    assert chosen.iteration == S.simulate(S.generate(name, 4, 8, costs=aware), aware).makespan
    assert chosen.iteration < S.simulate(S.generate(blind_name, 4, 8), aware).makespan - 0.1


def test_the_ilp_times_each_microbatch_with_its_factor():
    """zb-optimal's program weighs each op with its microbatch's factor: its order is no slower than
    zb-auto's under the factors, and strictly faster than the optimum planned without them."""
    pytest.importorskip("highspy")
    base = dict(f=1.0, b=1.0, w=0.5, comm=0.2)
    costs = S.Costs(**base, mb_scale=(2.0, 2.0, 1.0, 1.0))
    opt = S.simulate(S.generate("zb-optimal", 2, 4, costs=costs, memory_limit=2.0, time_limit=20), costs).makespan
    assert opt <= S.simulate(S.generate("zb-auto", 2, 4, costs=costs, memory_limit=2.0), costs).makespan + 1e-9
    blind = S.generate("zb-optimal", 2, 4, costs=S.Costs(**base), memory_limit=2.0, time_limit=20)
    assert opt < S.simulate(blind, costs).makespan - 0.5


def test_the_offload_plan_walks_back_over_the_ops_own_times():
    """A reload is issued by the latest op that leaves enough compute before the consumer: rank 0 of
    1F1B at pp=4 runs F1 F2 F3 between F0 and BW0, and a copy of 2.5 time units needs all three,
    or F3 alone where microbatch 3 is three times as heavy."""
    from primus_megatron.schedules import offload

    sched = S.generate("1f1b", 4, 8)
    key = (0, 0, 0)  # rank 0's activations of microbatch 0, read back by its BW0
    plain = offload.make_plan(sched, [key], 0.4, S.Costs())
    heavy = offload.make_plan(sched, [key], 0.4, S.Costs(mb_scale=(1.0, 1.0, 1.0, 3.0, 1.0, 1.0, 1.0, 1.0)))
    assert (plain.reload_at[0][(0, 0)], heavy.reload_at[0][(0, 0)]) == (S.Op(F, 1), S.Op(F, 3))


# -- the microbatch order ----------------------------------------------------------------------------------

def test_the_fixed_orders():
    f = (2.0, 0.5, 3.0, 1.0, 0.7)
    orders = dict(seed_orders(f))
    assert orders["identity"] == (0, 1, 2, 3, 4)
    assert orders["heaviest first"] == (2, 0, 3, 4, 1) and orders["lightest first"] == (1, 4, 3, 0, 2)
    assert [f[i] for i in orders["mountain"]] == [0.5, 1.0, 3.0, 2.0, 0.7]
    assert permuted(S.Costs(mb_scale=f), (4, 3, 2, 1, 0)).mb_scale == f[::-1]
    with pytest.raises(S.ScheduleError, match="a microbatch order must be a permutation of 0..4"):
        permuted(S.Costs(mb_scale=f), (0, 0, 1, 2, 3))


@settings(max_examples=12, deadline=None)
@given(name=st.sampled_from(["1f1b", "zb-h1", "zbv", "zb-auto"]), pp=st.integers(2, 4),
       factors=st.lists(st.floats(0.25, 4.0), min_size=2, max_size=8))
def test_the_chosen_order_is_never_slower_than_the_datas_own(name, pp, factors):
    costs = S.Costs(mb_scale=factors)
    order, tried = choose_order(name, pp, costs, budget=6)
    assert sorted(order) == list(range(len(factors))) and tried[0].label == "identity"
    chosen = iteration_time(name, pp, costs, order)
    assert chosen <= tried[0].iteration and chosen == min(c.iteration for c in tried)


def test_a_long_tail_step_runs_faster_in_the_chosen_order():
    """One heavy microbatch first in the data (the worst place for 1F1B: its F crosses every stage
    while the pipeline fills): moved inside, the step is shorter by more than its extra F time."""
    costs = S.Costs(mb_scale=(4.0, 1.0, 1.0, 1.0, 1.0, 1.0))
    order, tried = choose_order("1f1b", 4, costs)
    assert order[0] != 0 and order[-1] != 0
    assert iteration_time("1f1b", 4, costs, order) < tried[0].iteration - 3.0


# -- options -------------------------------------------------------------------------------------------------

def test_the_command_line_and_pipeline_costs_carry_the_factors(capsys):
    from primus_megatron import cli

    assert parse_costs("1,2,1,mb-scale=1:2.5:0.5").mb_scale == (1.0, 2.5, 0.5)
    with pytest.raises(ValueError, match="--pipeline-costs"):
        parse_costs("1,2,1,mb-scale=1:x")
    with pytest.raises(ValueError, match="^--pipeline-costs: cost-mb-scale must be"):
        parse_costs("1,2,1,mb-scale=1:0")
    assert cli.main(["simulate", "--schedule", "1f1b", "--pp", "2", "-m", "2", "--cost-mb-scale", "1,2"]) == 0
    assert " 14 " in capsys.readouterr().out
    assert cli.main(["simulate", "--schedule", "1f1b", "--pp", "2", "-m", "3", "--cost-mb-scale", "1,2"]) == 2
    assert "cost-mb-scale gives 2 factors, but the step has 3 microbatches" in capsys.readouterr().err
    assert cli.main(["simulate", "--schedule", "1f1b", "--pp", "2", "-m", "2", "--cost-mb-scale", "1,-2"]) == 2
    assert "--cost-mb-scale: must be a comma-separated list of positive numbers" in capsys.readouterr().err
    argv = ["simulate", "--schedule", "1f1b", "--pp", "4", "-m", "6", "--cost-mb-scale", "4,1,1,1,1,1"]
    assert cli.main([*argv, "--mb-order", "best", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    order = data["mb_order"]
    costs = S.Costs(mb_scale=(4.0, 1.0, 1.0, 1.0, 1.0, 1.0))
    assert data["stats"]["makespan"] == iteration_time("1f1b", 4, costs, order) < iteration_time("1f1b", 4, costs, range(6))
    assert cli.main([*argv, "--mb-order", "best"]) == 0
    assert f"microbatch order (data microbatch run as schedule microbatch 0, 1, ...): {','.join(map(str, order))}" \
        in capsys.readouterr().out
    assert cli.main(["simulate", "--schedule", "1f1b", "--pp", "2", "-m", "2", "--mb-order", "best"]) == 2
    assert "--mb-order best needs --cost-mb-scale" in capsys.readouterr().err


# -- emulated chunks -----------------------------------------------------------------------------------------

def test_emulated_chunks_wait_their_microbatchs_times():
    """megatron's forward_step tells a chunk its microbatch (`set_current_microbatch`); its F, and
    the B, W or BW of the same microbatch, then wait the stage's time x that microbatch's factor
    (the waits requested, not timed)."""
    pytest.importorskip("megatron.core")
    import torch
    from megatron.core.pipeline_parallel.schedules import set_current_microbatch

    from primus_megatron.emulation import chunks as C
    from primus_megatron.runtime.wgrad_store import get_store

    times = C.stage_times(S.Costs(f=1.0, b=2.0, w=0.5, mb_scale=(1.0, 3.0)), 2, 1, LOOP, scale=1e-4,
                          microbatches=2)
    assert times[1].mb_scale == (1.0, 3.0) and times[1].of("b", 1) == pytest.approx(6e-4)
    assert C.StageTimes(f=1.0, b=1.0, w=1.0, bw=2.0).of("bw", None) == 2.0
    waits = []
    chunk = C.EmulatedChunk(C.emulated_config(pp=2, chunks=1, elements=16), 1, 2, times[1], epoch=time.monotonic())
    chunk._work = lambda seconds, kind: waits.append((kind, seconds))
    with torch.no_grad():  # the forward alone (the small linear's backward wants a tensor-parallel group)
        chunk.set_input_tensor(torch.zeros(1, 1, 16))
        with pytest.raises(RuntimeError, match="need to know their microbatch"):
            chunk.forward((1, 1, 16))
        for mb in (1, 0):
            set_current_microbatch(chunk, mb)
            chunk.forward((1, 1, 16))
    assert waits == [("F", pytest.approx(3e-4)), ("F", 1e-4)]

    class Stub:  # what `_Work` reads of a chunk: a post-process stage (no gradient latency)
        post_process, clock, log = True, C._Clock(time.monotonic()), C.OpLog()

        def __init__(self, stage_times):
            self.times = stage_times

        def _work(self, seconds, kind):
            waits.append((kind, seconds))

        def fault_point(self, kind, mb):  # no fault injected (`emulate --fault`)
            pass

    waits.clear()
    stub = Stub(times[1])
    C._Work.apply(torch.zeros(1, 1, 16, requires_grad=True), stub, 1).sum().backward()  # not split: a BW
    store = get_store()
    with store.step(splitting=True):
        out = C._Work.apply(torch.zeros(1, 1, 16, requires_grad=True), stub, 1)
        with store.capture((1, 0)):
            out.sum().backward()
        store.run((1, 0))
    assert waits == [("F", pytest.approx(3e-4)), ("BW", pytest.approx(7.5e-4)), ("F", pytest.approx(3e-4)),
                     ("B", pytest.approx(6e-4)), ("W", pytest.approx(1.5e-4))]
