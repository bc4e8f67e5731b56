"""Re-planning from measured costs: which schedules depend on costs, and what the runtime
does with a new plan (no process group: the runner's planning alone).

A schedule that declares `uses_costs` is profiled over the first steps and planned again
from the measurements; one that does not must give the same order under any costs (else
measuring would be owed). The V family re-plans but keeps its memory class: a new plan is
taken only if it simulates no slower at no more peak activation memory."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import megatron_reference as ref
from primus_megatron import schedules as S

UNEQUAL = S.Costs(f=1.0, b=2.0, w=1.0, comm=0.05)
costs_st = st.builds(S.Costs, f=st.floats(0.2, 3), b=st.floats(0.2, 3), w=st.floats(0.1, 3), comm=st.floats(0, 0.5))


def test_the_schedules_that_re_plan():
    assert {n for n in S.names() if S.info(n).uses_costs} == {"zb-auto", "zb-optimal", "zbv", "v-half", "v-min"}
    assert all(S.info(n).uses_costs for n in S.names() if S.info(n).cost_driven)


@pytest.mark.parametrize("name", [n for n in S.names() if not S.info(n).uses_costs])
@given(costs=costs_st)
def test_a_schedule_that_does_not_re_plan_ignores_costs(name, costs):
    assert S.generate(name, 4, 8, costs=costs).ranks == S.generate(name, 4, 8).ranks


@pytest.mark.parametrize("name", ["zbv", "v-half", "v-min"])
def test_a_v_schedule_planned_under_unequal_costs_is_faster_at_no_more_memory(name):
    """What a re-plan gains: pp=4, 8 microbatches, B twice F, a p2p latency."""
    even, costed = S.generate(name, 4, 8), S.generate(name, 4, 8, costs=UNEQUAL)
    before, after = S.simulate(even, UNEQUAL), S.simulate(costed, UNEQUAL)
    assert after.makespan < before.makespan
    assert max(after.peak_memory) <= max(before.peak_memory) + 1e-9


needs_megatron = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")


def _runner(name: str):
    from primus_megatron.runtime import get_forward_backward_func

    lines: list[str] = []
    return get_forward_backward_func(name, log=lines.append), lines


@needs_megatron
@pytest.mark.parametrize("name", ["zbv", "v-half"])
def test_the_runner_takes_a_faster_plan_from_measured_costs(name):
    runner, lines = _runner(name)
    old, _ = runner.plan(4, 8)
    runner.planner.replan(old, UNEQUAL, step=4)
    new, _ = runner.plan(4, 8)
    assert new.ranks == S.generate(name, 4, 8, costs=UNEQUAL).ranks != old.ranks
    assert len(lines) == 1 and lines[0].startswith(f"re-planned {name} from the measured costs"), lines


@needs_megatron
def test_the_runner_keeps_its_plan_when_the_new_one_needs_more_memory(monkeypatch):
    """v-half is chosen for its memory: a faster plan at zbv's memory is not taken."""
    runner, lines = _runner("v-half")
    old, _ = runner.plan(4, 8)
    generate = S.generate
    monkeypatch.setattr(S, "generate", lambda name, *a, **k: generate("zbv", *a, **k))
    runner.planner.replan(old, UNEQUAL, step=4)
    assert runner.plan(4, 8)[0] is old
    assert len(lines) == 1 and lines[0].startswith("kept the running v-half plan"), lines
    # a cost-driven schedule searches under its memory limit: it takes the new plan
    monkeypatch.setattr(S, "generate", generate)
    runner, lines = _runner("zb-auto")
    old, _ = runner.plan(4, 8)
    monkeypatch.setattr(S, "generate", lambda name, *a, **k: generate("zb-h2", *a, **k))
    runner.planner.replan(old, UNEQUAL, step=4)
    assert runner.plan(4, 8)[0].ranks == generate("zb-h2", 4, 8).ranks
    assert lines[0].startswith("re-planned zb-auto"), lines


def _measured(pp: int = 4, kept: float = 0.38):
    """The profiler's per-stage costs (runtime.profiler.combined_costs) from every rank's summary:
    B frees all but the weight gradient's share `kept` of what F added, W frees that."""
    from primus_megatron.runtime.profiler import combined_costs

    summaries = [{"durations": {(S.F, r): 1e-3, (S.B, r): 1.3e-3, (S.W, r): 0.6e-3},
                  "memory": {(S.F, r): 1000.0, (S.B, r): -1000.0 * (1 - kept), (S.W, r): -1000.0 * kept},
                  "comm": 5e-5, "steps": 2} for r in range(pp)]
    return combined_costs(summaries, S.generate("zb-h1", pp, 8))[0]


@needs_megatron
def test_measured_memory_reaches_the_zb_auto_re_plan():
    """The memory model the runtime measures is what zb-auto re-plans under: at 1.5x 1F1B's memory
    its plan differs from (and its span beats) the one today's default model (W frees all) gives."""
    from dataclasses import replace

    from primus_megatron.runtime import get_forward_backward_func

    measured = _measured()
    assert measured.mem_b == pytest.approx([-0.62] * 4) and measured.mem_w == pytest.approx([-0.38] * 4)
    runner = get_forward_backward_func("zb-auto", memory_limit=6.0, post_validation=True)
    old, _ = runner.plan(4, 8)
    runner.planner.replan(old, measured, step=4)
    new = runner.plan(4, 8)[0]
    assert new.ranks == S.generate("zb-auto", 4, 8, costs=measured, memory_limit=6.0, post_validation=True).ranks
    w_frees_all = replace(measured, mem_b=[0.0] * 4, mem_w=[-1.0] * 4)
    blind = S.generate("zb-auto", 4, 8, costs=w_frees_all, memory_limit=6.0, post_validation=True)
    assert new.ranks != blind.ranks
    assert max(S.simulate(new, measured).span) < max(S.simulate(blind, measured).span)
    assert max(S.simulate(new, measured).peak_memory) <= 6.0 + 1e-9


@needs_megatron
@pytest.mark.parametrize("name", ["zbv", "v-half", "v-min"])
def test_measured_memory_reaches_the_v_schedules_re_plan(name):
    """A V schedule's re-plan is generated under the measured costs, memory model included, and
    judged (no more peak activation memory) under it."""
    from primus_megatron.runtime import get_forward_backward_func

    measured = _measured()
    runner = get_forward_backward_func(name)
    old, _ = runner.plan(4, 8)
    runner.planner.replan(old, measured, step=4)
    assert runner.costs is measured
    new = runner.plan(4, 8)[0]
    planned = S.generate(name, 4, 8, costs=measured)
    if new is not old:
        assert new.ranks == planned.ranks
    assert max(S.simulate(new, measured).peak_memory) <= max(S.simulate(old, measured).peak_memory) + 1e-9


@needs_megatron
def test_measured_memory_reaches_auto():
    """--pipeline-schedule auto (train/auto.py): the measured per-stage costs, carried to per-rank
    shares (`per_rank_costs`) and re-timed per candidate (`balance.retimed`), keep the measured
    memory model, and each candidate is planned and scored under it."""
    from primus_megatron.runtime.profiler import per_rank_costs
    from primus_megatron.schedules import balance
    from primus_megatron.schedules.layer_split import LayerSplit

    measured = _measured()
    shares = per_rank_costs(measured, S.generate("zb-h1", 4, 8))
    split = LayerSplit(8)
    fitted = balance.fit(measured, split, 4, 1)
    assert fitted.wgrad_memory == pytest.approx(0.38)
    placed = balance.retimed(shares, fitted, split, 4, 1)
    assert placed.mem_b == pytest.approx([-0.62] * 4) and placed.mem_w == pytest.approx([-0.38] * 4)
    best, rows = S.auto.choose(4, 8, lambda name: balance.retimed(shares, fitted, split, 4, S.info(name).chunks),
                               6.0, post_validation=True, candidates=["zb-auto", "zb-h1"])
    row = next(r for r in rows if r.name == "zb-auto")
    expected = S.simulate(S.generate("zb-auto", 4, 8, costs=placed, memory_limit=6.0, post_validation=True), placed)
    assert row.iteration == pytest.approx(max(expected.span)) and row.peak == pytest.approx(expected.max_peak_memory)


def test_profile_files_carry_the_measured_memory_model(tmp_path):
    """--pipeline-profile-out / `primus-pipeline balance` / --pipeline-balance FILE: the fitted
    model keeps the weight gradient's share of the activations, and the stage costs built from a
    saved profile free memory as measured (B all but that share, W the share). A profile written
    before the share existed reads as today's default (W frees all)."""
    import json

    from primus_megatron.schedules import balance
    from primus_megatron.schedules.layer_split import LayerSplit

    measured = S.Costs(f=[1.0] * 4, b=[1.3] * 4, w=[0.6] * 4, mem_f=[1.0] * 4, mem_b=[-0.62] * 4, mem_w=[-0.38] * 4)
    fitted = balance.fit(measured, LayerSplit(8), 4, 1)
    path = str(tmp_path / "run.profile.json")
    balance.save_profile(path, fitted)
    loaded = balance.load_profile(path)
    assert loaded.wgrad_memory == pytest.approx(0.38)
    costs = balance.stage_costs(loaded, LayerSplit(8), 4, 1)
    assert costs.mem_b == pytest.approx([-0.62] * 4) and costs.mem_w == pytest.approx([-0.38] * 4)
    data = json.load(open(path))
    del data["costs"]["wgrad_memory"]
    json.dump(data, open(path, "w"))
    old = balance.stage_costs(balance.load_profile(path), LayerSplit(8), 4, 1)
    assert old.mem_b == pytest.approx([0.0] * 4) and old.mem_w == pytest.approx([-1.0] * 4)


def test_a_run_that_ends_inside_the_profile_window_says_why_no_profile_was_written():
    """--pipeline-profile-out with --pipeline-profile-steps 3 needs 4 training steps (1 warm-up, 3
    measured); a run (e.g. resumed) that ends after 2 says so at its end, naming both counts.
    Evaluation steps do not count; a window that closed, or no --pipeline-profile-out, says nothing."""
    from primus_megatron.runtime.profile_window import ProfilingWindow

    window = ProfilingWindow((1, 4), profile_out="out/run.json")
    for forward_only in (False, True, False):
        window.step_done(forward_only, profiled=window.open_for(forward_only) is not None)
    note = window.unwritten()
    assert note.startswith("--pipeline-profile-out out/run.json was not written: the profile needs 4 training steps "
                           "(1 warm-up, then --pipeline-profile-steps 3 measured) and this run ran 2;"), note
    assert "\n" not in note
    window.measured = (S.Costs(), {})  # what finish() sets when the window closes (rank 0 writes the file)
    assert window.unwritten() is None
    assert ProfilingWindow((1, 4)).unwritten() is None and ProfilingWindow(None, profile_out="x.json").unwritten() is None


@needs_megatron
def test_the_runner_plans_for_the_runs_objective():
    """With post-validation the runner's plan minimises the longest span (the paper's 6.2B, p=8,
    m=32 at 2p: the makespan's plan keeps ZB-H2's span); without it, the makespan."""
    from primus_megatron.runtime import get_forward_backward_func
    from primus_megatron.schedules import paper_settings as P

    setting = next(s for s in P.TABLE5_SETTINGS if (s.model, s.microbatches) == ("6.2B", 32))
    costs = setting.costs()
    post = get_forward_backward_func("zb-auto", costs=costs, memory_limit=16.0, post_validation=True).plan(8, 32)[0]
    sync = get_forward_backward_func("zb-auto", costs=costs, memory_limit=16.0).plan(8, 32)[0]
    assert post.ranks == S.generate("zb-auto", 8, 32, costs=costs, memory_limit=16.0, post_validation=True).ranks
    assert sync.ranks == S.generate("zb-auto", 8, 32, costs=costs, memory_limit=16.0).ranks
    assert max(S.simulate(post, costs).span) < max(S.simulate(sync, costs).span)
    assert S.simulate(sync, costs).makespan <= S.simulate(post, costs).makespan


@needs_megatron
@pytest.mark.parametrize("post", [False, True])
def test_both_training_entry_points_plan_for_the_runs_objective(post):
    """examples/pretrain_gpt.py (train/pretrain.py) and Megatron-LM's plugin hand
    --optimizer-post-validation and --pipeline-costs (memory model included) to the runner."""
    import argparse

    from primus_megatron import options
    from primus_megatron.megatron_lm import args as mlm_args
    from primus_megatron.megatron_lm import plugin
    from primus_megatron.train import pretrain

    args = argparse.Namespace(pipeline_schedule="zb-auto", pipeline_costs="1,1.2,0.7,0.05,mem-w=-0.4",
                              pipeline_memory_limit=8.0, pipeline_chunks=None,
                              pipeline_p2p_timeout=60.0, pipeline_profile_steps=3, pipeline_profile_out=None,
                              optimizer_post_validation=post, deterministic_mode=False,
                              pipeline_offload="off", pipeline_offload_bandwidth=None)
    expected = S.generate("zb-auto", 4, 6, costs=S.Costs(f=1, b=1.2, w=0.7, comm=0.05, mem_b=-0.6, mem_w=-0.4),
                          memory_limit=8.0, post_validation=post)
    for runner in (pretrain.forward_backward_func(options.from_args(args)),
                   plugin.forward_backward_func_for(mlm_args.spec_of(args))):
        assert runner.post_validation is post
        assert runner.costs.mem_w == -0.4 and runner.plan(4, 6)[0].ranks == expected.ranks


def test_every_replica_of_the_pipeline_plans_the_same_order():
    """Data-parallel replicas each gather their own pipeline's measurements; planned apart, zb-auto gave
    them different orders, while their ranks meet in DDP's bucket reduces (issued in W's order) and, with
    tensor or context parallelism, inside F and B. Every rank plans from the largest cost any replica
    measured, and compares schedule fingerprints job-wide: ranks given different schedules are told so,
    with every rank's, before the first op."""
    import pipeline_harness as H

    results = H.run_ranks({"body": H.replica_plans_body, "pp": 2, "microbatches": 6, "num_layers": 4}, 4,
                          timeout_s=300)
    assert sorted(r["dp_rank"] for r in results) == [0, 0, 1, 1]
    assert len({r["fingerprint"] for r in results}) == 1, [(r["dp_rank"], r["fingerprint"]) for r in results]
    assert len({repr(r["costs"]) for r in results}) == 1
    slow = results[[r["dp_rank"] for r in results].index(1)]["costs"]
    assert min(slow.f) > 2 * max(slow.b)  # replica 1's 4x slower F is what every rank planned with
    for r in results:
        assert r["mismatch"] is not None and "ranks would run schedules that differ" in r["mismatch"]
        assert "zb-h1" in r["mismatch"] and "zb-h2" in r["mismatch"] and "global rank 3" in r["mismatch"]
