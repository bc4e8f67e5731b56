"""The planner's fast algorithms agree with their reference forms (`schedule_oracles.py`)
on random valid and invalid schedules: the same numbers, and the same error messages."""
from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from primus_megatron.schedules import Costs, Lowered, Op, Recv, Schedule, ScheduleError, Send, lower
from primus_megatron.schedules.ir import B, BW, F, LOOP, V, W
from primus_megatron.schedules.simulation import op_times, peak_memory
from primus_megatron.schedules.validation import check_channels, check_complete

from schedule_oracles import (check_channels_reference, check_complete_reference, peak_memory_reference, topological_ranks,
                              simulate_reference)

EXAMPLES = 150


@st.composite
def orders(draw, *, broken: bool):
    """A schedule whose per-rank orders follow one random topological sort of the dependency
    graph (so it can run); `broken` then applies a few random edits (swaps, moves, dropped,
    duplicated or changed ops)."""
    pp = draw(st.integers(2, 4), label="pp")
    m = draw(st.integers(1, 4), label="m")
    placement, chunks = draw(st.sampled_from([(LOOP, 1), (LOOP, 2), (LOOP, 3), (V, 2)]), label="layout")
    split = draw(st.booleans(), label="split")
    probe = Schedule("random", pp, m, chunks, placement, tuple(() for _ in range(pp)))
    ranks = topological_ranks(probe, split, lambda n: draw(st.integers(0, n - 1)))
    if broken:
        for _ in range(draw(st.integers(1, 3), label="edits")):
            _edit(draw, ranks, m, chunks)
    return Schedule("random", pp, m, chunks, placement, tuple(map(tuple, ranks)))


def _edit(draw, ranks, m, chunks):
    r = draw(st.integers(0, len(ranks) - 1))
    ops = ranks[r]
    if not ops:
        return
    i = draw(st.integers(0, len(ops) - 1))
    edit = draw(st.sampled_from(["swap", "move", "drop", "dup", "kind", "mb", "chunk"]))
    if edit == "swap" and i + 1 < len(ops):
        ops[i], ops[i + 1] = ops[i + 1], ops[i]
    elif edit == "move":
        ops.insert(draw(st.integers(0, len(ops) - 1)), ops.pop(i))
    elif edit == "drop":
        ops.pop(i)
    elif edit == "dup":
        ops.insert(draw(st.integers(0, len(ops))), ops[i])
    elif edit == "kind":
        ops[i] = ops[i]._replace(kind=draw(st.sampled_from([F, B, W, BW])))
    elif edit == "mb":
        ops[i] = ops[i]._replace(mb=draw(st.integers(0, m - 1)))
    elif edit == "chunk":
        ops[i] = ops[i]._replace(chunk=draw(st.integers(0, chunks - 1)))


@st.composite
def costs(draw, pp: int):
    # 0.3 and 1/3 are not binary fractions: a change in the order of additions shows
    times = st.sampled_from([0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 0.3, 1 / 3])
    per_rank = st.lists(times, min_size=pp, max_size=pp)
    mem_b = draw(st.sampled_from([0.0, 0.5, -0.25]))
    return Costs(f=draw(st.one_of(times, per_rank)), b=draw(st.one_of(times, per_rank)), w=draw(times),
                 comm=draw(st.sampled_from([0.0, 0.1, 0.375])), mem_f=1.0, mem_b=mem_b, mem_w=-1.0 - mem_b)


def outcome(fn, *args):
    try:
        return "ok", fn(*args)
    except ScheduleError as exc:
        return "error", str(exc)


def timeline(sched, sc):
    return [[(s.op, s.stage, s.start, s.end) for s in row] for row in op_times(sched, sc)]


@settings(max_examples=EXAMPLES)
@given(sched=st.one_of(orders(broken=False), orders(broken=True)), data=st.data())
def test_simulation_agrees_with_reference(sched, data):
    """Start and end of every op (bit for bit), or the same deadlock / duplicate message."""
    sc = data.draw(costs(sched.pp)).resolve(sched.pp, sched.chunks_per_rank, sched.placement)
    ours, ref = outcome(timeline, sched, sc), outcome(simulate_reference, sched, sc)
    event(ours[0])
    assert repr(ours) == repr(ref)
    assert repr(peak_memory(sched, sc)) == repr(peak_memory_reference(sched, sc))


@settings(max_examples=EXAMPLES)
@given(sched=st.one_of(orders(broken=False), orders(broken=True)), forward_only=st.booleans())
def test_completeness_agrees_with_reference(sched, forward_only):
    if forward_only:
        sched = sched.with_ranks([[op for op in ops if op.kind == F] for ops in sched.ranks])
        sched.meta["forward_only"] = True
    ours, ref = outcome(check_complete, sched), outcome(check_complete_reference, sched)
    event(ours[0])
    assert ours == ref


def test_completeness_names_malformed_ops_like_the_reference():
    base = Schedule("hand", 2, 2, 1, LOOP, ((Op(F, 0), Op(F, 1), Op(BW, 0), Op(BW, 1)),
                                            (Op(F, 0), Op(BW, 0), Op(F, 1), Op(BW, 1))))
    import numpy as np

    for bad in [Op("X", 0), Op(F, 2), Op(F, -1), Op(F, 0, 1), ("F", 0, 0), "F0", Op(F, 1.0), Op(F, None),
                Op(F, 0, 0.0), Op(F, np.int64(1)), Op(F, True)]:
        sched = base.with_ranks([base.ranks[0] + (bad,), base.ranks[1]])
        ours, ref = outcome(check_complete, sched), outcome(check_complete_reference, sched)
        assert ours == ref and ours[0] == "error", (bad, ours, ref)


@st.composite
def lowered_orders(draw):
    """The lowering of a runnable random order, then a few random edits of its items:
    sends and receives moved, dropped or duplicated, ops moved among them."""
    sched = draw(orders(broken=False))
    low = lower(sched)
    ranks = [list(r) for r in low.ranks]
    for _ in range(draw(st.integers(0, 3), label="edits")):
        r = draw(st.integers(0, len(ranks) - 1))
        items = ranks[r]
        if not items:
            continue
        i = draw(st.integers(0, len(items) - 1))
        edit = draw(st.sampled_from(["move", "drop", "dup", "swap"]))
        if edit == "move":
            items.insert(draw(st.integers(0, len(items) - 1)), items.pop(i))
        elif edit == "drop" and isinstance(items[i], (Send, Recv)):
            items.pop(i)
        elif edit == "dup" and isinstance(items[i], (Send, Recv)):
            items.insert(draw(st.integers(0, len(items))), items[i])
        elif edit == "swap" and i + 1 < len(items):
            items[i], items[i + 1] = items[i + 1], items[i]
    return Lowered(sched, tuple(map(tuple, ranks)))


@settings(max_examples=3 * EXAMPLES)
@given(low=lowered_orders())
def test_rendezvous_agrees_with_reference(low):
    """Passes or fails alike, with the same message (the first problem met, or every rank
    left waiting and what its channels are stuck at)."""
    ours, ref = outcome(check_channels, low), outcome(check_channels_reference, low)
    event(ours[0] if ours[0] == "ok" else ours[1].split(":")[0][:24])
    assert ours == ref


@pytest.mark.parametrize("self_channel", [False, True])
def test_rendezvous_edge_cases_agree(self_channel):
    """A rank posting to itself, and a send with no receive at the end of a rank."""
    low = lower(Schedule("hand", 2, 1, 1, LOOP, ((Op(F, 0), Op(BW, 0)), (Op(F, 0), Op(BW, 0)))))
    ranks = [list(r) for r in low.ranks]
    extra = next(x for x in ranks[0] if isinstance(x, Send))
    ranks[0].append(Send(extra.msg, 0 if self_channel else 1))
    broken = Lowered(low.schedule, tuple(map(tuple, ranks)))
    assert outcome(check_channels, broken) == outcome(check_channels_reference, broken)
    assert outcome(check_channels, broken)[0] == "error"


def test_compiled_form_is_not_reused_for_a_copy_with_other_microbatches():
    """dataclasses.replace shares `meta` (where the compiled form is cached): a copy
    with another microbatch count is compiled afresh, not judged by the original's rows."""
    from dataclasses import replace

    base = Schedule("hand", 2, 2, 1, LOOP, ((Op(F, 0), Op(F, 1), Op(BW, 0), Op(BW, 1)),
                                            (Op(F, 0), Op(BW, 0), Op(F, 1), Op(BW, 1))))
    check_complete(base)
    more = replace(base, microbatches=3)
    assert outcome(check_complete, more) == outcome(check_complete_reference, more)
    assert outcome(check_complete, more)[0] == "error"
    fewer = replace(base, microbatches=1)
    assert outcome(check_complete, fewer)[0] == "error"
