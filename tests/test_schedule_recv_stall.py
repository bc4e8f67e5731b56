"""The ROCm receive stall (issue 60 item 3): on ROCm a pending receive slows its rank's compute
(PyTorch #172668). The queue model's option (`run_p2p(..., recv_stall=)`, rendezvous.py's module
doc): an op that starts while a receive posted earlier on its rank has not completed takes the
factor times its duration. Here: a tiny case checked by hand, where it costs the early lowering
and not the just-in-time one; that it never turns a run into a hang; the CLI's option.
"""
from __future__ import annotations

import json

import pytest

from primus_megatron import cli, schedules as S
from primus_megatron.schedules import ScheduleError, generate, lower
from primus_megatron.schedules.lowering import EARLY, JUST_IN_TIME
from primus_megatron.schedules.rendezvous import run_p2p


def _spans(run) -> list:
    return [[(str(op), start, end) for op, start, end in spans] for spans in run.spans]


def test_1f1b_by_hand_the_stall_costs_early_receives_only():
    """1F1B, pp=2, 3 microbatches, unit costs (F 1, BW 2, no comm), stall 1.5.

    Early, rank 1 posts the receives of activations mb0 and mb1 before F0. F0 starts at 1 (mb0
    arrives at 1) while mb1's receive is pending (rank 0 sends it at 2): 1 -> 2.5. BW0 at 2.5
    finds nothing pending: 2.5 -> 4.5, then rank 1 sends gradient mb0 and posts mb2's receive.
    Rank 0's BW0 starts when gradient mb0 arrives (4.5), nothing pending: 4.5 -> 6.5; F2 6.5 -> 7.5,
    mb2 sent at 7.5. So rank 1's F1 (4.5) and BW1 (6) start under mb2's pending receive: 4.5 -> 6,
    6 -> 9; gradient mb1 leaves at 9. Rank 0 posts both last gradient receives after sending mb2:
    BW1 starts at 9 with mb2's gradient pending (sent when rank 1's BW2 ends: F2 9 -> 10, BW2
    10 -> 12): 9 -> 12, BW2 12 -> 14. Makespan 14 against 12 without the stall.

    Just in time every receive sits right before the op that consumes it, which waits for it:
    no op starts under a pending receive, and the timeline is the stall-free one (makespan 12)."""
    sched = generate("1f1b", 2, 3)
    sc = S.UNIT.resolve(2, 1, sched.placement, 3)
    early = lower(sched, recv_policy=EARLY)
    plain, stalled = run_p2p(early, sc), run_p2p(early, sc, recv_stall=1.5)
    assert plain.makespan == 12 and stalled.makespan == 14
    assert _spans(stalled) == [
        [("F0", 0, 1), ("F1", 1, 2), ("BW0", 4.5, 6.5), ("F2", 6.5, 7.5), ("BW1", 9, 12), ("BW2", 12, 14)],
        [("F0", 1, 2.5), ("BW0", 2.5, 4.5), ("F1", 4.5, 6), ("BW1", 6, 9), ("F2", 9, 10), ("BW2", 10, 12)]]
    jit = lower(sched, recv_policy=JUST_IN_TIME)
    assert _spans(run_p2p(jit, sc, recv_stall=1.5)) == _spans(run_p2p(jit, sc)) and run_p2p(jit, sc).makespan == 12


@pytest.mark.parametrize("name", ["zb-h1", "zbv", "dualpipev", "interleaved-1f1b"])
@pytest.mark.parametrize("policy", [EARLY, JUST_IN_TIME])
def test_each_op_takes_its_duration_or_the_stalled_one_and_the_run_ends(name, policy):
    """Under the stall every run still ends (it changes times, not which runs hang), every op
    takes its duration or the factor times it, and a factor of 1 is the model without it."""
    costs = S.Costs(f=1.0, b=1.0, w=1.0, comm=0.1)
    sched = generate(name, 4, 8, costs=costs)
    sc = costs.resolve(4, sched.chunks_per_rank, sched.placement, 8)
    lowered = lower(sched, recv_policy=policy)
    assert _spans(run_p2p(lowered, sc, recv_stall=1.0)) == _spans(run_p2p(lowered, sc))
    run = run_p2p(lowered, sc, recv_stall=2.0)
    stages = [[S.stage_of(sched.placement, 4, r, op.chunk) for op, _, _ in spans] for r, spans in enumerate(run.spans)]
    for r, (spans, st) in enumerate(zip(run.spans, stages)):
        assert [op for op, _, _ in spans] == list(sched.ranks[r])
        for (op, start, end), stage in zip(spans, st):
            d = sc.duration(op.kind, stage, op.mb)
            assert end - start == pytest.approx(d) or end - start == pytest.approx(2.0 * d), (op, start, end)


def test_a_factor_below_one_is_refused():
    sched = generate("1f1b", 2, 2)
    with pytest.raises(ScheduleError, match="at least 1"):
        run_p2p(lower(sched), S.UNIT.resolve(2, 1, sched.placement, 2), recv_stall=0.5)


def test_the_cli_option_reaches_simulate_and_compare_and_a_bad_value_is_one_sentence(capsys):
    """--rocm-recv-stall [FACTOR]: simulate's lowered makespan is run_p2p's with the factor (1.3
    when none is given); compare's JSON says the factor; below 1 exits 2 in one line."""
    argv = ["simulate", "--schedule", "1f1b", "--pp", "2", "-m", "3", "--json", "--rocm-recv-stall", "1.5"]
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["lowered_makespan"] == 14
    assert cli.main(argv[:-1] + ["--recv-policy", "just-in-time"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lowered_makespan"] == 12 and data["rocm_recv_stall"] == cli.ROCM_RECV_STALL
    assert cli.main(["compare", "--pp", "2", "-m", "3", "--json", "--time-limit", "1", "--rocm-recv-stall"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rocm_recv_stall"] == cli.ROCM_RECV_STALL
    row = next(r for r in data["schedules"] if r["name"] == "1f1b")
    sched = generate("1f1b", 2, 3)
    want = run_p2p(S.validate(sched), S.UNIT.resolve(2, 1, sched.placement, 3), recv_stall=cli.ROCM_RECV_STALL)
    assert row["lowered_makespan"] == pytest.approx(want.makespan)
    assert cli.main(argv[:-1] + ["0.9"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--rocm-recv-stall" in err and "Traceback" not in err, err


def test_an_emulated_wait_under_a_pending_receive_is_charged_the_stall():
    """The emulated lanes' model (emulation/chunks.py): on 2 gloo ranks, rank 0's strict queue
    holds a receive that rank 1 sends only after rank 0's waits (a barrier orders it, whatever
    the ranks' speeds). A wait with stall 2 is charged twice its time, one with no stall its
    time; once the receive has completed, nothing is pending and the stalled kind is not charged.
    Charged seconds are compared, not clock readings."""
    import pipeline_harness as H

    out = H.run_ranks({"body": H.recv_stall_body, "pp": 2, "stall": 2.0}, 2, timeout_s=120)[0]
    assert out["pending"] == 1 and out["after"] == 0
    assert out["stalled"] == [("F", 0.02), ("B", 0.01)] and out["plain"] == [("F", 0.01)]
    assert out["count"] == 1


def test_emulate_refuses_the_stall_with_plain_p2p_in_one_sentence(capsys):
    """Only the strict queue knows which receives are pending, so plain gloo p2p cannot charge the
    stall: refused before any rank starts, exit 2, one line naming both options."""
    argv = ["emulate", "--schedule", "zb-h1", "--pp", "2", "-m", "4", "--p2p-mode", "plain", "--rocm-recv-stall"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--rocm-recv-stall" in err and "--p2p-mode" in err, err
    assert "Traceback" not in err
