"""Property tests: every registered schedule, any pp / microbatches / costs, is valid or a clean ScheduleError."""
from __future__ import annotations

import os
import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from primus_megatron.schedules import Costs, ScheduleError, generate, info, names, simulate
from primus_megatron.schedules.ir import B, BW, F, W

# PLANNER_EXAMPLES=400 runs a deeper search (the default keeps the suite fast).
SCALE = float(os.environ.get("PLANNER_EXAMPLES", "1"))
HEURISTIC = [n for n in names() if n != "zb-optimal"]  # the ILP is exercised in test_schedule_optimal.py

times = st.floats(min_value=0.05, max_value=5.0, allow_nan=False, allow_infinity=False)
comms = st.floats(min_value=0.0, max_value=2.0, allow_nan=False, allow_infinity=False)


@st.composite
def cost_models(draw, pp: int, chunks: int):
    """Scalars, per-rank lists (length pp) or per-stage lists (length pp * chunks) for f, b, w, comm;
    sometimes memory freed partly by B (mem_f + mem_b + mem_w == 0 always)."""

    def value(elements):
        shape = draw(st.sampled_from(["scalar", "rank", "stage"] if chunks > 1 else ["scalar", "rank"]))
        if shape == "scalar":
            return draw(elements)
        n = pp if shape == "rank" else pp * chunks
        return draw(st.lists(elements, min_size=n, max_size=n))

    kwargs = dict(f=value(times), b=value(times), w=value(times), comm=value(comms))
    if draw(st.booleans()):
        mem_f = draw(st.floats(min_value=0.25, max_value=2.0))
        mem_b = -draw(st.floats(min_value=0.0, max_value=1.0)) * mem_f
        kwargs.update(mem_f=mem_f, mem_b=mem_b, mem_w=-(mem_f + mem_b))
    return Costs(**kwargs)


def one_sentence(msg: str) -> bool:
    """A single line, non-empty, with no sentence break ('. ' followed by a capital) inside."""
    return bool(msg.strip()) and "\n" not in msg and not re.search(r"[.!?]\s+[A-Z]", msg)


def check_valid(sched, costs, limit, name, pp, m):
    """The properties every generated schedule must have, independently of validate(): the callers'
    `generate` ran validate() (completeness, order, memory, rendezvous) with these costs and limit already
    (it validates by default); running it again here was a fifth of this module's CPU for the same answer."""
    assert sched.pp == pp and sched.microbatches == m and len(sched.ranks) == pp
    assert sched.chunks_per_rank == info(name).chunks and sched.placement == info(name).placement
    # Completeness counted here too: per (mb, stage) one F and B+W or BW.
    count = {}
    for r, _, op in sched.ops():
        count[(op.kind, op.mb, sched.stage(r, op))] = count.get((op.kind, op.mb, sched.stage(r, op)), 0) + 1
    for s in range(sched.num_stages):
        for mb in range(m):
            assert count.get((F, mb, s)) == 1
            assert (count.get((B, mb, s)), count.get((W, mb, s)), count.get((BW, mb, s))) in ((1, 1, None), (None, None, 1))
    res = simulate(sched, costs)
    assert res.makespan >= max(res.busy) - 1e-9
    assert all(i >= -1e-9 for i in res.idle)
    assert 0.0 <= res.bubble_sync < 1.0 and 0.0 <= res.bubble_async < 1.0
    assert res.bubble_async <= res.bubble_sync + 1e-9  # the period never exceeds the makespan
    if limit is not None:
        assert res.max_peak_memory <= limit + 1e-9


@pytest.mark.parametrize("name", HEURISTIC)
@settings(max_examples=int(12 * SCALE))
@given(data=st.data())
def test_generate_is_valid_or_clean_error(name, data):
    pp = data.draw(st.integers(2, 16), label="pp")
    m = data.draw(st.integers(1, 64), label="microbatches")
    chunks = info(name).chunks
    costs = data.draw(cost_models(pp, chunks), label="costs")
    limit = data.draw(st.one_of(st.none(), st.floats(min_value=0.1, max_value=3.0 * pp)), label="memory_limit")
    try:
        sched = generate(name, pp, m, costs=costs, memory_limit=limit)
    except ScheduleError as exc:
        assert one_sentence(str(exc)), f"not one sentence: {exc!r}"
        return
    check_valid(sched, costs, limit, name, pp, m)


@pytest.mark.parametrize("name", HEURISTIC)
@settings(max_examples=int(8 * SCALE))
@given(data=st.data())
def test_generate_without_limit_always_succeeds_for_time_costs(name, data):
    """With no memory limit and default memory deltas, any f/b/w/comm must give a schedule
    (zb-auto then uses its default limit of 1F1B's memory, p units)."""
    pp = data.draw(st.integers(2, 16), label="pp")
    m = data.draw(st.integers(1, 64), label="microbatches")
    chunks = info(name).chunks
    c = data.draw(cost_models(pp, chunks), label="costs")
    costs = Costs(f=c.f, b=c.b, w=c.w, comm=c.comm)
    check_valid(generate(name, pp, m, costs=costs), costs, None, name, pp, m)


@pytest.mark.parametrize("name", HEURISTIC)
def test_every_schedule_supports_every_microbatch_count(name):
    """Unit costs, every m >= 1 (below, at and above pp and 2pp), including m < pp."""
    for pp in (2, 3, 4, 5, 8):
        for m in sorted({1, 2, 3, pp - 1, pp, pp + 1, 2 * pp - 1, 2 * pp, 2 * pp + 1, 3 * pp + 2} - {0}):
            sched = generate(name, pp, m)
            check_valid(sched, None, None, name, pp, m)


def test_one_sentence_helper():
    assert one_sentence("memory limit 0.5 is too small for zb-auto with pp=2 and 3 microbatches: it needs 1")
    assert not one_sentence("Bad input. Try again")
    assert not one_sentence("line one\nline two")
    assert not one_sentence("")
