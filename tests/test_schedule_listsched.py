"""The list scheduler: its own score equals the simulator's, and it always terminates."""
from __future__ import annotations

import multiprocessing as mp
import queue
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from primus_megatron.schedules import Costs, ScheduleError
from primus_megatron.schedules.blocks import compact, repeat, slot_policy, v_half_block, v_min_block
from primus_megatron.schedules.builtin.zb_auto import heuristic
from primus_megatron.schedules.ir import LOOP, V
from primus_megatron.schedules.listsched import list_schedule, list_schedule_scored
from primus_megatron.schedules.variants import score

times = st.floats(min_value=0.05, max_value=3.0, allow_nan=False, allow_infinity=False)


@st.composite
def cases(draw):
    """(args of list_schedule_scored): random per-rank costs, either a V block policy
    (two chunks) or a zb-auto heuristic with any warm-up (one chunk), any memory limit."""
    pp = draw(st.integers(2, 7))
    m = draw(st.integers(1, 12))
    rank = st.lists(times, min_size=pp, max_size=pp)
    mem_b = draw(st.sampled_from([0.0, 0.5, -0.25]))
    costs = Costs(f=draw(rank), b=draw(rank), w=draw(rank), comm=draw(st.sampled_from([0.0, 0.1, 0.37])),
                  mem_f=1.0, mem_b=mem_b, mem_w=-1.0 - mem_b)
    if draw(st.booleans()):
        sc = costs.resolve(pp, 2, V)
        slots = repeat(pp, m, draw(st.sampled_from([v_half_block, v_min_block]))(pp))
        if draw(st.booleans()):
            slots = compact(pp, slots, sc)
        policy = slot_policy(slots, cooldown_b_first=draw(st.booleans()))
        return pp, m, 2, V, sc, draw(st.sampled_from([None, pp / 2, pp / 3])), policy
    sc = costs.resolve(pp, 1, LOOP)
    policy = heuristic(draw(st.lists(st.integers(1, 2 * pp), min_size=pp, max_size=pp)))
    if draw(st.booleans()):
        policy = replace(policy, split=False)
    return pp, m, 1, LOOP, sc, draw(st.sampled_from([None, float(pp), pp / 2, 1.5])), policy


@given(cases())
def test_own_score_is_the_simulators(args):
    """best_of trusts the scheduler's score instead of simulating its order: it must be
    exactly (bit for bit) what variants.score computes from the order alone."""
    pp, m, chunks, placement, sc, _, _ = args
    try:
        got = list_schedule_scored(*args)
    except ScheduleError:
        return  # the memory limit is too small for this policy: nothing to score
    assert repr(got.score) == repr(score(pp, m, chunks, placement, sc, got.ranks))


@pytest.mark.parametrize("block", [v_half_block, v_min_block])
@pytest.mark.parametrize("comm", [0.0, 0.3])
@pytest.mark.parametrize("pp,m", [(3, 7), (4, 9), (6, 13)])
def test_own_score_is_the_simulators_on_v_blocks(block, comm, pp, m):
    """The V placement's same-rank links (the turn, chunk 0 to chunk 1) and p2p latency,
    with unequal costs and B adding memory: fixed cases next to the random ones."""
    costs = Costs(f=[1.0 + 0.3 * r for r in range(pp)], b=[2.0 - 0.2 * r for r in range(pp)],
                  w=[0.5 + 0.1 * (r % 3) for r in range(pp)], comm=comm, mem_f=1.0, mem_b=0.5, mem_w=-1.5)
    sc = costs.resolve(pp, 2, V)
    slots = repeat(pp, m, block(pp))
    for base in (slots, compact(pp, slots, sc)):
        got = list_schedule_scored(pp, m, 2, V, sc, None, slot_policy(base))
        assert repr(got.score) == repr(score(pp, m, 2, V, sc, got.ranks))


def _run_livelock_case(out) -> None:
    # Found by random search: ranks 5, 7 and 8 each waited for a better op whose input
    # the others would produce only after their own waits, re-estimating forever.
    costs = Costs(f=[2.128, 1.333, 1.415, 2.969, 1.725, 2.819, 1.254, 1.224, 2.179],
                  b=[0.975, 2.166, 1.966, 1.222, 2.563, 0.94, 0.391, 0.621, 0.545],
                  w=[0.406, 0.458, 1.024, 2.985, 1.533, 2.063, 2.811, 1.089, 1.786], comm=0.37)
    policy = replace(heuristic([15, 10, 14, 10, 14, 2, 1, 1, 10]), split=False)
    try:
        ranks = list_schedule(9, 5, 1, LOOP, costs.resolve(9, 1, LOOP), 9.0, policy)
        out.put(("ok", sum(map(len, ranks))))
    except BaseException as exc:  # report it rather than let the parent wait out the timeout
        out.put(("error", f"{type(exc).__name__}: {exc}"))


def test_waits_on_estimates_cannot_livelock():
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_run_livelock_case, args=(out,))
    proc.start()
    try:
        status, value = out.get(timeout=60)
    except queue.Empty:
        status, value = "timeout", "list_schedule did not finish within 60 s (it used to livelock on this case)"
    finally:
        proc.kill()
        proc.join()
    assert (status, value) == ("ok", 9 * 5 * 2)
