"""Activation offload on emulated devices (issue 32): the copies take the time the plan's bandwidth
says, each B waits for its copy back (each W for its W share's), and the run computes what it
computes without offload.

pp=2, zbv, 4 microbatches, F = B = W = 10 ms; a lane carries one activation unit (a rank's
activations of one microbatch) in 20 ms, so a chunk's copy takes 10 ms (a W share too: under unit costs W frees a chunk's all)."""
from __future__ import annotations

import pytest

import megatron_reference as ref
from primus_megatron import emulation as E
from primus_megatron import schedules as S

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")

SCALE, BANDWIDTH = 0.01, 0.5  # 10 ms per time unit; 0.5 units per time unit


@pytest.fixture(scope="module")
def runs():
    costs = S.Costs()
    sched = S.generate("zbv", 2, 4, costs=costs)
    off = E.make_variant("zbv off", sched, costs, scale=SCALE)
    every = E.make_variant("zbv all", sched, costs, scale=SCALE)
    every.offload = {"mode": "all", "bandwidth": BANDWIDTH, "costs": costs, "scale": SCALE}
    # an `auto` plan chosen once here and handed to every rank, as the pp=32 benchmark does
    given = E.make_variant("zbv given", sched, costs, scale=SCALE)
    plan = S.offload.choose(sched, "auto", bandwidth=BANDWIDTH, costs=costs, memory_limit=1.0).plan
    given.offload = {"plan": plan, "costs": costs, "scale": SCALE}
    results, _ = E.run([off, every, given], 2, 4, elements=64, steps=1, warmup=1, p2p_timeout_s=30)
    return sched, results, plan


def test_copies_take_the_time_the_bandwidth_says_and_each_b_waits_for_its_reload(runs):
    sched, (_, every, _), _ = runs
    for rank, record in enumerate(every["records"]):
        step = record["steps"][-1]
        copies = step["copies"]
        assert len(copies) == 2 * 2 * 4 * 2  # every F and every W share of both chunks: out and back
        for direction in ("D2H", "H2D"):
            lane = sorted((c for c in copies if c[0] == direction), key=lambda c: c[2])
            for (_, _, start, end) in lane:
                assert end - start == pytest.approx(SCALE * 0.5 / BANDWIDTH)  # half a unit per chunk
            for a, b in zip(lane, lane[1:]):
                assert b[2] >= a[3] - 1e-6  # one copy at a time per lane
        back = {c[1]: c[3] for c in copies if c[0] == "H2D"}
        made = {(mb, chunk) if kind == "F" else (mb, chunk, "W"): end
                for kind, mb, chunk, _, _, end in step["timeline"] if kind in ("F", "B")}
        out = {c[1]: c for c in copies if c[0] == "D2H"}
        for kind, mb, chunk, _, start, _ in step["timeline"]:
            if kind == "B":
                assert start >= back[(mb, chunk)] - 1e-6, (rank, mb, chunk)  # the B waited for its reload
            if kind == "W":
                assert start >= back[(mb, chunk, "W")] - 1e-6, (rank, mb, chunk)  # the W for its W share's
        for key, (_, _, start, _) in out.items():
            assert start >= made[key] - 1e-6  # a copy out starts once its F (its B) has ended


def test_offload_computes_what_the_run_without_it_computes(runs):
    _, (off, every, given), _ = runs
    import torch

    for other in (every, given):
        for a, b in zip(off["params"], other["params"]):
            assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert every["makespan"] > 0 and off["makespan"] > 0


def test_every_rank_runs_the_plan_it_is_given(runs):
    _, (_, every, given), plan = runs
    assert 0 < sum(map(len, plan.keys)) < sum(len(r["steps"][-1]["copies"]) for r in every["records"]) // 2
    for rank, record in enumerate(given["records"]):
        copies = record["steps"][-1]["copies"]
        assert {c[1] for c in copies if c[0] == "D2H"} == set(plan.keys[rank])  # what the plan offloads, no more
        assert {c[1] for c in copies if c[0] == "H2D"} == set(plan.keys[rank])


@pytest.fixture(scope="module")
def paired_runs():
    """dualpipev with an all-to-all to hide: its steady state is overlapped F&B pairs, each run on emulated
    chunks as two ops that together take the pair's time."""
    costs = S.Costs(a2a=0.5)
    sched = S.generate("dualpipev", 2, 4, costs=costs)
    assert sched.has_pairs
    off = E.make_variant("dualpipev off", sched, costs, scale=SCALE)
    every = E.make_variant("dualpipev all", sched, costs, scale=SCALE)
    every.offload = {"mode": "all", "bandwidth": BANDWIDTH, "costs": costs, "scale": SCALE}
    results, _ = E.run([off, every], 2, 4, elements=64, steps=1, warmup=1, p2p_timeout_s=30)
    return sched, results


def test_a_pair_waits_for_its_b_halfs_reload_and_moves_its_f_halfs_activations_as_it_ends(paired_runs):
    """As the plan times a pair: it starts (its F half) once its B half's activations are back, and its F
    half's go to host once the pair (its B half) has ended; it computes what it computes without offload."""
    import torch

    sched, (off, every) = paired_runs
    pairs = 0
    for rank, record in enumerate(every["records"]):
        step = record["steps"][-1]
        back = {c[1]: c[3] for c in step["copies"] if c[0] == "H2D"}
        out = {c[1]: c[2] for c in step["copies"] if c[0] == "D2H"}
        spans = {(kind, mb, chunk): (start, end) for kind, mb, chunk, _, start, end in step["timeline"]}
        ops = sched.ranks[rank]
        for p in sched.paired(rank):
            f, b = ops[p], ops[p + 1]
            f_start, b_end = spans[(f.kind, f.mb, f.chunk)][0], spans[(b.kind, b.mb, b.chunk)][1]
            assert f_start >= back[(b.mb, b.chunk)] - 1e-6, (rank, f, b)
            assert out[(f.mb, f.chunk)] >= b_end - 1e-6, (rank, f, b)
            pairs += 1
        assert len(out) == len(back) == 2 * 4 + sum(op.kind == "B" for op in ops)  # every F; every B's W share
    assert pairs > 0
    for a, b in zip(off["params"], every["params"]):
        assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_the_benchmark_names_the_paper_table_of_its_setting(capsys):
    """benchmarks/offload_emulated.py: 28.3B pp=32 m=96 is in Table 5 and Table 8 with different
    profiles; untagged it is the one offload_paper.py simulates (Table 8 from pp=16), a tag picks
    either, and a setting it cannot read is refused in one sentence."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    import offload_emulated as OE

    assert [OE._setting(t)[2] for t in ("1.5B:8:24", "6.2B:16:48", "28.3B:32:96", "28.3B:32:96:t5")] == [
        "t5", "t8", "t8", "t5"]
    t8, t5 = OE._setting("28.3B:32:96"), OE._setting("28.3B:32:96:t5")
    assert t8[1:] == (2.0, "t8") and t5[1:] == (1.0, "t5") and t8[0].f != t5[0].f
    for bad in ("28.3B:32:96:t9", "28.3B:32", "28.3B:32:x", "9B:8:24"):
        with pytest.raises(SystemExit, match="^--settings: "):
            OE._setting(bad)
