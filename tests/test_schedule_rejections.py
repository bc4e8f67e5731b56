"""Rejections: broken orders, broken channels and bad inputs raise ScheduleError naming what is wrong."""
from __future__ import annotations

import re

import pytest

from primus_megatron.schedules import (Batch, Costs, Lowered, Op, Recv, ScheduleError, Send, UNIT, generate, lower, names,
                                       simulate, validate)
from primus_megatron.schedules.p2p_groups import ONE, PER_DIRECTION
from primus_megatron.schedules.rendezvous import EAGER, LAZY
from primus_megatron.schedules.simulation import end_times
from primus_megatron.schedules.ir import B, BW, F, W
from primus_megatron.schedules.validation import check_channels, check_memory

from schedule_oracles import hoisted_lowering, unbatched


def one_sentence(msg: str) -> bool:
    return bool(msg.strip()) and "\n" not in msg and not re.search(r"[.!?]\s+[A-Z]", msg)


def rejects(fn, *args, match: list[str], **kw) -> str:
    with pytest.raises(ScheduleError) as exc:
        fn(*args, **kw)
    msg = str(exc.value)
    assert one_sentence(msg), msg
    for part in match:
        assert part in msg, f"{part!r} not in {msg!r}"
    return msg


def move_before(ops, what: Op, anchor: Op) -> list:
    ops = list(ops)
    ops.remove(what)
    ops.insert(ops.index(anchor), what)
    return ops


# (a) cross-rank deadlocks -------------------------------------------------------------------

@pytest.mark.parametrize("name,bkind", [("zb-h1", B), ("1f1b", BW)])
@pytest.mark.parametrize("p,m", [(2, 2), (4, 8)])
def test_cross_rank_deadlock_names_rank_op_and_wait(name, bkind, p, m):
    """On rank p-2, run the backward of microbatch j before its own forward of j: the backward
    waits for rank p-1's gradient, which waits for rank p-1's forward of j, which waits for the
    very forward rank p-2 has not run yet. A wait cycle across two ranks."""
    sched = generate(name, p, m)
    r, j = p - 2, m - 1
    ranks = [list(x) for x in sched.ranks]
    ranks[r] = move_before(ranks[r], Op(bkind, j), Op(F, j))
    broken = sched.with_ranks(ranks)
    msg = rejects(validate, broken, match=[
        f"rank {r} op {bkind}{j} waits for the input gradient of microbatch {j} at stage {r + 1} (rank {r + 1})",
        f"rank {r + 1} op F{j} waits for the forward of microbatch {j} at stage {r} (rank {r})",
    ])
    assert "deadlock" in msg or "hang" in msg


def test_same_rank_w_before_b():
    sched = generate("zb-h1", 3, 4)
    ranks = [list(x) for x in sched.ranks]
    ranks[1] = move_before(ranks[1], Op(W, 0), Op(B, 0))  # the first W: the W order stays right
    rejects(validate, sched.with_ranks(ranks), match=["rank 1", "W0", "input gradient of microbatch 0 at stage 1"])


# (b) p2p: fine for the compute DAG, wrong under NCCL/RCCL's queue semantics ---------------------

def _lowered_1f1b():
    """1F1B at pp=2, lowered and its batches opened into lone sends and receives (which pass too)."""
    sched = generate("1f1b", 2, 2)
    low = unbatched(lower(sched))
    check_channels(low)  # the unmodified lowering, unbatched, passes
    return sched, [list(x) for x in low.ranks]


def _find(items, cls, kind, mb):
    return next(x for x in items if isinstance(x, cls) and x.msg.kind == kind and x.msg.mb == mb)


def test_channels_reject_receives_out_of_send_order():
    sched, ranks = _lowered_1f1b()
    r0 = _find(ranks[1], Recv, F, 0)
    r1 = _find(ranks[1], Recv, F, 1)
    ranks[1].remove(r1)
    ranks[1].insert(ranks[1].index(r0), r1)  # rank 1 posts mb1's receive first; rank 0 sends mb0 first
    rejects(check_channels, Lowered(sched, tuple(map(tuple, ranks))), match=[
        "rank 1's next receive from rank 0 is activation mb1 stage 0->1",
        "next send to it is activation mb0 stage 0->1", "order",
    ])


def test_channels_reject_crossing_sends():
    """Rank 1 posts its gradient send for mb0 before its receive for mb1, while rank 0 posts its
    activation send for mb1 before its receive of that gradient: each queue's head is a send
    whose receive sits behind the other's, a two-rank wait cycle (gloo would buffer both)."""
    sched, ranks = _lowered_1f1b()
    recv1 = _find(ranks[1], Recv, F, 1)
    send_g0 = _find(ranks[1], Send, B, 0)
    ranks[1].remove(recv1)
    ranks[1].insert(ranks[1].index(send_g0) + 1, recv1)
    msg = rejects(check_channels, Lowered(sched, tuple(map(tuple, ranks))), match=[
        "can hang under NCCL/RCCL with eager communicator init", "wait-for cycle 0 -> 1 -> 0",
        "rank 0 at 'send activation mb1 stage 0->1 to rank 1' (the head of its p2p queue; its host waits at op BW0) "
        "waits for rank 1, "
        "whose 'recv activation mb1 stage 0->1 from rank 0' is queued behind 'send gradient mb0 stage 1->0 to rank 0'",
        "rank 1 at 'send gradient mb0 stage 1->0 to rank 0' (the head of its p2p queue; its host waits at op F1) "
        "waits for rank 0, whose 'recv gradient mb0 stage 1->0 from rank 1' is queued behind "
        "'send activation mb1 stage 0->1 to rank 1'",
    ])
    # with a group per direction (--pipeline-p2p-groups per-direction) the two sends go on different
    # queues (0 -> 1 on the pipeline's group, 1 -> 0 on the other), so the same order passes both modes
    crossing = Lowered(sched, tuple(map(tuple, ranks)), PER_DIRECTION)
    check_channels(crossing, modes=(EAGER,))
    check_channels(crossing, modes=(LAZY,))
    # batched together, the same two postings progress together and nothing hangs (eager init: under
    # lazy init rank 1's only batch would wait for rank 0 to create the group's communicator too)
    ranks[1][ranks[1].index(send_g0):ranks[1].index(send_g0) + 2] = [Batch((send_g0, recv1))]
    check_channels(Lowered(sched, tuple(map(tuple, ranks))), modes=(EAGER,))
    assert msg


def test_channels_per_direction_name_the_group_a_hang_waits_on():
    """Rank 0 sends its activations only after B0, which needs the gradient that rank 1 makes from
    mb0's: a wait cycle under either layout; with a group per direction the hop names the queue
    (the receive of the gradient, sent towards a lower rank, is on the second group)."""
    sched, ranks = _lowered_1f1b()
    sends = [_find(ranks[0], Send, F, mb) for mb in (0, 1)]
    for send in sends:
        ranks[0].remove(send)
    at = ranks[0].index(next(x for x in ranks[0] if isinstance(x, Op) and x.kind != F)) + 1
    ranks[0][at:at] = sends
    for layout in (ONE, PER_DIRECTION):
        msg = rejects(check_channels, Lowered(sched, tuple(map(tuple, ranks)), layout), match=[
            "wait-for cycle 0 -> 1 -> 0", "rank 1 at 'recv activation mb0 stage 0->1 from rank 0'",
            "which has not posted 'send activation mb0 stage 0->1 to rank 1'"])
        assert ("on the towards-lower-ranks group" in msg) == (layout == PER_DIRECTION), msg


def test_channels_reject_missing_receive_and_unmatched_send():
    sched, ranks = _lowered_1f1b()
    no_recv = [list(x) for x in ranks]
    no_recv[1].remove(_find(no_recv[1], Recv, F, 1))
    rejects(check_channels, Lowered(sched, tuple(map(tuple, no_recv))),
            match=["rank 1 op F1 needs activation mb1 stage 0->1", "no receive"])
    extra = [list(x) for x in ranks]
    extra[0].append(Send(_find(ranks[0], Send, F, 1).msg, 1))  # sent twice, received once
    rejects(check_channels, Lowered(sched, tuple(map(tuple, extra))),
            match=["rank 0 sends activation mb1 stage 0->1 twice"])
    early = [list(x) for x in ranks]  # a send before the op that makes its message
    send1 = _find(early[0], Send, F, 1)
    early[0].remove(send1)
    early[0].insert(0, send1)
    rejects(check_channels, Lowered(sched, tuple(map(tuple, early))),
            match=["rank 0 posts 'send activation mb1 stage 0->1 to rank 1' before any op of that rank makes it"])
    lost = [list(x) for x in ranks]  # a receive nobody sends
    lost[0].remove(_find(lost[0], Send, F, 1))
    rejects(check_channels, Lowered(sched, tuple(map(tuple, lost))),
            match=["rank 1 posts 'recv activation mb1 stage 0->1 from rank 0', which is never matched",
                   "rank 0 sends 1 messages to rank 1, which receives 2 from it"])


def test_hoisted_receives_hang_interleaved_at_pp4():
    """The lowering before issue #28 (per-pair channels, each receive as early as its own pair
    allows) posts on rank 0 the four receives from rank 3 before F0: under NCCL/RCCL's one
    queue per rank that is a wait cycle through every rank, under either init mode."""
    sched = generate("interleaved-1f1b", 4, 8)
    low = hoisted_lowering(sched, end_times(sched, UNIT.resolve(4, 2, sched.placement)))
    head = [str(x) for x in low.ranks[0][:5]]
    assert head == [f"recv activation mb{j} stage 3->4 from rank 3" for j in range(4)] + ["F0"]
    rejects(check_channels, low, match=[
        "eager communicator init", "wait-for cycle 0 -> 3 -> 2 -> 1 -> 0",
        "rank 0 at 'recv activation mb0 stage 3->4 from rank 3' (the head of its p2p queue; its host waits at op F0.1) "
        "waits for rank 3, which has not posted 'send activation mb0 stage 3->4 to rank 0': it waits at op F0 for "
        "activation mb0 stage 2->3",
        "rank 1 at 'recv activation mb0 stage 0->1 from rank 0' (the head of its p2p queue; its host waits at op F0) "
        "waits for rank 0, whose 'send activation mb0 stage 0->1 to rank 1' is queued behind "
        "'recv activation mb0 stage 3->4 from rank 3'",
    ])
    rejects(check_channels, low, modes=(LAZY,), match=[
        "lazy communicator init", "wait-for cycle 0 -> 3 -> 2 -> 1 -> 0",
        "rank 0 at 'recv activation mb0 stage 3->4 from rank 3', its first contact with rank 3",
    ])
    check_channels(lower(sched))  # today's lowering of the same schedule passes both


def test_lazy_init_group_creation_needs_every_rank():
    """Under lazy init a rank's first batch creates the group's communicator with every rank:
    a rank that posts only lone items never joins, so the others wait in their first batch
    while it waits for their sends. Eager init has the communicator already."""
    sched = generate("1f1b", 2, 4)
    low = lower(sched)
    mixed = Lowered(sched, (low.ranks[0], unbatched(low).ranks[1]))
    check_channels(mixed, modes=(EAGER,))
    rejects(check_channels, mixed, match=[
        "lazy communicator init", "wait-for cycle 0 -> 1 -> 0",
        "rank 0 at its first batch (lazy init creates the group's communicator there, with every rank) waits for "
        "rank 1, which has not posted its first batch",
    ])


# (c) completeness and memory ---------------------------------------------------------------

def test_missing_w():
    sched = generate("zb-h1", 2, 3)
    ranks = [list(x) for x in sched.ranks]
    ranks[0].remove(Op(W, 1))
    rejects(validate, sched.with_ranks(ranks), match=["rank 0", "microbatch 1 at stage 0", "runs B"])


def test_missing_f():
    sched = generate("zbv", 2, 3)
    ranks = [list(x) for x in sched.ranks]
    ranks[1].remove(Op(F, 2, 1))
    rejects(validate, sched.with_ranks(ranks), match=["rank 1 has no F for microbatch 2 at stage 2"])


def test_duplicate_op():
    sched = generate("1f1b", 3, 3)
    ranks = [list(x) for x in sched.ranks]
    ranks[2].append(Op(BW, 0))
    rejects(validate, sched.with_ranks(ranks), match=["rank 2 runs BW of microbatch 0 at stage 2 2 times"])


def test_mixed_bw_and_split_backward():
    sched = generate("zb-h1", 2, 2)
    ranks = [list(x) for x in sched.ranks]
    ranks[1].append(Op(BW, 0))
    rejects(validate, sched.with_ranks(ranks), match=["rank 1", "microbatch 0 at stage 1", "B, BW, W"])


def test_out_of_range_ops():
    sched = generate("zb-h1", 2, 2)
    for bad, part in [(Op(F, 2), "microbatch 2"), (Op(F, 0, 1), "chunk 1"), (Op("X", 0), "not a compute op")]:
        ranks = [list(x) for x in sched.ranks]
        ranks[0].append(bad)
        rejects(validate, sched.with_ranks(ranks), match=["rank 0", part])


@pytest.mark.parametrize("name,p,m", [("zb-h1", 4, 8), ("1f1b", 3, 6), ("zb-h2", 3, 9), ("zbv", 4, 8)])
def test_memory_above_limit(name, p, m):
    sched = generate(name, p, m)
    peaks = check_memory(sched, None, None)
    top = max(peaks)
    rank = peaks.index(top)
    validate(sched, memory_limit=top)  # exactly at the peak is fine
    rejects(validate, sched, memory_limit=top - 0.5,
            match=[f"needs {top:g} activation units on rank {rank}", f"memory limit of {top - 0.5:g}"])
    rejects(generate, name, p, m, memory_limit=top - 0.5, match=["memory limit"])


# (d) bad inputs to generate ----------------------------------------------------------------

@pytest.mark.parametrize("bad,suggest", [("zbv1", "zbv"), ("zb_h1", "zb-h1"), ("1f1b-interleaved", "interleaved-1f1b"),
                                         ("zerobuble", "zerobubble")])
def test_unknown_name_suggests(bad, suggest):
    rejects(generate, bad, 4, 8, match=[f"unknown pipeline schedule {bad!r}", f"did you mean {suggest!r}", "zb-h2"])


def test_unknown_name_without_close_match_lists_choices():
    msg = rejects(generate, "qwertyuiop", 4, 8, match=["unknown pipeline schedule", "1f1b", "zbv"])
    assert "did you mean" not in msg


@pytest.mark.parametrize("pp,part", [(1, "pipeline size (pp) must be >= 2, got 1"), (0, "pp"), (-3, "pp"),
                                     (True, "pipeline size (pp) must be an integer"), (4.0, "integer"), ("4", "integer")])
def test_bad_pp(pp, part):
    rejects(generate, "zb-h1", pp, 8, match=[part])


@pytest.mark.parametrize("m,part", [(0, "microbatches must be >= 1, got 0"), (-1, ">= 1"),
                                    (True, "microbatches must be an integer"), (False, "integer"), (2.0, "integer"),
                                    (None, "integer")])
def test_bad_microbatches(m, part):
    rejects(generate, "zbv", 4, m, match=[part])


@pytest.mark.parametrize("field", ["f", "b", "w", "comm", "mem_f"])
def test_negative_cost(field):
    rejects(Costs, **{field: -1.0}, match=[f"cost-{field.replace('_', '-')} must be >= 0"])
    rejects(Costs, **{field: [1.0, -0.5]}, match=[f"cost-{field.replace('_', '-')}"])


@pytest.mark.parametrize("value", [float("nan"), float("inf"), [], "1", [1.0, None]])
def test_non_finite_or_non_numeric_cost(value):
    rejects(Costs, f=value, match=["cost-f must be a finite number"])


@pytest.mark.parametrize("limit", [0, 0.0, -1, -0.5, float("nan"), True, "4"])
def test_bad_memory_limit(limit):
    rejects(generate, "zb-auto", 4, 8, memory_limit=limit, match=["memory limit must be a positive number"])


@pytest.mark.parametrize("limit", [0.5, 0.999])
def test_zb_auto_limit_below_one_microbatch(limit):
    rejects(generate, "zb-auto", 4, 8, memory_limit=limit, match=[f"memory limit {limit:g}", "one microbatch"])
    # the unit is the largest per-stage F delta: with mem-f 2 a limit of 1.5 is too small too
    costs = Costs(mem_f=2.0, mem_w=-2.0)
    rejects(generate, "zb-auto", 4, 8, costs=costs, memory_limit=1.5, match=["memory limit 1.5", "one microbatch"])


@pytest.mark.parametrize("name,chunks,part", [("zbv", 3, "exactly 2 chunk"), ("zbv", 1, "exactly 2"),
                                              ("v-half", 4, "exactly 2"), ("zb-h1", 2, "exactly 1"),
                                              ("1f1b", 2, "exactly 1"), ("interleaved-1f1b", 1, ">= 2"),
                                              ("interleaved-1f1b", 2.0, "integer"), ("interleaved-1f1b", True, "integer")])
def test_wrong_chunks(name, chunks, part):
    rejects(generate, name, 4, 8, chunks=chunks, match=[name, part])


def test_interleaved_accepts_any_chunks_at_least_two():
    for v in (2, 3, 5):
        assert generate("interleaved-1f1b", 3, 7, chunks=v).chunks_per_rank == v


@pytest.mark.parametrize("name,n,part", [("zb-h1", 3, "must have 4 entries, got 3"), ("zb-h1", 8, "must have 4 entries"),
                                         ("zbv", 5, "4 (per rank) or 8 (per stage) entries, got 5"),
                                         ("interleaved-1f1b", 6, "4 (per rank) or 8 (per stage)")])
def test_cost_list_wrong_length(name, n, part):
    for field in ("f", "b", "w", "comm"):
        rejects(generate, name, 4, 8, costs=Costs(**{field: [1.0] * n}), match=[f"cost-{field}", part])


def test_memory_deltas_must_sum_to_zero():
    rejects(generate, "zb-h1", 4, 8, costs=Costs(mem_f=1.0, mem_b=0.0, mem_w=-0.5),
            match=["cost-mem-f + cost-mem-b + cost-mem-w must sum to 0", "0.5"])
    rejects(generate, "zbv", 2, 4, costs=Costs(mem_f=[1.0, 2.0], mem_w=-1.0), match=["must sum to 0", "stage"])
    # and a balanced split is fine
    generate("zb-h1", 4, 8, costs=Costs(mem_f=1.0, mem_b=-0.25, mem_w=-0.75))


def test_validate_uses_the_schedules_own_costs():
    """A schedule built with its own memory model (here 2 units per activation) carries it in
    `meta`; simulate() uses it, so validate(memory_limit=...) must too, not unit memory."""
    costs = Costs(mem_f=2.0, mem_w=-2.0)
    sched = generate("zb-h1", 4, 8, costs=costs)
    peak = simulate(sched).max_peak_memory
    assert peak == pytest.approx(2.0 * 4)  # rank 0 holds p activations of 2 units
    rejects(validate, sched, memory_limit=4, match=[f"needs {peak:g} activation units on rank 0"])


@pytest.mark.parametrize("name", [n for n in names() if n != "zb-optimal"])
def test_infinite_memory_limit_is_no_limit_or_a_clean_error(name):
    """generate() accepts memory_limit=inf (it is > 0); a generator must then behave as without a
    limit or raise ScheduleError, never another exception."""
    try:
        sched = generate(name, 4, 8, memory_limit=float("inf"))
    except ScheduleError as exc:
        assert one_sentence(str(exc))
        return
    validate(sched)


# (d) each chunk's W ops in microbatch order (TransformerEngine's first-microbatch overwrite) ----

from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from primus_megatron.schedules import info  # noqa: E402
from primus_megatron.schedules.validation import check_w_order  # noqa: E402

W_SCHEDULES = [n for n in names() if not info(n).needs_extra and generate(n, 2, 4).splits_backward]


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_swapping_two_w_ops_of_one_chunk_is_refused(data):
    """Every registered schedule with W ops keeps each chunk's W ops in microbatch order on
    every rank; swapping any two W ops of one chunk on one rank (a user-written schedule)
    is refused by validate(), naming the rank, the chunk and the two microbatches."""
    name = data.draw(st.sampled_from(W_SCHEDULES), label="schedule")
    pp = data.draw(st.integers(2, 6), label="pp")
    m = data.draw(st.integers(2, 3 * pp), label="microbatches")
    sched = generate(name, pp, m)
    check_w_order(sched)  # the registered schedule complies (validate() ran it too)
    # a (rank, chunk) with two W ops at least (dualpipev runs some backward ops whole, as BW)
    held = [(r, c) for r in range(pp) for c in range(sched.chunks_per_rank)
            if sum(op.kind == W and op.chunk == c for op in sched.ranks[r]) >= 2]
    assume(held)
    rank, chunk = data.draw(st.sampled_from(held), label="rank, chunk")
    ops = list(sched.ranks[rank])
    ws = [i for i, op in enumerate(ops) if op.kind == W and op.chunk == chunk]
    i, j = sorted(data.draw(st.lists(st.sampled_from(ws), min_size=2, max_size=2, unique=True), label="swap"))
    ops[i], ops[j] = ops[j], ops[i]
    ranks = [list(x) for x in sched.ranks]
    ranks[rank] = ops
    later, earlier = ops[i].mb, ops[j].mb
    rejects(validate, sched.with_ranks(ranks),
            match=[f"rank {rank} ", f"W of microbatch {later} before the W of microbatch {earlier} on chunk {chunk} "])


def test_w_order_holds_for_user_written_schedules_too():
    """A hand-written zb-h1-like order for pp=2, m=2 with W1 before W0 on rank 1 (its
    dependencies are all satisfiable: only the W order is wrong)."""
    from primus_megatron.schedules import Schedule

    ranks = [[Op(F, 0), Op(F, 1), Op(B, 0), Op(B, 1), Op(W, 0), Op(W, 1)],
             [Op(F, 0), Op(B, 0), Op(F, 1), Op(B, 1), Op(W, 1), Op(W, 0)]]
    good = Schedule(name="hand", pp=2, microbatches=2, chunks_per_rank=1, placement="loop",
                    ranks=tuple(tuple(r) for r in [ranks[0], ranks[1][:4] + [Op(W, 0), Op(W, 1)]]))
    validate(good)
    bad = good.with_ranks(ranks)
    rejects(validate, bad, match=["rank 1 ", "W of microbatch 1 before the W of microbatch 0 on chunk 0 (stage 1)"])


# (f) every bad input of the planner is a ScheduleError (errors.py) ------------------------------

def test_block_slots_missing_an_ops_input_are_refused_naming_both():
    from primus_megatron.schedules.blocks import compact, repeat, v_min_block

    pp, m = 2, 3
    slots = repeat(pp, m, v_min_block(pp))
    sc = UNIT.resolve(pp, 2, "v")
    del slots[(F, 1, 0)]  # F of microbatch 1 at stage 0 (stage 1's F of microbatch 1 needs it)
    rejects(compact, pp, slots, sc, match=["block slots place F of microbatch 1 at stage 1 but not F of microbatch 1 "
                                           "at stage 0"])
    slots = repeat(pp, m, v_min_block(pp))
    for stage in range(2 * pp):  # microbatch 0 gone entirely: microbatch 1 follows it
        for kind in (F, B, W):
            del slots[(kind, 0, stage)]
    rejects(compact, pp, slots, sc, match=["but not F of microbatch 0 at stage 0, which it follows"])


def test_an_unknown_op_kind_in_the_dependency_rule_is_refused():
    from primus_megatron.schedules.deps import input_of

    rejects(input_of, "X", 0, 4, match=["op kind must be one of F, B, W, BW, got 'X'"])


def test_bad_profile_files_and_plot_names_are_refused(tmp_path):
    from primus_megatron.schedules.balance import load_profile
    from primus_megatron.schedules.plot import plot_format, render_timeline

    rejects(load_profile, str(tmp_path / "missing.json"), match=["missing.json' does not exist"])
    (tmp_path / "bad.json").write_text("{}")
    rejects(load_profile, str(tmp_path / "bad.json"), match=["is not a primus-pipeline-profile/1 file"])
    rejects(plot_format, "timeline.txt", match=["must end in .png or .svg, got '.txt'"])
    rejects(render_timeline, simulate(generate("1f1b", 2, 2)), "gif", match=["plot format must be one of png, svg"])
