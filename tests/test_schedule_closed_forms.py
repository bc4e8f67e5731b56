"""Closed forms with equal costs (F = B = W = 1, comm = 0), every value computed from its formula here.

p = pp ranks, m = microbatches. With V placement each rank holds two chunks, so a chunk op costs 1/2.
"""
from __future__ import annotations

import math

import pytest

from primus_megatron.schedules import Costs, generate, simulate

PPS = range(2, 9)


def grid(p: int) -> list[int]:
    return sorted({1, p - 1, p, 2 * p - 1, 3 * p, 24} - {0})


CASES = [(p, m) for p in PPS for m in grid(p)]
F_, B_, W_ = 1.0, 1.0, 1.0


def run(name, p, m, costs=None, **kw):
    return simulate(generate(name, p, m, costs=costs, **kw), costs)


@pytest.mark.parametrize("p,m", CASES)
def test_1f1b_sync_bubble_and_memory(p, m):
    r = run("1f1b", p, m)
    assert r.bubble_sync == pytest.approx((p - 1) / (m + p - 1), abs=1e-12)
    # 1F1B with F = 1, BW = 2: every op chain has m + p - 1 "slots" of F + BW.
    assert r.makespan == pytest.approx((m + p - 1) * (F_ + B_ + W_))
    # Rank 0 holds min(m, p) activations at its peak (p - 1 warm-up F plus one steady F).
    assert r.max_peak_memory == pytest.approx(min(m, p))
    assert r.peak_memory[0] == pytest.approx(min(m, p))


@pytest.mark.parametrize("p,m", [(p, m) for p, m in CASES if m >= p])
def test_zb_h1_bubble_time(p, m):
    r = run("zb-h1", p, m)
    bubble_time = (p - 1) * (F_ + B_ - W_)
    assert r.makespan == pytest.approx(m * (F_ + B_ + W_) + bubble_time)
    # bubble rate = bubble / (bubble + m (F + B + W)) (REFERENCE.md)
    assert r.bubble_sync == pytest.approx(bubble_time / (bubble_time + m * (F_ + B_ + W_)))
    assert r.max_peak_memory <= p + 1e-9


@pytest.mark.parametrize("f,b,w", [(1.0, 2.0, 1.0), (2.0, 1.0, 1.0), (1.0, 1.5, 0.5), (1.5, 2.0, 0.75)])
@pytest.mark.parametrize("p,m", [(2, 2), (3, 5), (4, 4), (4, 9), (6, 13), (8, 24)])
def test_zb_h1_bubble_time_unequal(p, m, f, b, w):
    """The paper's (p-1)(F+B-W) holds whenever W <= min(F, B): the delayed W of the cool-down
    fits in the gaps. (With W > F or W > B the handcrafted order is longer; not tested here.)"""
    costs = Costs(f=f, b=b, w=w)
    assert run("zb-h1", p, m, costs).makespan == pytest.approx(m * (f + b + w) + (p - 1) * (f + b - w))


@pytest.mark.parametrize("p,m", CASES)
def test_zb_h2_async_bubble_and_memory(p, m):
    r = run("zb-h2", p, m)
    if m >= 2 * p - 1:
        assert r.bubble_async == pytest.approx(0.0, abs=1e-12)
        # Every rank is busy for its whole span: span == busy == 3m.
        assert r.span == pytest.approx([m * (F_ + B_ + W_)] * p)
    assert r.max_peak_memory <= 2 * p + 1e-9
    # With the barrier the last rank still starts p - 1 forwards late: sync makespan >= 3m + p - 1.
    assert r.makespan >= m * (F_ + B_ + W_) + (p - 1) * F_ - 1e-9


@pytest.mark.parametrize("p,m", CASES)
def test_zbv_makespan_bubble_and_memory(p, m):
    r = run("zbv", p, m)
    assert r.max_peak_memory <= p + 1e-9
    if m >= 2 * p - 1:
        # Rank p-1 holds stages p-1 and p (the turn of the V). Its first F (stage p-1 of
        # microbatch 0) can start only after the p-1 chunk forwards before it, each 1/2
        # long: (p-1)/2. From then on it is never idle and does 3m of work (6m chunk ops of
        # 1/2), so it ends at 3m + (p-1)/2, and ZB-V's order makes that the makespan.
        assert r.makespan == pytest.approx(m * (F_ + B_ + W_) + (p - 1) * F_ / 2)
        assert r.bubble_async == pytest.approx(0.0, abs=1e-12)
    else:
        # Never better than the lower bound above.
        assert r.makespan >= m * (F_ + B_ + W_) + (p - 1) * F_ / 2 - 1e-9


@pytest.mark.parametrize("p,m", CASES)
def test_v_half_and_v_min_memory(p, m):
    assert run("v-half", p, m).max_peak_memory <= math.ceil(p / 2) + 1 + 1e-9
    assert run("v-min", p, m).max_peak_memory <= math.ceil(p / 3) + 1 + 1e-9


@pytest.mark.parametrize("p", [4, 6, 8])
def test_v_family_ordering_at_large_m(p):
    """REFERENCE.md table: bubble 1F1B > V-Min-ish > V-Half > ZB-V = 0 (async), memory ZB-V > V-Half > V-Min."""
    m = 3 * p
    one, zbv, half, vmin = (run(n, p, m) for n in ("1f1b", "zbv", "v-half", "v-min"))
    assert zbv.bubble_sync < half.bubble_sync < one.bubble_sync
    assert vmin.bubble_sync <= one.bubble_sync + 1e-9
    assert vmin.max_peak_memory < half.max_peak_memory < zbv.max_peak_memory


@pytest.mark.parametrize("v", [2, 3, 4])
@pytest.mark.parametrize("p", [2, 3, 4, 6, 8])
def test_interleaved_bubble(p, v):
    """Megatron's interleaved schedule with m a multiple of p: bubble time (p-1)(F+B+W)/v."""
    for m in (p, 2 * p, 3 * p):
        r = run("interleaved-1f1b", p, m, chunks=v)
        assert r.makespan == pytest.approx(m * (F_ + B_ + W_) + (p - 1) * (F_ + B_ + W_) / v)


@pytest.mark.parametrize("name", ["1f1b", "zb-h1", "zb-h2", "zb-auto", "interleaved-1f1b"])
@pytest.mark.parametrize("p,m", [(2, 1), (3, 7), (5, 5), (8, 24)])
def test_loop_lower_bound(name, p, m):
    """No loop-placement schedule beats the last rank's bound: it cannot start before the
    (p-1) forwards ahead of it (interleaved: (p-1) chunk forwards of 1/v) and then works 3m."""
    v = 2 if name == "interleaved-1f1b" else 1
    r = run(name, p, m)
    assert r.makespan >= m * (F_ + B_ + W_) + (p - 1) * F_ / v - 1e-9
