"""An independent oracle: torch.distributed.pipelining's own schedule checks (no process group),
plus the channel-order properties of our lowering."""
from __future__ import annotations

import copy

import pytest

from primus_megatron.schedules import Batch, Recv, Send, generate, lower, names
from primus_megatron.schedules.ir import B, BW, F, W
from primus_megatron.schedules.lowering import flat_p2p, incoming, outgoing, p2p_ops

ts = pytest.importorskip("torch.distributed.pipelining.schedules", reason="torch is not installed")
CT = ts._ComputationType
KIND = {F: CT.FORWARD, B: CT.BACKWARD_INPUT, W: CT.BACKWARD_WEIGHT, BW: CT.FULL_BACKWARD}

HEURISTIC = [n for n in names() if n != "zb-optimal"]
CASES = [(p, m) for p in (2, 3, 4) for m in range(1, 2 * p + 2)]


def to_torch(sched) -> dict[int, list]:
    return {r: [ts._Action(sched.stage(r, op), KIND[op.kind], op.mb) for op in ops] for r, ops in enumerate(sched.ranks)}


@pytest.mark.parametrize("name", HEURISTIC)
def test_torch_accepts_our_schedules(name):
    for p, m in CASES:
        sched = generate(name, p, m)
        actions = to_torch(sched)
        mapping = ts._validate_schedule(actions, p, sched.num_stages, m)
        assert mapping == {s: sched.owner(s)[0] for s in range(sched.num_stages)}
        stage_to_rank = lambda s, sched=sched: sched.owner(s)[0]  # noqa: E731
        with_comms = ts._add_send_recv(copy.deepcopy(actions), stage_to_rank, sched.num_stages)
        # Every compute action is kept, in order, on its rank.
        for r in range(p):
            compute = [a for a in with_comms[r] if a.computation_type in KIND.values()]
            assert compute == actions[r], (name, p, m, r)
        # torch inserts one send and one recv per cross-rank edge, as our lowering does.
        ours = lower(sched)
        for r in range(p):
            n_send = sum(a.computation_type in (CT.SEND_F, CT.SEND_B) for a in with_comms[r])
            n_recv = sum(a.computation_type in (CT.RECV_F, CT.RECV_B) for a in with_comms[r])
            assert n_send == sum(isinstance(x, Send) for x in flat_p2p(ours.ranks[r]))
            assert n_recv == sum(isinstance(x, Recv) for x in flat_p2p(ours.ranks[r]))


def test_torch_oracle_rejects_a_cross_rank_deadlock():
    """The oracle itself is not vacuous: a 1F1B order whose last rank runs the backward of
    microbatch 1 before its forward of microbatch 0 cannot be given send/recvs."""
    sched = generate("1f1b", 2, 2)
    actions = to_torch(sched)
    # rank 0: F0 F1 ...; make rank 0 wait for B1 (from rank 1) before F1, while rank 1 needs F1 first.
    r0 = actions[0]
    bw1 = next(a for a in r0 if a.computation_type == CT.FULL_BACKWARD and a.microbatch_index == 1)
    f1 = next(a for a in r0 if a.computation_type == CT.FORWARD and a.microbatch_index == 1)
    r0.remove(bw1)
    r0.insert(r0.index(f1), bw1)
    with pytest.raises(AssertionError):
        ts._add_send_recv(copy.deepcopy(actions), lambda s: sched.owner(s)[0], sched.num_stages)


@pytest.mark.parametrize("name", HEURISTIC)
def test_lowering_channels_are_fifo_and_receives_come_first(name):
    for p, m in CASES + [(5, 7), (6, 13)]:
        sched = generate(name, p, m)
        low = lower(sched)
        # Only compute ops, in the same order, survive lowering.
        for r in range(p):
            assert tuple(x for x in low.ranks[r] if not isinstance(x, (Send, Recv, Batch))) == sched.ranks[r]
        for a in range(p):
            for b in range(p):
                if a == b:
                    continue
                sends = [x.msg for x in flat_p2p(low.ranks[a]) if isinstance(x, Send) and x.peer == b]
                recvs = [x.msg for x in flat_p2p(low.ranks[b]) if isinstance(x, Recv) and x.peer == a]
                assert sends == recvs, (name, p, m, a, b)  # same messages, same order on both ends
                assert len(set(sends)) == len(sends)
        for r in range(p):
            items = [x for item in low.ranks[r] for x in (p2p_ops(item) or (item,))]  # batches opened
            posted = set()
            sent = set()
            for i, x in enumerate(items):
                if isinstance(x, Recv):
                    assert x.peer != r and x.msg not in posted
                    posted.add(x.msg)
                elif isinstance(x, Send):
                    assert x.peer != r and x.peer == sched.owner(x.msg.dst_stage)[0]
                    sent.add(x.msg)
                else:
                    msg = incoming(sched, r, x)
                    if msg is not None:
                        assert msg in posted, f"{name} p={p} m={m}: rank {r} runs {x} before receiving {msg}"
                    out = outgoing(sched, r, x)
                    if out is not None:
                        # the send comes after the op that produces it (next items on the rank)
                        assert out not in sent
                        rest = items[i + 1:]
                        assert Send(out, sched.owner(out.dst_stage)[0]) in rest
            # every cross-rank edge is covered exactly once
            need = {incoming(sched, r, op) for op in sched.ranks[r]} - {None}
            give = {outgoing(sched, r, op) for op in sched.ranks[r]} - {None}
            assert posted == need and sent == give


# Differential tests on arbitrary orders (not only the generators' ones) ------------------------

from hypothesis import event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from primus_megatron.schedules import Op, Schedule, ScheduleError, validate  # noqa: E402
from primus_megatron.schedules.validation import check_w_order  # noqa: E402
from primus_megatron.schedules.ir import LOOP, V  # noqa: E402
from schedule_oracles import topological_ranks  # noqa: E402


@st.composite
def random_orders(draw):
    """A schedule whose per-rank orders come from one random topological sort of the dependency
    graph (so it can run), then optionally a few swaps of neighbours on one rank (so it may not).
    Per (mb, stage) F comes before B before W on its rank either way."""
    pp = draw(st.integers(2, 4), label="pp")
    m = draw(st.integers(1, 5), label="m")
    placement, chunks = draw(st.sampled_from([(LOOP, 1), (LOOP, 2), (V, 2)]), label="layout")
    split = draw(st.booleans(), label="split")
    probe = Schedule("random", pp, m, chunks, placement, tuple(() for _ in range(pp)))
    ranks = topological_ranks(probe, split, lambda n: draw(st.integers(0, n - 1)))
    for _ in range(draw(st.integers(0, 3), label="swaps")):
        r = draw(st.integers(0, pp - 1))
        i = draw(st.integers(0, len(ranks[r]) - 2))
        a, b = ranks[r][i], ranks[r][i + 1]
        if (a.mb, a.chunk) != (b.mb, b.chunk):  # keep each (mb, stage)'s own F, B, W order
            ranks[r][i], ranks[r][i + 1] = b, a
    return Schedule("random", pp, m, chunks, placement, tuple(map(tuple, ranks)))


def _runs(sched) -> tuple:
    """validate() without its W-order rule: (runs, message)."""
    from primus_megatron.schedules.costs import UNIT
    from primus_megatron.schedules.simulation import end_times
    from primus_megatron.schedules.validation import check_channels

    try:
        check_channels(lower(sched, end_times(sched, UNIT.resolve(sched.pp, sched.chunks_per_rank, sched.placement))))
        return True, ""
    except ScheduleError as exc:
        return False, str(exc)


@settings(max_examples=60)
@given(sched=random_orders())
def test_validate_agrees_with_torch_on_arbitrary_orders(sched):
    """Our validator (incl. the lowering and the rendezvous check) accepts exactly the orders
    torch can add send/recvs to: any order that can run lowers to hang-free channels."""
    actions = to_torch(sched)
    ts._validate_schedule(actions, sched.pp, sched.num_stages, sched.microbatches)
    try:
        ts._add_send_recv(copy.deepcopy(actions), lambda s: sched.owner(s)[0], sched.num_stages)
        torch_ok = True
    except AssertionError:
        torch_ok = False
    try:
        validate(sched)
        ours_ok, msg = True, ""
    except ScheduleError as exc:
        ours_ok, msg = False, str(exc)
    try:
        check_w_order(sched)
    except ScheduleError as exc:  # validate() refuses it for TE's sake; torch only asks whether it runs
        assert not ours_ok and msg == str(exc), msg
        ours_ok, msg = _runs(sched)
    event(f"runs: {ours_ok}")
    assert ours_ok == torch_ok, msg
    if not ours_ok:
        assert "rank" in msg and "waits for" in msg
