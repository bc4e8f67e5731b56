"""A backward run as one op (BW: 1f1b's, megatron's) costs less than its B and W run apart
(one autograd pass over the saved activations, no deferred closure; the runtime section (b2) of
docs/benchmarks/runtime-cpu.md measures the difference). The cost model carries it as `bw`: the profiler
measures it, the simulator times BW ops on it, and `auto` weighs 1f1b on it."""
from __future__ import annotations

import json

import pytest

from primus_megatron import schedules as S
from primus_megatron.schedules import balance as B
from primus_megatron.schedules.layer_split import LayerSplit

PP, M = 4, 8


def _has(sched: S.Schedule, kind: str) -> bool:
    return any(op.kind == kind for ops in sched.ranks for op in ops)


def _schedules() -> list[str]:
    return [n for n in S.names() if S.info(n).needs_extra is None and n != "auto"]


@pytest.mark.parametrize("name", _schedules())
def test_bw_times_the_unsplit_backward_and_nothing_else(name):
    base = S.Costs(f=1.0, b=[1.0, 1.2, 1.0, 0.9], w=[0.8, 0.9, 0.8, 0.7], comm=0.05)
    bw = [1.5, 1.7, 1.6, 1.2]  # less than b + w on every rank
    sched = S.generate(name, PP, M)
    with_bw = S.simulate(sched, S.Costs(**{**base.__dict__, "bw": bw}))
    if _has(sched, S.BW) and _has(sched, S.B):  # dualpipev mixes them: the BW ops alone take the BW time
        sc = S.Costs(**{**base.__dict__, "bw": bw}).resolve(PP, sched.chunks_per_rank, sched.placement)
        for r, spans in enumerate(with_bw.timeline):
            for i, span in enumerate(spans):
                paired = i in sched.paired(r) or i - 1 in sched.paired(r)
                if not paired:
                    assert span.end - span.start == pytest.approx(sc.duration(span.op.kind, span.stage))
        assert with_bw.makespan < S.simulate(sched, base).makespan
    elif _has(sched, S.BW):
        # the same as B and W scaled so that they sum to the measured BW: only BW ops moved
        scaled = S.Costs(f=base.f, b=[x * t / (x + y) for x, y, t in zip(base.b, base.w, bw)],
                         w=[y * t / (x + y) for x, y, t in zip(base.b, base.w, bw)], comm=base.comm)
        assert with_bw.makespan == pytest.approx(S.simulate(sched, scaled).makespan)
        assert with_bw.makespan < S.simulate(sched, base).makespan
    else:
        assert with_bw.makespan == S.simulate(sched, base).makespan


def test_bw_equal_to_b_plus_w_changes_no_plan_and_a_negative_one_is_refused():
    for name in ("zbv", "v-half", "zb-h1", "1f1b"):
        assert S.generate(name, PP, M, costs=S.Costs(bw=2.0)).ranks == S.generate(name, PP, M).ranks
    with pytest.raises(S.ScheduleError, match="cost-bw must be >= 0"):
        S.Costs(bw=-1.0)


def test_auto_weighs_1f1b_on_its_measured_unsplit_backward():
    """pp=2, m=16: the zero-bubble schedules gain a few percent; a backward 15% cheaper as
    one op turns the choice to a schedule that runs BW ops, and the table times it so."""
    split, pp, m = LayerSplit(8), 2, 16
    model = B.ModelCosts(layer=B.Part(1.0, 1.0, 0.6), head=B.Part(0.5, 0.5, 0.3), comm=0.02)
    fused = B.ModelCosts(**{**model.__dict__, "fused": 0.85})

    def costs(m_):
        return lambda name: B.stage_costs(m_, split, pp, S.info(name).chunks)

    apart, _ = S.auto.choose(pp, m, costs(model))
    assert not _has(S.generate(apart, pp, m), S.BW)
    best, rows = S.auto.choose(pp, m, costs(fused))
    assert _has(S.generate(best, pp, m), S.BW), (best, rows)
    row = next(r for r in rows if r.name == "1f1b")
    own = B.stage_costs(fused, split, pp, 1)
    assert own.bw == pytest.approx([(b + w) * 0.85 for b, w in zip(own.b, own.w)])
    assert row.iteration == pytest.approx(S.simulate(S.generate("1f1b", pp, m), own).makespan)


def test_fused_ratio_and_the_profile_file_keep_it(tmp_path):
    split = S.Costs(f=[1.0, 1.0], b=[1.0, 1.2], w=[0.5, 0.5])
    assert B.fused_ratio(S.Costs(bw=[1.2, 1.4]), split) == pytest.approx(2.6 / 3.2)
    assert B.fused_ratio(S.Costs(), split) == 1.0  # nothing measured as one op
    # a profile of 1f1b alone: BW split evenly, so the fitted ratio is exactly 1
    one_f_one_b = S.Costs(f=[1.0, 1.2], b=[0.9, 1.1], w=[0.9, 1.1], bw=[1.8, 2.2])
    assert B.fit(one_f_one_b, LayerSplit(8), 2, 1).fused == 1.0
    model = B.ModelCosts(layer=B.Part(1.0, 1.0, 0.5), fused=0.9)
    path = str(tmp_path / "p.json")
    B.save_profile(path, model)
    assert B.load_profile(path) == model
    data = json.load(open(path))
    del data["costs"]["fused"]  # a file written before the field existed
    json.dump(data, open(path, "w"))
    assert B.load_profile(path).fused == 1.0
    data["costs"]["fused"] = 0.0
    json.dump(data, open(path, "w"))
    with pytest.raises(S.ScheduleError, match="non-positive fused-backward ratio"):
        B.load_profile(path)


def test_the_profiler_reports_a_bw_op_as_bw_and_splits_it_only_where_nothing_ran_apart():
    pytest.importorskip("torch")
    from primus_megatron.runtime.profiler import combined_costs

    sched = S.generate("1f1b", 2, 4)

    def summary(durations):
        return {"durations": durations, "memory": {(S.F, s): 1.0 for s in (0, 1)}, "comm": 0.001, "steps": 1}

    costs, _ = combined_costs([summary({(S.F, 0): 1.0, (S.BW, 0): 1.6}),
                               summary({(S.F, 1): 1.1, (S.BW, 1): 1.8})], sched)
    assert costs.bw == (1.6, 1.8) and costs.b == costs.w == (0.8, 0.9)
    # B and W measured apart on stage 0 keep their values; stage 1 ran none apart
    costs, _ = combined_costs([summary({(S.F, 0): 1.0, (S.B, 0): 1.0, (S.W, 0): 0.5, (S.BW, 0): 1.4}),
                               summary({(S.F, 1): 1.1, (S.BW, 1): 1.8})], sched)
    assert (costs.b, costs.w, costs.bw) == ((1.0, 0.9), (0.5, 0.9), (1.4, 1.8))
    # a schedule that ran no BW op: the model keeps B + W
    costs, _ = combined_costs([summary({(S.F, 0): 1.0, (S.B, 0): 1.0, (S.W, 0): 0.5}),
                               summary({(S.F, 1): 1.0, (S.B, 1): 1.0, (S.W, 1): 0.5})], sched)
    assert costs.bw is None


def test_given_costs_take_a_bw_value_from_the_command_line(capsys):
    """`--pipeline-costs F,B,W,COMM,BW` (both entry points, and Megatron-LM's auto, which has no
    profile) and `primus-pipeline ... --cost-bw`."""
    from primus_megatron import cli
    from primus_megatron.options import parse_costs

    assert parse_costs("1,2,1,0.05,2.5") == S.Costs(f=1, b=2, w=1, comm=0.05, bw=2.5)
    assert parse_costs("1,2,1").bw is None
    with pytest.raises(ValueError, match=r"F,B,W\[,COMM\[,BW\]\] numbers"):
        parse_costs("1,2,1,0,2,3")
    for name in ("1f1b", "zb-h1"):
        assert cli.main(["simulate", "--schedule", name, "--pp", "4", "-m", "8", "--cost-bw", "1.5"]) == 0
        want = S.simulate(S.generate(name, 4, 8), S.Costs(bw=1.5)).makespan
        assert f"{want:g}" in capsys.readouterr().out
    assert S.simulate(S.generate("1f1b", 4, 8), S.Costs(bw=1.5)).makespan < S.simulate(S.generate("1f1b", 4, 8)).makespan


def test_the_ilp_distance_is_not_given_where_a_bw_cost_of_its_own_makes_it_meaningless(capsys):
    """The ILP has no fused kind (a backward is B then W): with --cost-bw, the schedules that run
    BW ops get a note, not a gap; the others still get theirs."""
    from primus_megatron import cli

    assert cli.main(["compare", "--pp", "2", "-m", "3", "--cost-bw", "1.5", "--time-limit", "0.5"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.split()}
    assert "the ILP times a backward as B + W" in lines["1f1b"]
    assert "the ILP times a backward as B + W" not in lines["zb-h1"] and "%" in lines["zb-h1"]


def test_bw_leaves_the_v_patterns_alone_and_profiles_must_have_the_same_stages():
    assert S.Costs(bw=1.5).resolve(PP, 2, "v").one_slot  # the paper's patterns stay the fast path
    for name in ("zbv", "v-half", "v-min"):  # they run no BW op: a BW cost cannot move them
        assert S.generate(name, PP, M, costs=S.Costs(bw=1.5)).ranks == S.generate(name, PP, M).ranks
    with pytest.raises(S.ScheduleError, match="measure both on the same stages"):
        B.fused_ratio(S.Costs(bw=[1.0, 1.0, 1.0, 1.0]), S.Costs(b=[1.0, 1.0], w=[1.0, 1.0]))
