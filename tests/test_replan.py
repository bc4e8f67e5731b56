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
    from primus_megatron.runtime.forward_backward import PipelineRunner

    lines: list[str] = []
    return PipelineRunner(name, log=lines.append), lines


@needs_megatron
@pytest.mark.parametrize("name", ["zbv", "v-half"])
def test_the_runner_takes_a_faster_plan_from_measured_costs(name):
    runner, lines = _runner(name)
    old, _ = runner.plan(4, 8)
    runner._replan(old, UNEQUAL)
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
    runner._replan(old, UNEQUAL)
    assert runner.plan(4, 8)[0] is old
    assert len(lines) == 1 and lines[0].startswith("kept the running v-half plan"), lines
    # a cost-driven schedule searches under its memory limit: it takes the new plan
    monkeypatch.setattr(S, "generate", generate)
    runner, lines = _runner("zb-auto")
    old, _ = runner.plan(4, 8)
    monkeypatch.setattr(S, "generate", lambda name, *a, **k: generate("zb-h2", *a, **k))
    runner._replan(old, UNEQUAL)
    assert runner.plan(4, 8)[0].ranks == generate("zb-h2", 4, 8).ranks
    assert lines[0].startswith("re-planned zb-auto"), lines
