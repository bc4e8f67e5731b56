"""The receive policy (issue 60): just-in-time receives, each right before the op that consumes it.

On ROCm a pending receive stalls unrelated compute (PyTorch #172668), so the lowering can post
each receive just in time instead of as early as the global message order allows. Here: what it
posts, by hand and as a property against the early lowering; that the hoisting loop behind it
(schedules/just_in_time.py, rule 2) mends a lowering that hangs and stops; the bad value named.
The hang proof of both policies for every schedule, pp 2..32, both init modes, is in
test_schedule_nccl_model.py.
"""
from __future__ import annotations

import pytest

from primus_megatron.schedules import Op, Recv, ScheduleError, generate, lower, names, validate
from primus_megatron.schedules import just_in_time
from primus_megatron.schedules.lowering import JUST_IN_TIME, Lowered, _posts, ordering_costs, p2p_ops
from primus_megatron.schedules.rendezvous import EAGER, LAZY, check_channels
from primus_megatron.schedules.simulation import end_times

HEURISTIC = [n for n in names() if n != "zb-optimal"]


def _ops_ahead(lowered: Lowered) -> dict:
    """(rank, message) -> how many compute ops run between a receive's posting and its consumer."""
    out = {}
    for r, items in enumerate(lowered.ranks):
        pending: dict = {}
        for item, io in zip(items, lowered.op_io(r)):
            if io is None:
                pending.update({x.msg: 0 for x in p2p_ops(item) if type(x) is Recv})
                continue
            if io.takes is not None and io.takes in pending:
                out[(r, io.takes)] = pending.pop(io.takes)
            for msg in pending:
                pending[msg] += 1
    return out


def test_1f1b_by_hand():
    """1F1B, pp=2, 3 microbatches, unit costs. Early, rank 1 posts mb1's activation receive
    before F0 (it is sent at 2, before anything rank 1 sends) and rank 0 its last two gradient
    receives before BW1. Just in time, each receive comes right before its consumer; on rank 1
    mb1's activation (sent at t=2) shares a batch with mb0's gradient (sent at 3): received after
    that send, both ranks would be sending to each other with no receive under way."""
    sched = generate("1f1b", 2, 3)
    early = [[str(x) for x in items] for items in lower(sched).ranks]
    assert early[1][:3] == ["batch [recv activation mb0 stage 0->1 from rank 0]",
                            "batch [recv activation mb1 stage 0->1 from rank 0]", "F0"]
    jit = [[str(x) for x in items] for items in lower(sched, recv_policy=JUST_IN_TIME).ranks]
    act = "activation mb{} stage 0->1"
    grad = "gradient mb{} stage 1->0"
    assert jit == [
        ["F0", f"batch [send {act.format(0)} to rank 1]", "F1", f"batch [send {act.format(1)} to rank 1]",
         f"batch [recv {grad.format(0)} from rank 1]", "BW0", "F2", f"batch [send {act.format(2)} to rank 1]",
         f"batch [recv {grad.format(1)} from rank 1]", "BW1", f"batch [recv {grad.format(2)} from rank 1]", "BW2"],
        [f"batch [recv {act.format(0)} from rank 0]", "F0", "BW0",
         f"batch [recv {act.format(1)} from rank 0; send {grad.format(0)} to rank 0]", "F1", "BW1",
         f"batch [recv {act.format(2)} from rank 0; send {grad.format(1)} to rank 0]", "F2", "BW2",
         f"batch [send {grad.format(2)} to rank 0]"]]
    assert set(_ops_ahead(lower(sched, recv_policy=JUST_IN_TIME)).values()) == {0}


@pytest.mark.parametrize("name", HEURISTIC)
def test_just_in_time_posts_no_receive_earlier_than_early_and_most_later(name):
    """Against the early lowering of the same order: the same sends and receives, no receive
    waits ahead of more compute ops than early, and in total fewer (a receive moves ahead only
    to keep the global order with a send, or where the hang check needs it)."""
    for pp, m in [(2, 4), (4, 8), (6, 12)]:
        sched = generate(name, pp, m, validate=False)
        early, jit = validate(sched), validate(sched, recv_policy=JUST_IN_TIME)
        for a, b in zip(early.ranks, jit.ranks):
            assert sorted(map(str, (x for item in a for x in p2p_ops(item)))) == \
                sorted(map(str, (x for item in b for x in p2p_ops(item))))
            assert [x for x in a if isinstance(x, Op)] == [x for x in b if isinstance(x, Op)]
        before, after = _ops_ahead(early), _ops_ahead(jit)
        assert before.keys() == after.keys()
        assert all(after[k] <= before[k] for k in before), (name, pp)
        assert sum(after.values()) < sum(before.values()), (name, pp)


@pytest.mark.parametrize("name", ["1f1b", "interleaved-1f1b", "zbv", "dualpipev"])
def test_the_hoisting_loop_mends_receives_that_hang(name, monkeypatch):
    """Without rule 1's bound every receive sits right before its consumer, and 1F1B-like steady
    states hang (both neighbours send, then receive). Rule 2 alone, from there, hoists receives
    until the hang check passes in both init modes, and leaves receives deferred that it need not move."""
    sched = generate(name, 4, 8, validate=False)
    ends = end_times(sched, ordering_costs(sched))
    ranks = [just_in_time._Rank(sched.ranks[r], sorted(p)) for r, p in enumerate(_posts(sched, ends))]
    pure = Lowered(sched, tuple(rank.items(ends[r]) for r, rank in enumerate(ranks)))
    with pytest.raises(ScheduleError, match="can hang under NCCL/RCCL"):
        check_channels(pure, modes=(EAGER,))
    monkeypatch.setattr(just_in_time, "_before_later_sends", lambda rank: None)
    mended = lower(sched, ends, recv_policy=JUST_IN_TIME)
    check_channels(mended, modes=(EAGER,))
    check_channels(mended, modes=(LAZY,))
    ahead, early = _ops_ahead(mended), _ops_ahead(lower(sched, ends))
    assert any(ahead[k] < early[k] for k in early)  # not everything went back to early


def test_an_unknown_policy_is_named():
    sched = generate("1f1b", 2, 2)
    with pytest.raises(ScheduleError, match="receive policy must be one of early, just-in-time, got 'auto'"):
        lower(sched, recv_policy="auto")
