"""The planner's fast algorithms agree with their reference forms (`schedule_oracles.py`)
on random valid and invalid schedules: the same numbers, and the same error messages."""
from __future__ import annotations

import re

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from primus_megatron.schedules import Batch, Costs, Lowered, Op, Recv, Schedule, ScheduleError, Send, lower
from primus_megatron.schedules.lowering import incoming, p2p_ops
from primus_megatron.schedules.rendezvous import EAGER, LAZY
from primus_megatron.schedules.ir import B, BW, F, LOOP, V, W
from primus_megatron.schedules.simulation import op_times, peak_memory
from primus_megatron.schedules.validation import check_channels, check_complete

from schedule_oracles import (check_complete_reference, p2p_reference, peak_memory_reference, simulate_reference,
                              topological_ranks, unbatched)

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
    """The lowering of a runnable random order (its batches kept, or opened into lone items),
    then a few random edits of its items: postings moved, dropped, duplicated, merged into
    one batch or split, ops moved among them."""
    sched = draw(orders(broken=False))
    low = lower(sched)
    if draw(st.booleans(), label="unbatched"):
        low = unbatched(low)
    ranks = [list(r) for r in low.ranks]
    for _ in range(draw(st.integers(0, 3), label="edits")):
        r = draw(st.integers(0, len(ranks) - 1))
        items = ranks[r]
        if not items:
            continue
        i = draw(st.integers(0, len(items) - 1))
        edit = draw(st.sampled_from(["move", "drop", "dup", "swap", "merge", "split"]))
        posting = isinstance(items[i], (Send, Recv, Batch))
        if edit == "move":
            items.insert(draw(st.integers(0, len(items) - 1)), items.pop(i))
        elif edit == "drop" and posting:
            items.pop(i)
        elif edit == "dup" and posting:
            items.insert(draw(st.integers(0, len(items))), items[i])
        elif edit == "swap" and i + 1 < len(items):
            items[i], items[i + 1] = items[i + 1], items[i]
        elif edit == "merge" and posting and i + 1 < len(items) and isinstance(items[i + 1], (Send, Recv, Batch)):
            items[i:i + 2] = [Batch(p2p_ops(items[i]) + p2p_ops(items[i + 1]))]
        elif edit == "split" and isinstance(items[i], Batch):
            items[i:i + 1] = list(items[i].items)
    return Lowered(sched, tuple(map(tuple, ranks)))


@st.composite
def placed_orders(draw):
    """A runnable random order whose receives are posted at random places that need no
    run to rule out: each before its op, each pair's receives in the order of its sends
    (right after their ops); adjacent postings sometimes merged into a batch. Many hang."""
    sched = draw(orders(broken=False))
    low = unbatched(lower(sched))
    ops = [[x for x in items if isinstance(x, Op)] for items in low.ranks]
    sends = [[x for x in items if isinstance(x, Send)] for items in low.ranks]
    placed = []
    for r, items in enumerate(low.ranks):
        slots: dict[int, list] = {}  # op position -> postings right before it (len(ops): at the end)
        pos = 0
        for x in items:  # sends stay right after their ops
            if isinstance(x, Op):
                pos += 1
            elif isinstance(x, Send):
                slots.setdefault(pos, []).append(x)
        consumer = {incoming(sched, r, op): i for i, op in enumerate(ops[r])}
        for peer in range(sched.pp):
            order = [x.msg for x in sends[peer] if x.peer == r]
            latest = [consumer[msg] for msg in order]
            for k in range(len(order) - 2, -1, -1):  # before its own op and every later receive's op
                latest[k] = min(latest[k], latest[k + 1])
            at, late = 0, draw(st.booleans())
            for msg, last in zip(order, latest):  # non-decreasing places keep the pair's FIFO order
                at = last if late else draw(st.integers(at, last))
                slots.setdefault(at, []).append(Recv(msg, peer))
        out = []
        for i in range(len(ops[r]) + 1):
            for x in slots.get(i, []):
                if out and isinstance(out[-1], (Send, Recv, Batch)) and draw(st.booleans()):
                    out[-1] = Batch(p2p_ops(out[-1]) + (x,))
                else:
                    out.append(x)
            if i < len(ops[r]):
                out.append(ops[r][i])
        placed.append(tuple(out))
    return Lowered(sched, tuple(placed))


def _hops(message: str) -> list[int]:
    """The ranks of the wait-for cycle or chain a hang error names, in order."""
    found = re.search(r"wait-for (?:cycle|chain) ([\d >-]+?):", message)
    assert found, message
    return [int(x) for x in found.group(1).split(" -> ")]


def agrees_with_reference(low: Lowered, lazy: bool) -> str:
    """The product's check and the reference agree: both pass, or name the same static
    problem, or both find a hang, where every hop of the product's cycle is a wait the
    reference's stuck state has."""
    mode = LAZY if lazy else EAGER
    ours = outcome(lambda: check_channels(low, modes=(mode,)))
    kind, detail = p2p_reference(low, lazy_init=lazy)
    if kind == "ok":
        assert ours == ("ok", None), ours
    elif kind == "error":
        assert ours == ("error", detail)
    else:
        assert ours[0] == "error" and "can hang under NCCL/RCCL" in ours[1], ours
        hops = _hops(ours[1])
        assert hops[0] in detail, (hops, detail)
        for a, b in zip(hops, hops[1:]):
            assert b in detail[a], (a, b, detail, ours[1])
    return kind


@settings(max_examples=3 * EXAMPLES)
@given(low=lowered_orders(), lazy=st.booleans())
def test_rendezvous_agrees_with_reference(low, lazy):
    """Passes or fails alike: the same static problem, or a hang whose named wait-for cycle
    is made of waits the reference's (differently computed) stuck state has."""
    event(agrees_with_reference(low, lazy))


@settings(max_examples=2 * EXAMPLES)
@given(low=placed_orders(), lazy=st.booleans())
def test_rendezvous_agrees_with_reference_on_placed_receives(low, lazy):
    """The same on orders with nothing wrong but where they post: most pass or hang."""
    kind = agrees_with_reference(low, lazy)
    event(kind)
    assert kind != "error"


@settings(max_examples=EXAMPLES)
@given(low=st.one_of(lowered_orders(), placed_orders()))
def test_lazy_init_only_adds_waits(low):
    """What passes under lazy init passes under eager init (check_channels relies on it)."""
    if outcome(lambda: check_channels(low, modes=(LAZY,)))[0] == "ok":
        assert outcome(lambda: check_channels(low, modes=(EAGER,)))[0] == "ok"


@pytest.mark.parametrize("self_channel", [False, True])
def test_rendezvous_edge_cases_agree(self_channel):
    """A rank posting to itself, and a send with no receive at the end of a rank."""
    low = lower(Schedule("hand", 2, 1, 1, LOOP, ((Op(F, 0), Op(BW, 0)), (Op(F, 0), Op(BW, 0)))))
    ranks = [list(r) for r in low.ranks]
    extra = next(x for item in ranks[0] for x in p2p_ops(item) if isinstance(x, Send))
    ranks[0].append(Send(extra.msg, 0 if self_channel else 1))
    broken = Lowered(low.schedule, tuple(map(tuple, ranks)))
    for lazy in (False, True):
        assert agrees_with_reference(broken, lazy) == "error"


def test_compiled_form_is_not_reused_for_a_copy_with_other_microbatches():
    """dataclasses.replace shares `meta`: a copy with another microbatch count is compiled
    afresh, not judged by the original's rows."""
    from dataclasses import replace

    base = Schedule("hand", 2, 2, 1, LOOP, ((Op(F, 0), Op(F, 1), Op(BW, 0), Op(BW, 1)),
                                            (Op(F, 0), Op(BW, 0), Op(F, 1), Op(BW, 1))))
    check_complete(base)
    more = replace(base, microbatches=3)
    assert outcome(check_complete, more) == outcome(check_complete_reference, more)
    assert outcome(check_complete, more)[0] == "error"
    fewer = replace(base, microbatches=1)
    assert outcome(check_complete, fewer)[0] == "error"


def test_planning_writes_nothing_into_the_frozen_schedule_and_keeps_no_schedule_alive():
    """The compiled rows and the stage table live outside the schedule (no cache in `meta`);
    a validated schedule's rows are reused while it lives and dropped when it goes."""
    import gc
    import weakref

    from primus_megatron.schedules import compiled as C
    from primus_megatron.schedules import generate, validate

    sched = generate("zbv", 4, 8, validate=False)
    meta = dict(sched.meta)
    validate(sched)
    assert sched.meta == meta
    first = C.compile_schedule(sched)
    assert C.compile_schedule(sched).rules is first.rules  # compiled once while it lives
    gone = weakref.ref(sched)
    entries = len(C._ROWS._entries)
    del sched, first
    gc.collect()
    assert gone() is None and len(C._ROWS._entries) == entries - 1
