"""Data-parallel replicas of an emulated pipeline (emulation/replicas.py, issue 40 item 5).

dp x pp forked gloo ranks, each replica running its own microbatch count with its own factors
through our runner (balance_data set) and megatron's own 1F1B: the counts run are the plan's, and
every chunk of every replica asked for its op times scaled by its microbatches' factors. The
simulated prediction is checked against a hand computation. No timing is asserted here
(benchmarks/balanced_data_emulated.py measures it).
"""
from __future__ import annotations

from collections import Counter

import pytest

from primus_megatron import emulation as E
from primus_megatron.balancing import SampleCost, plan_batch

SCALE = 0.002  # seconds per cost unit: F, B and W 2 ms, BW 4 ms
COST = SampleCost(a=1.0 / 64, b=1.0)
STEPS = ([30, 5, 40, 12, 60, 9, 22, 33], [64, 3, 3, 50, 17, 8, 41, 2])  # per step, the sample lengths (cap 64)


def _plans(mode: str) -> list:
    return [plan_batch(lengths, 2, 64, mode, COST) for lengths in STEPS]


@pytest.fixture(scope="module")
def replica_runs():
    """zb-h1 (lb-mini), zbv (off) and megatron's 1F1B (lb-mini) on DP2 x PP2: one launch of 4 ranks."""
    plans = {mode: _plans(mode) for mode in ("off", "lb-mini")}
    factors = {mode: tuple(tuple(p.factors(r, COST) for r in range(2)) for p in plans[mode]) for mode in plans}
    runs = [E.ReplicaRun("zb-h1", "zb-h1", factors["lb-mini"]), E.ReplicaRun("zbv", "zbv", factors["off"], mode="off"),
            E.ReplicaRun("megatron", E.MEGATRON_1F1B, factors["lb-mini"])]
    return plans, runs, E.run_replicas(runs, 2, 2, scale=SCALE, repeats=2, timeout_s=120)


def test_every_replica_runs_the_plans_count(replica_runs):
    plans, runs, results = replica_runs
    for run, result in zip(runs, results):
        assert [tuple(c) for c in result["counts"]] == [p.counts for p in plans[run.mode]]
        assert len(result["passes_s"]) == 2 and len(result["step_s"]) == len(STEPS)
        assert result["step_s"] == [min(a, b) for a, b in zip(*result["passes_s"])] and min(result["step_s"]) > 0
    assert {c for p in plans["lb-mini"] for c in p.counts} != {4}  # the replicas' counts differ from a fixed split


def _expected(kinds: dict, factors, chunks: int) -> Counter:
    """The waits one chunk asks for: per microbatch each kind's units / chunks x SCALE x its factor."""
    return Counter((k, round(SCALE * units / chunks * f, 9)) for f in factors for k, units in kinds.items())


def test_every_chunk_waits_its_microbatches_scaled_times(replica_runs):
    _, runs, results = replica_runs
    kinds = {"zb-h1": {"F": 1, "B": 1, "W": 1}, "zbv": {"F": 1, "B": 1, "W": 1}, "megatron": {"F": 1, "BW": 2}}
    for run, result in zip(runs, results):
        for step, per_replica in zip(run.steps, result["waits"]):
            for factors, stages in zip(step, per_replica):
                for chunk_waits in stages:
                    assert len(chunk_waits) == (2 if run.label == "zbv" else 1)
                    for waits in chunk_waits:
                        got = Counter((k, round(s, 9)) for k, s in waits)
                        assert got == _expected(kinds[run.label], factors, len(chunk_waits))


def test_simulated_makespans_by_hand():
    # 1F1B at pp 2, unit F, BW = 2 (B + W): one microbatch of factor 3 crosses both stages and back,
    # 3 x (1 + 1 + 2 + 2) = 18; factors (1, 2): F0 [0,1] on rank 0, [1,2] on rank 1; F1 [1,3] on
    # rank 0; BW0 [2,4] on rank 1, [4,6] on rank 0; F1 [4,6] and BW1 [6,10] on rank 1; BW1 [10,14].
    assert E.simulated_makespans("1f1b", 2, [(1.0, 2.0), (3.0,)]) == pytest.approx([14.0, 18.0])
    assert E.simulated_makespans(E.MEGATRON_1F1B, 2, [(1.0, 2.0)]) == pytest.approx([14.0])
    # zb-h1, one microbatch of factor 2: F, F, B, B, then rank 0's W after its B: (1 + 1 + 1 + 1 + 1) x 2
    assert E.simulated_makespans("zb-h1", 2, [(2.0,)]) == pytest.approx([10.0])
