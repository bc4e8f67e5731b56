"""Simulator on tiny hand-made schedules: every expected number is worked out by hand below."""
from __future__ import annotations

import pytest

from primus_megatron.schedules import Costs, Op, Schedule, ScheduleError, generate, simulate
from primus_megatron.schedules.ir import B, BW, F, LOOP, V, W


def sched(ranks, *, placement=LOOP, chunks=1, m=1, name="hand") -> Schedule:
    return Schedule(name, len(ranks), m, chunks, placement, tuple(tuple(Op(*o) for o in r) for r in ranks))


def spans(res):
    return [[(str(s.op), s.stage, s.start, s.end) for s in row] for row in res.timeline]


def test_two_ranks_one_microbatch_split_backward():
    f, b, w, c = 1.0, 2.0, 0.5, 0.25
    s = sched([[(F, 0), (B, 0), (W, 0)], [(F, 0), (B, 0), (W, 0)]])
    r = simulate(s, Costs(f=f, b=b, w=w, comm=c))
    # rank 0 F0 [0, f]; rank 1 F0 waits for it plus one hop: [f + c, 2f + c]; B0 and W0 follow at once.
    r1_f = (f + c, 2 * f + c)
    r1_b = (r1_f[1], r1_f[1] + b)
    r1_w = (r1_b[1], r1_b[1] + w)
    # rank 0 B0 waits for rank 1's gradient plus one hop; W0 right after.
    r0_b = (r1_b[1] + c, r1_b[1] + c + b)
    r0_w = (r0_b[1], r0_b[1] + w)
    assert spans(r) == [[("F0", 0, 0.0, f), ("B0", 0, *r0_b), ("W0", 0, *r0_w)],
                        [("F0", 1, *r1_f), ("B0", 1, *r1_b), ("W0", 1, *r1_w)]]
    makespan = r0_w[1]
    busy = f + b + w
    assert r.makespan == pytest.approx(makespan)
    assert r.busy == pytest.approx([busy, busy])
    assert r.idle == pytest.approx([makespan - busy, makespan - busy])
    assert r.span == pytest.approx([r0_w[1] - 0.0, r1_w[1] - r1_f[0]])
    assert r.bubble_sync == pytest.approx(1 - 2 * busy / (2 * makespan))
    assert r.bubble_async == pytest.approx(1 - 2 * busy / (2 * max(r.span)))
    assert r.peak_memory == [1.0, 1.0]


def test_full_backward_costs_b_plus_w_and_frees_memory():
    f, b, w = 1.0, 1.5, 0.5
    s = sched([[(F, 0), (F, 1), (BW, 0), (BW, 1)], [(F, 0), (BW, 0), (F, 1), (BW, 1)]], m=2)
    r = simulate(s, Costs(f=f, b=b, w=w))
    bw = b + w
    # rank 1: F0 [f, 2f], BW0 [2f, 2f+bw], F1 (input at 2f) [2f+bw, 3f+bw], BW1 [3f+bw, 3f+2bw]
    # rank 0: F0, F1 back to back; BW0 at 2f+bw; BW1 at max(2f+2bw, 3f+2bw)
    assert r.timeline[1][-1].end == pytest.approx(3 * f + 2 * bw)
    assert r.timeline[0][2].start == pytest.approx(2 * f + bw)
    assert r.makespan == pytest.approx(3 * f + 3 * bw)
    assert r.busy == pytest.approx([2 * (f + bw)] * 2)
    assert r.peak_memory == [2.0, 1.0]  # rank 0 holds both microbatches before its first BW


def test_per_stage_lists_and_per_stage_comm():
    # Stage 0 is cheap, stage 1 expensive; a message leaving stage 0 costs c0, leaving stage 1 c1.
    f, b, w, comm = [1.0, 2.0], [1.0, 3.0], [0.5, 1.0], [0.5, 0.25]
    mem_f, mem_b, mem_w = [1.0, 2.0], [-0.5, -1.0], [-0.5, -1.0]
    s = sched([[(F, 0), (F, 1), (B, 0), (W, 0), (B, 1), (W, 1)],
               [(F, 0), (B, 0), (F, 1), (B, 1), (W, 0), (W, 1)]], m=2)
    r = simulate(s, Costs(f=f, b=b, w=w, comm=comm, mem_f=mem_f, mem_b=mem_b, mem_w=mem_w))
    t = {}
    t["0F0"] = (0.0, f[0])
    t["0F1"] = (f[0], 2 * f[0])
    t["1F0"] = (t["0F0"][1] + comm[0], t["0F0"][1] + comm[0] + f[1])
    t["1B0"] = (t["1F0"][1], t["1F0"][1] + b[1])
    start = max(t["1B0"][1], t["0F1"][1] + comm[0])
    t["1F1"] = (start, start + f[1])
    t["1B1"] = (t["1F1"][1], t["1F1"][1] + b[1])
    t["1W0"] = (t["1B1"][1], t["1B1"][1] + w[1])
    t["1W1"] = (t["1W0"][1], t["1W0"][1] + w[1])
    start = max(t["0F1"][1], t["1B0"][1] + comm[1])
    t["0B0"] = (start, start + b[0])
    t["0W0"] = (t["0B0"][1], t["0B0"][1] + w[0])
    start = max(t["0W0"][1], t["1B1"][1] + comm[1])
    t["0B1"] = (start, start + b[0])
    t["0W1"] = (t["0B1"][1], t["0B1"][1] + w[0])
    for rank in (0, 1):
        for span in r.timeline[rank]:
            assert (span.start, span.end) == pytest.approx(t[f"{rank}{span.op}"]), span
    makespan = max(t["0W1"][1], t["1W1"][1])
    busy = [2 * (f[0] + b[0] + w[0]), 2 * (f[1] + b[1] + w[1])]
    assert r.makespan == pytest.approx(makespan)
    assert r.busy == pytest.approx(busy)
    assert r.idle == pytest.approx([makespan - x for x in busy])
    assert r.span == pytest.approx([t["0W1"][1], t["1W1"][1] - t["1F0"][0]])
    assert r.bubble_sync == pytest.approx(1 - sum(busy) / (2 * makespan))
    assert r.bubble_async == pytest.approx(1 - sum(busy) / (2 * max(r.span)))
    # rank 0: F0 F1 -> 2 * mem_f[0]; rank 1: F0 B0 F1 -> mem_f + mem_b + mem_f
    assert r.peak_memory == pytest.approx([2 * mem_f[0], 2 * mem_f[1] + mem_b[1]])


def test_v_turn_has_no_comm():
    """pp=2, V placement: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2. The hops 1->2 and
    2->1 stay on rank 1 and cost no latency; 0->1, 2->3, 3->2 and 1->0 pay `comm`.
    Scalar costs are per rank; each of the 2 chunks costs half."""
    f, b, w, c = 2.0, 2.0, 1.0, 0.5
    hf, hb, hw = f / 2, b / 2, w / 2
    s = sched([[(F, 0, 0), (F, 0, 1), (B, 0, 1), (W, 0, 1), (B, 0, 0), (W, 0, 0)],
               [(F, 0, 0), (F, 0, 1), (B, 0, 1), (B, 0, 0), (W, 0, 1), (W, 0, 0)]], placement=V, chunks=2)
    r = simulate(s, Costs(f=f, b=b, w=w, comm=c))
    f0 = (0.0, hf)                      # stage 0 on rank 0
    f1 = (f0[1] + c, f0[1] + c + hf)    # stage 1 on rank 1 (one hop)
    f2 = (f1[1], f1[1] + hf)            # stage 2 on rank 1: the turn, no hop
    f3 = (f2[1] + c, f2[1] + c + hf)    # stage 3 on rank 0 (one hop)
    b3 = (f3[1], f3[1] + hb)            # the loss stage starts the backward at once
    w3 = (b3[1], b3[1] + hw)
    b2 = (b3[1] + c, b3[1] + c + hb)    # back to rank 1
    b1 = (b2[1], b2[1] + hb)            # turn again: no hop
    w2 = (b1[1], b1[1] + hw)
    w1 = (w2[1], w2[1] + hw)
    b0 = (b1[1] + c, b1[1] + c + hb)
    w0 = (max(b0[1], w3[1]), max(b0[1], w3[1]) + hw)
    # all values are sums of halves and quarters: exact in binary floating point
    assert [(s.stage, s.start, s.end) for s in r.timeline[0]] == [
        (0, *f0), (3, *f3), (3, *b3), (3, *w3), (0, *b0), (0, *w0)]
    assert [(s.stage, s.start, s.end) for s in r.timeline[1]] == [
        (1, *f1), (2, *f2), (2, *b2), (1, *b1), (2, *w2), (1, *w1)]
    assert r.makespan == pytest.approx(w0[1])
    assert r.busy == pytest.approx([f + b + w] * 2)
    assert r.peak_memory == pytest.approx([1.0, 1.0])  # two chunk activations of 1/2 each


def test_per_rank_lists_follow_v_placement():
    """A per-rank list (length pp) applies to both chunks of that rank, halved."""
    s = generate("zbv", 2, 3, costs=Costs(f=[2.0, 4.0], b=[2.0, 4.0], w=[2.0, 4.0]))
    r = simulate(s)  # costs from the schedule's meta
    assert r.busy == pytest.approx([3 * (2.0 + 2.0 + 2.0), 3 * (4.0 + 4.0 + 4.0)])
    for row in r.timeline:
        for span in row:
            rank = 0 if span.stage in (0, 3) else 1
            assert span.end - span.start == pytest.approx([2.0, 4.0][rank] / 2)


def test_simulate_uses_schedule_costs_unless_given():
    costs = Costs(f=2.0, b=3.0, w=1.0, comm=0.5)
    s = generate("1f1b", 3, 4, costs=costs)
    assert simulate(s).makespan == pytest.approx(simulate(s, costs).makespan)
    unit = simulate(s, Costs())
    assert unit.busy == pytest.approx([4 * 3.0] * 3)
    assert simulate(s).busy == pytest.approx([4 * (2.0 + 3.0 + 1.0)] * 3)


def test_deadlock_is_reported():
    s = sched([[(F, 0), (B, 1), (F, 1), (B, 0), (W, 0), (W, 1)],
               [(F, 0), (B, 0), (F, 1), (B, 1), (W, 0), (W, 1)]], m=2)
    with pytest.raises(ScheduleError, match=r"rank 0 op B1 waits for the input gradient of microbatch 1 at stage 1 \(rank 1\)"):
        simulate(s)


def test_stats_are_json_friendly():
    r = simulate(generate("zb-h1", 2, 2))
    st = r.stats()
    assert set(st) == {"makespan", "bubble_sync", "bubble_async", "busy", "idle", "peak_memory"}
    assert st["makespan"] == r.makespan and st["busy"] == r.busy and len(st["idle"]) == 2
