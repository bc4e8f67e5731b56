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


def test_the_demo_shows_the_order_replayed_from_cpu_times_its_plan_and_1f1b_from_the_same_times():
    """Where ranks time-share cores, the iteration 'as it ran' is the executed order replayed under each op's
    own CPU time (the wall clock, stretched by other ranks' turns, is not it; with a core each it is the
    measurement itself). The picture's plan is the simulator's under the per-stage medians of those times, and
    its baseline 1F1B under the same times, each 1F1B stage summing the two V stages it holds (by hand here)."""
    from primus_megatron.train import cpu_replay
    from primus_megatron.train.timeline import timeline_panels

    costs = Costs(f=[1.0, 1.3, 0.9, 1.1], b=[1.7, 2.1, 1.9, 2.2], w=[0.6, 0.8, 0.5, 0.7])
    sched = generate("zbv", 2, 6, costs=costs)
    sim = simulate(sched, costs)
    # every op of a (kind, stage) took its stage's cost, one microbatch's F twice that: the medians stay the costs
    executed = _executed(sim, lambda s: (s.end - s.start) * (2 if (s.op.kind, s.op.mb) == (F, 3) else 1))
    noisy = replay([[(s.op, s.stage, r.cpu) for s, r in zip(row, rows)] for row, rows in zip(sim.timeline, executed)],
                   sched.num_stages, comm=0.0)
    ran, replayed = cpu_replay.as_it_ran(executed, (2, 1))
    assert replayed and cpu_replay.bubble(ran) == pytest.approx(cpu_replay.bubble(noisy))
    assert cpu_replay.bubble(noisy) != pytest.approx(sim.bubble_sync)  # not the plan's number
    assert cpu_replay.as_it_ran(executed, None) == (executed, False)  # a core per rank: the measurement
    rows = timeline_panels(executed, sched, (2, 1))
    assert [key for key, *_ in rows] == ["planned", "ran", "1F1B", "wall clock"]
    assert rows[0][1].bubble_sync == pytest.approx(sim.bubble_sync)
    # V placement: global stages 0-1 are 1F1B's stage 0 (rank 0), 2-3 its stage 1
    by_hand = Costs(f=[2.3, 2.0], b=[3.8, 4.1], w=[1.4, 1.2])
    base = simulate(generate("1f1b", 2, 6, costs=by_hand), by_hand)
    assert rows[2][1].makespan == pytest.approx(base.makespan)
    assert rows[2][2].endswith(f"; zbv's plan {base.makespan / sim.makespan:.2f}x as fast")
    assert all(text.count("bubble") == 1 for *_, text in rows)
