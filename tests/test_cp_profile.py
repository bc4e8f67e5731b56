"""Context parallelism in the profile the planners use (issue 41 item 5).

One launch of benchmarks/cp_profile.py's ranks, a tiny TE (stand-in) GPT at CP=1 (pp=2 x dp=2) and
CP=2 (pp=2 x cp=2), the same global sequence, zb-h1 profiled for one step. Under CP each rank holds
1/CP of the tokens, so:

* the p2p message (the runtime's receive buffer, `_tensor_shape`) is exactly half: shape arithmetic,
  no tolerance; and it is what the stages really send;
* what B keeps for W (the linear layers' inputs and output gradients: per token) is half, within 3%
  (nothing else is held for W; the margin is for any small per-microbatch tensor);
* F's activations are at most half (+5% for per-microbatch constants), not exactly half: without CP
  the stand-in's attention is unfused and autograd saves its queries x keys scores too, while its CP
  ring (as TE's) saves per-token tensors and recomputes the blocks in backward;
* `zb-auto` planned under one byte budget per rank (1F1B's peak at CP=1) gets about twice the units
  from the CP=2 profile and plans into them: a peak above pp units that still fits the bytes.
"""
from __future__ import annotations

import os
import sys

import pytest

import megatron_reference as ref

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import cp_profile as CPB  # noqa: E402

MODEL = {"num_layers": 2, "hidden": 64, "heads": 4, "seq": 128, "mbs": 1, "vocab": 256, "m": 4, "steps": 1}


@pytest.fixture(scope="module")
def profiles():
    res = CPB.run_profiles(MODEL, 1, timeout_s=300)
    return {cp: CPB.medians(res[0][cp]) for cp in CPB.CPS}


def _bytes(profile: dict, key: str, stage: int) -> float:
    return profile[key][stage] * profile["unit_bytes"]  # the planner's units are per-profile


def test_the_p2p_message_is_halved(profiles):
    whole = MODEL["seq"] * MODEL["mbs"] * MODEL["hidden"] * CPB.ACT_BYTES  # bf16 (TE has no fp32 CP attention)
    assert profiles[1]["message_bytes"] == whole
    assert profiles[2]["message_bytes"] == whole // 2
    for cp in CPB.CPS:  # the receive buffer is what the other stage sends
        assert profiles[cp]["sent_bytes"] == profiles[cp]["message_bytes"]
        assert profiles[cp]["comm"] > 0


def test_activation_memory_per_microbatch_scales_with_one_over_cp(profiles):
    one, two = profiles[1], profiles[2]
    for stage in range(CPB.PP):
        held = _bytes(two, "mem_w", stage) / _bytes(one, "mem_w", stage)
        assert abs(held - 0.5) <= 0.03 * 0.5, (stage, held)
        forward = _bytes(two, "mem_f", stage) / _bytes(one, "mem_f", stage)
        assert 0 < forward <= 0.5 * 1.05, (stage, forward)
    assert 0 < two["unit_bytes"] / one["unit_bytes"] <= 0.5 * 1.05


def test_zb_auto_plans_into_the_memory_cp_frees(profiles):
    budget = CPB.PP * profiles[1]["unit_bytes"]  # 1F1B's peak at CP=1, in bytes
    plans = {cp: CPB.plan("zb-auto", profiles[cp], MODEL["num_layers"], MODEL["m"],
                          budget / profiles[cp]["unit_bytes"]) for cp in CPB.CPS}
    assert plans[1]["peak"] <= CPB.PP + 1e-9
    assert plans[2]["peak"] > CPB.PP + 0.5, plans[2]  # more microbatches' activations held than CP=1 can
    for cp in CPB.CPS:
        assert plans[cp]["peak_bytes"] <= budget * (1 + 1e-9), (cp, plans[cp])
