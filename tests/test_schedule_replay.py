"""Replaying an executed order (schedules/replay.py, what the demo draws from each op's CPU time):
the simulator's own timeline, replayed from its op durations, comes back span for span; an order
that is not one step of a schedule is refused, naming where it is stuck."""
from __future__ import annotations

import pytest

from primus_megatron.schedules import Costs, Op, generate, simulate
from primus_megatron.schedules.ir import B, F, W
from primus_megatron.schedules.replay import replay


@pytest.mark.parametrize("name", ["1f1b", "zb-h1", "zb-h2", "zbv", "v-half", "interleaved-1f1b"])
def test_replaying_a_simulated_timeline_gives_it_back(name):
    costs = Costs(f=[1.0, 1.3, 0.9, 1.1], b=[1.7, 2.1, 1.9, 2.2], w=[0.6, 0.8, 0.5, 0.7], comm=0.15)
    sched = generate(name, 4, 8, costs=costs)
    sim = simulate(sched, costs)
    order = [[(s.op, s.stage, s.end - s.start) for s in row] for row in sim.timeline]
    again = replay(order, sched.num_stages, comm=0.15)
    for rank, (want, got) in enumerate(zip(sim.timeline, again)):
        assert [(str(s.op), s.stage) for s in got] == [(str(s.op), s.stage) for s in want], rank
        assert [t for s in got for t in (s.start, s.end)] == pytest.approx([t for s in want for t in (s.start, s.end)],
                                                                          abs=1e-9), rank
    assert max(s.end for row in again for s in row) == pytest.approx(sim.makespan)


def test_an_op_waits_for_its_input_one_latency_later_on_another_rank():
    order = [[(Op(F, 0), 0, 1.0), (Op(B, 0), 0, 2.0), (Op(W, 0), 0, 0.5)],
             [(Op(F, 0), 1, 1.0), (Op(B, 0), 1, 2.0), (Op(W, 0), 1, 0.5)]]
    again = replay(order, 2, comm=0.25)
    assert [(s.start, s.end) for s in again[1]] == [(1.25, 2.25), (2.25, 4.25), (4.25, 4.75)]
    assert [(s.start, s.end) for s in again[0]] == [(0.0, 1.0), (4.5, 6.5), (6.5, 7.0)]


def test_an_order_that_cannot_run_is_refused_naming_the_stuck_ops():
    order = [[(Op(B, 0), 0, 1.0), (Op(F, 0), 0, 1.0)], [(Op(F, 0), 1, 1.0), (Op(B, 0), 1, 1.0)]]
    with pytest.raises(ValueError, match=r"rank 0: B0; rank 1: F0"):
        replay(order, 2)


def _executed(sim, cpu_of):
    """A gathered timeline (train/cpu_replay.ExecutedOp) whose ops ran the simulated order, with
    wall times stretched (other ranks' turns on a shared core) and CPU times from `cpu_of`."""
    from primus_megatron.train.cpu_replay import ExecutedOp

    return [[ExecutedOp(s.rank, s.op, s.stage, 3 * s.start, 3 * s.end + 1, cpu_of(s)) for s in row]
            for row in sim.timeline]


def test_the_demo_log_replays_the_executed_order_and_plans_it_from_the_same_cpu_times():
    """cpu_replay.log_field: the replayed bubble is the executed order's under each op's own CPU
    time; 'planned from them' is the simulator's under the per-stage medians of those times."""

    from primus_megatron.train import cpu_replay

    costs = Costs(f=[1.0, 1.3, 0.9, 1.1], b=[1.7, 2.1, 1.9, 2.2], w=[0.6, 0.8, 0.5, 0.7])
    sched = generate("zbv", 2, 6, costs=costs)
    sim = simulate(sched, costs)
    # every op of a (kind, stage) took its stage's cost, one microbatch's F twice that: the medians stay the costs
    executed = _executed(sim, lambda s: (s.end - s.start) * (2 if (s.op.kind, s.op.mb) == (F, 3) else 1))
    noisy = replay([[(s.op, s.stage, r.cpu) for s, r in zip(row, rows)] for row, rows in zip(sim.timeline, executed)],
                   sched.num_stages, comm=0.0)
    field = cpu_replay.log_field((2, 1), executed)
    assert field == (f"bubble (replayed from op CPU times): {cpu_replay.bubble(noisy):.3f}, "
                     f"planned from them: {sim.bubble_sync:.3f}")
    assert cpu_replay.bubble(noisy) != pytest.approx(sim.bubble_sync)  # the two figures are not the same number
    assert cpu_replay.log_field(None, executed) == ""  # a core per rank: no replay
