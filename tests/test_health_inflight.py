"""In-flight pipeline health (issue 61, items 1 and 4): health/inflight.py on hand-made timings,
runtime/health.py's reduction of recorded ops (host marks and GPU events, faked), and one emulated
pp-4 launch with a rank slowed 2x from step 5 on (`--straggler 2:2@5`).

Why the expected values hold: a plan's per-rank op times are the schedule's ops priced by its cost
model, so with unit costs every rank of zb-h1 has m F, m B and m W of 1 unit; a sample built as
"the plan x 5 ms, rank r x factor" must read factor for rank r (the scale is the lower median of the
ranks' measured/planned ratios, which is the unslowed ranks' 5 ms) and 1 for the others.
"""
from __future__ import annotations

import json
import statistics
from types import SimpleNamespace

import pytest

from primus_megatron import schedules as S
from primus_megatron.health import inflight as H

UNIT_S = 0.005


def _samples(plan: H.Plan, factors: dict, *, period: float = 0.2, hosts=None) -> list:
    """Each rank measured at exactly its plan x UNIT_S, times its factor; one step."""
    out = []
    for r, kinds in enumerate(plan.kinds):
        s = H.RankSample(global_rank=10 + r, host=(hosts or {}).get(r, f"node{r // 2}"))
        for kind, (units, count) in kinds.items():
            s.add_op(kind, UNIT_S * units * factors.get(r, 1.0), count)
        s.period, s.steps = period, 1
        out.append(s)
    return out


def test_the_plan_prices_each_rank_s_ops_with_the_cost_model():
    sched = S.generate("zb-h1", 4, 8)
    plan = H.plan_of(sched, S.Costs(f=1.0, b=2.0, w=0.5))
    for kinds in plan.kinds:
        assert kinds == {"F": (8.0, 8), "B": (16.0, 8), "W": (4.0, 8)}
    assert plan.bubble == pytest.approx(S.simulate(sched, S.Costs(f=1.0, b=2.0, w=0.5)).bubble_sync)


def test_a_pair_is_priced_as_one_op_at_its_pair_duration():
    sched = S.generate("dualpipev", 4, 8)
    assert sched.has_pairs
    costs = S.Costs(f=1.0, b=1.0, w=1.0, a2a=0.4)
    plan = H.plan_of(sched, costs)
    sc = costs.resolve(4, sched.chunks_per_rank, sched.placement)
    for rank, kinds in enumerate(plan.kinds):
        pairs = sorted(sched.paired(rank))
        want = sum(sc.pair_duration(sched.stage(rank, sched.ranks[rank][p]), sched.ranks[rank][p + 1].kind,
                                    sched.stage(rank, sched.ranks[rank][p + 1])) for p in pairs)
        assert kinds.get("pair", (0.0, 0)) == (pytest.approx(want), len(pairs))
        # every op counted once: alone, or as half of a pair
        assert sum(c for _, c in kinds.values()) + len(pairs) == len(sched.ranks[rank])


def test_a_sample_crosses_the_gather_as_a_fixed_length_vector():
    s = H.RankSample(global_rank=517, host="gpu-node-ü-" + "x" * 80)
    s.add_op("F", 0.25, 4)
    s.add_op("pair", 0.5, 1.5)
    s.period, s.steps = 2.0, 3
    values = s.to_vector()
    assert len(values) == H.VECTOR_LENGTH
    back = H.RankSample.from_vector(values)
    assert back.kinds["F"] == [0.25, 4] and back.kinds["pair"] == [0.5, 1.5] and back.busy == pytest.approx(0.75)
    assert (back.period, back.steps, back.global_rank) == (2.0, 3, 517)
    assert back.host == s.host.encode()[:H.HOST_BYTES].decode()
    assert back.idle == pytest.approx((2.0 - 0.75) / 3)


@pytest.mark.parametrize("pp, straggler", [(2, 1), (4, 2), (8, 0)])
def test_a_straggler_reads_its_factor_and_is_named_by_its_excess(pp, straggler):
    plan = H.plan_of(S.generate("zb-h1", pp, 8))
    got = H.assess(_samples(plan, {straggler: 1.8}), plan, step=100, threshold=1.15)
    for h in got.ranks:
        assert h.ratio == pytest.approx(1.8 if h.pipeline_rank == straggler else 1.0)
    assert got.scale_s == pytest.approx(UNIT_S)
    assert got.slowest.pipeline_rank == straggler and got.slowest.global_rank == 10 + straggler
    assert got.slowest.excess_s == pytest.approx(0.8 * UNIT_S * 24)  # 24 units of ops, 80% over
    assert got.over == (straggler,)
    f_measured, f_plan = got.slowest.kinds["F"]
    assert (f_measured, f_plan) == (pytest.approx(1.8 * UNIT_S), pytest.approx(UNIT_S))


def test_measured_bubble_is_the_idle_share_of_the_longest_period():
    plan = H.plan_of(S.generate("zb-h1", 4, 8))
    samples = _samples(plan, {}, period=0.2)
    samples[3].period = 0.25  # the longest rank's period is the step
    got = H.assess(samples, plan, step=1, threshold=1.15)
    assert got.step_s == pytest.approx(0.25)
    assert got.bubble == pytest.approx(1 - 4 * 24 * UNIT_S / (4 * 0.25))
    assert got.ranks[0].idle_s == pytest.approx(0.2 - 24 * UNIT_S)


def test_a_job_wide_slowdown_names_no_straggler():
    plan = H.plan_of(S.generate("zb-h1", 4, 8))
    got = H.assess(_samples(plan, {r: 1.5 for r in range(4)}), plan, step=1, threshold=1.15)
    assert got.over == () and all(h.ratio == pytest.approx(1.0) for h in got.ranks)
    assert got.scale_s == pytest.approx(1.5 * UNIT_S)


def test_a_warning_needs_the_threshold_crossed_for_patience_intervals_in_a_row():
    plan = H.plan_of(S.generate("zb-h1", 4, 8))
    monitor = H.Monitor(threshold=1.15, patience=3)
    slow, fine = _samples(plan, {2: 1.3}), _samples(plan, {})
    seen = [monitor.update(s, plan, step) for step, s in enumerate([slow, slow, fine, slow, slow, slow, slow], 1)]
    assert [g.over for g in seen] == [(2,), (2,), (), (2,), (2,), (2,), (2,)]
    assert [len(g.warnings) for g in seen] == [0, 0, 0, 0, 0, 1, 0]  # one noisy interval is only named
    assert "pipeline rank 2 (global rank 12, host node1)" in seen[5].warnings[0]
    assert "3 intervals in a row" in seen[5].warnings[0] and "1.30x" in seen[5].warnings[0]


def test_the_line_the_record_and_the_scalars_say_the_same():
    plan = H.plan_of(S.generate("zb-h1", 4, 8))
    got = H.Monitor(1.15, 1).update(_samples(plan, {1: 2.0}, hosts={1: "gpu-17"}), plan, 300)
    text = H.line(got)
    assert "\n" not in text and text.startswith("pipeline health at step 300")
    assert "slowest pipeline rank 1 (global rank 11, host gpu-17): 2.00x its plan" in text
    assert "1: F 10.00/5.00 B 10.00/5.00 W 10.00/5.00" in text
    rec = json.loads(json.dumps(H.record(got)))
    assert rec["slowest"] == {"pipeline_rank": 1, "global_rank": 11, "host": "gpu-17", "ratio": 2.0,
                              "excess_s": pytest.approx(24 * UNIT_S)}
    assert rec["over"] == [1] and len(rec["warnings"]) == 1
    assert rec["ranks"][1]["ops"]["B"] == {"s": 2 * UNIT_S, "plan_s": UNIT_S}
    tags = H.scalars(got)
    assert tags["pipeline-health/slowest-rank"] == 1 and tags["pipeline-health/rank1-ratio"] == pytest.approx(2.0)
    assert tags["pipeline-health/bubble"] == pytest.approx(got.bubble)


@pytest.mark.parametrize("values, words", [
    ((-1, 1.15, 3, None), "--pipeline-health-interval must be"),
    ((100, 1.0, 3, None), "--pipeline-health-threshold must be a factor > 1"),
    ((100, float("nan"), 3, None), "--pipeline-health-threshold"),
    ((100, 1.15, 0, None), "--pipeline-health-patience must be"),
    ((100, 1.15, 3, "/no/such/folder/h.jsonl"), "--pipeline-health-json must name a file"),
])
def test_bad_options_get_one_sentence(values, words):
    problem = H.check(*values)
    assert problem and words in problem and "\n" not in problem
    assert H.check(0, 1.5, 1, None) is None


# -- the runtime's reduction of recorded ops ----------------------------------------------------------

def _record(kind, start, end, pair="", clock=None):
    from primus_megatron.runtime.executor import OpRecord

    return OpRecord(0, S.Op(kind, 0, 0), 0, start, end, clock, pair)


def test_a_rank_s_sample_takes_each_kind_s_median_and_counts_pairs_once(monkeypatch):
    from primus_megatron.runtime import health

    monkeypatch.setattr(health.dist, "get_rank", lambda: 5)
    clock = SimpleNamespace(kind="host", elapsed=lambda a, b: b - a)
    ops = [_record("F", 0.0, 0.01), _record("F", 0.02, 0.03), _record("F", 0.04, 0.09),  # one held up 5x
           _record("B", 0.1, 0.12, "whole"), _record("BW", 0.1, 0.12, "dup"),  # a pair as one call
           _record("F", 0.2, 0.21, "half"), _record("B", 0.21, 0.24, "half"),  # a pair as two ops
           _record("VALIDATE", 0.3, 0.4)]
    sample = health.reduce_steps([(ops, (0.0, 0.5), clock)])
    assert sample.kinds["F"] == [pytest.approx(0.03), 3]  # the median 10 ms, three times
    assert sample.kinds["pair"][1] == pytest.approx(2.0)  # one whole pair, two halves: two pairs
    assert sample.kinds["pair"][0] == pytest.approx(0.02 + 2 * 0.02)  # halves: median of 10 and 30 ms, twice
    assert (sample.period, sample.steps, sample.global_rank) == (0.5, 1, 5)


class _Event:
    """torch.cuda.Event's surface (as tests/test_gpu_timing.py's): reading an event that has not
    completed fails here, so a test sees whether the newest step's events were read."""

    def __init__(self, enable_timing: bool = False, at: float = 0.0, done: bool = True) -> None:
        assert enable_timing
        self.at, self.done = at, done

    def record(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        assert self.done, "the newest step's events were read at the gather"

    def elapsed_time(self, end: "_Event") -> float:
        return end.at - self.at


def test_on_a_gpu_the_gather_reads_only_steps_the_device_finished(monkeypatch):
    from primus_megatron.runtime import health
    from primus_megatron.runtime.profiler import EventClock

    monkeypatch.setattr(health.dist, "get_rank", lambda: 0)
    clock = EventClock(event_type=_Event)
    clock.origin, clock.origin_host = _Event(True, 0.0), 100.0

    def step(t0: float, done: bool):
        marks = [_Event(True, t0 + ms, done) for ms in (0.0, 5.0, 20.0)]
        return [_record("F", marks[0], marks[1], clock=clock)], (marks[0], marks[2]), clock

    sample = health.reduce_steps([step(0.0, True), step(30.0, True), step(60.0, False)])
    assert sample.steps == 2 and sample.kinds["F"] == [pytest.approx(2 * 0.005), 2]  # 5 ms, twice
    assert sample.period == pytest.approx(0.04)


# -- one emulated launch: a rank slowed 2x from step 5 on ---------------------------------------------

HEALTH = {"health_interval": 2, "health_threshold": 1.3, "health_patience": 2}


@pytest.fixture(scope="module")
def slowed_from_step_5(tmp_path_factory):
    """One launch of 4 ranks, two plans in turn in the same processes, each 10 steps (1 warm-up), ops of
    30 ms (sleeps: a loaded 2-core host adds ms of wake-up and host work to an op, not a factor),
    pipeline rank 2 slowed 2x from step 5 on, a gather every 2 steps (threshold 1.3, patience 2):
    zb-h1 run as planned, and zb-auto planned by the runner from the costs, free to re-plan on a drift.
    Per plan, its health records by step."""
    from primus_megatron import emulation as E

    folder = tmp_path_factory.mktemp("health")
    costs = S.Costs(f=30.0, b=30.0, w=30.0)
    zb = E.plan("zb-h1", 4, 4, costs, scale=1e-3)[0]
    auto = E.plan("zb-auto", 4, 4, costs, scale=1e-3)[0]
    zb.health = {**HEALTH, "health_json": str(folder / "zb-h1.jsonl")}
    auto.health = {**HEALTH, "health_replan": True, "health_json": str(folder / "zb-auto.jsonl")}
    E.run([zb, auto], 4, 4, elements=64, steps=9, warmup=1, p2p_timeout_s=60,
          straggler={"rank": 2, "factor": 2.0, "from_step": 5})
    return {name: {r["step"]: r for r in (json.loads(x)["pipeline_health"]
                                          for x in (folder / f"{name}.jsonl").read_text().splitlines())}
            for name in ("zb-h1", "zb-auto")}


def test_a_straggler_is_named_from_the_step_it_slows_on_within_two_intervals(slowed_from_step_5):
    """zb-h1: the intervals ending at steps 2 and 4 name no one (no false alarm before it slows), the
    one ending at step 6 (steps 5 and 6 sampled) names rank 2 at 2x within 10%, and so do the later
    ones; with patience 2 the warning comes at step 8, not before."""
    got = slowed_from_step_5["zb-h1"]
    assert sorted(got) == [2, 4, 6, 8, 10]
    for step in (2, 4):
        assert got[step]["over"] == [] and got[step]["warnings"] == [], got[step]
    for step in (6, 8, 10):
        assert got[step]["over"] == [2] and got[step]["slowest"]["pipeline_rank"] == 2, got[step]
        assert got[step]["slowest"]["ratio"] == pytest.approx(2.0, rel=0.10)
        assert got[step]["slowest"]["global_rank"] == 2
    assert got[6]["warnings"] == [] and "pipeline rank 2 (global rank 2" in got[8]["warnings"][0]


# -- re-planning on a lasting drift (item 2) ----------------------------------------------------------

def test_measured_costs_are_each_rank_s_median_op_times_per_chunk():
    sched = S.generate("zb-h1", 4, 8)
    plan = H.plan_of(sched)
    samples = _samples(plan, {2: 2.0})
    samples[1].kinds["W"] = [0.0, 0.0]  # a kind not timed keeps its plan on the measured axis
    base = S.Costs(comm=0.25, mem_b=-0.4, mem_w=-0.6)
    costs = H.measured_costs(samples, plan, UNIT_S, 1, base)
    assert costs.f == pytest.approx((UNIT_S, UNIT_S, 2 * UNIT_S, UNIT_S))
    assert costs.w == pytest.approx((UNIT_S, UNIT_S, 2 * UNIT_S, UNIT_S)) and costs.comm == 0.25 and costs.mem_b == -0.4
    v = H.measured_costs(samples, plan, UNIT_S, 2, base)  # two chunks: a rank's share is both chunks' ops
    assert v.b == pytest.approx((2 * UNIT_S, 2 * UNIT_S, 4 * UNIT_S, 2 * UNIT_S))


def test_a_drift_is_a_rank_over_the_threshold_for_patience_intervals():
    plan = H.plan_of(S.generate("zb-h1", 4, 8))
    monitor = H.Monitor(threshold=1.3, patience=2)
    for samples, drift in ((_samples(plan, {1: 1.5}), False), (_samples(plan, {}), False),
                           (_samples(plan, {1: 1.5}), False), (_samples(plan, {1: 1.5}), True)):
        monitor.update(samples, plan, 0)
        assert H.drifted(monitor) is drift


def test_a_lasting_drift_re_plans_a_cost_planned_schedule_job_wide(slowed_from_step_5):
    """zb-auto: the gathers at steps 6 and 8 find rank 2 over 1.3x (patience 2); after step 8 every rank
    votes, plans again from the measured per-rank costs and compares fingerprints before the new plan's
    first op (a mismatch or a hang fails the run); at step 10 the plan the health line compares with is
    the new one, which prices rank 2's ops at about twice the others', and nothing is over the threshold.
    Nothing re-plans before the drift has lasted two intervals."""
    got = slowed_from_step_5["zb-auto"]
    assert sorted(got) == [2, 4, 6, 8, 10]
    plan_f = {step: [rank["ops"]["F"]["plan_s"] for rank in rec["ranks"]] for step, rec in got.items()}
    for step in (2, 4, 6, 8):  # the first plan: every rank's F alike
        assert max(plan_f[step]) == pytest.approx(min(plan_f[step]), rel=1e-6), (step, plan_f[step])
    assert got[6]["over"] == [2] and got[8]["over"] == [2]
    others = [f for r, f in enumerate(plan_f[10]) if r != 2]
    assert plan_f[10][2] == pytest.approx(2 * statistics.median(others), rel=0.15), plan_f[10]
    assert got[10]["over"] == [], got[10]


def test_scalars_go_through_megatron_lm_s_own_writers_where_its_loop_made_them(monkeypatch):
    """Megatron-LM's global_vars (megatron/training/global_vars.py: get_tensorboard_writer,
    get_wandb_writer, the parsed args with curr_iteration), faked: each writer gets every scalar at
    Megatron-LM's iteration; without Megatron-LM (megatron-core alone) nothing is written."""
    import sys
    import types

    from primus_megatron.runtime import health

    plan = H.plan_of(S.generate("zb-h1", 4, 8))
    got = H.Monitor(1.15, 3).update(_samples(plan, {3: 1.5}), plan, 40)
    health.write_scalars(got)  # megatron.training is not installed here: a no-op
    board, wandb = [], []
    gv = types.ModuleType("megatron.training.global_vars")
    gv.get_tensorboard_writer = lambda: SimpleNamespace(add_scalar=lambda tag, value, step: board.append((tag, value, step)))
    gv.get_wandb_writer = lambda: SimpleNamespace(log=lambda values, step: wandb.append((values, step)))
    gv._GLOBAL_ARGS = SimpleNamespace(curr_iteration=1040)
    training = types.ModuleType("megatron.training")
    training.global_vars = gv
    monkeypatch.setitem(sys.modules, "megatron.training", training)
    monkeypatch.setitem(sys.modules, "megatron.training.global_vars", gv)
    health.write_scalars(got)
    assert {tag for tag, _, _ in board} == set(H.scalars(got)) and {s for _, _, s in board} == {1040}
    assert dict((t, v) for t, v, _ in board)["pipeline-health/slowest-rank"] == 3
    assert wandb == [(H.scalars(got), 1040)]


@pytest.mark.parametrize("extra, replans", [
    ([], True),  # zb-auto measures its costs in its profile window: a drift is priced in the same seconds
    (["--pipeline-costs", "1,1,1"], False),  # costs in units of their own: no drift re-plan from seconds
    (["--pipeline-profile-steps", "0"], False),  # nothing measured: the plan stays
    (["--pipeline-health-replan", "off"], False),
])
def test_a_drift_replans_only_a_run_that_measures_its_own_costs(extra, replans):
    import argparse

    from primus_megatron import options

    args = options.add_args(argparse.ArgumentParser()).parse_args(["--pipeline-schedule", "zb-auto", *extra])
    assert options.check_options(args) is None
    assert options.from_args(args).health_replan is replans
    assert options.from_options("zb-auto").health_replan is False  # the keyword API: opt-in
