"""FP8 in the profile the planner uses (issue 54 item 6): benchmarks/fp8_profile.py's ranks once, at tiny sizes.

A TE (stand-in) GPT at pp=2 under zb-h1, bf16 and FP8 (delayed scaling, hybrid format) profiled for one step.
What B keeps for W is known from TE v2.11's source for each of a layer's four GEMMs (qkv, proj, fc1, fc2: input
K, output N features, T tokens): in bf16 the input and the grad output, 2 T (K + N) bytes; in FP8 the input's
column-wise data (its row-wise data dropped in F), the grad output's row-wise data and transpose, and a 4-byte
scale-inverse each, T (K + 2 N) + 8 bytes (tests/test_te_wgrad.py `_fp8_held_bytes_by_te`). Over a layer
(qkv h -> 3h, proj h -> h, fc1 h -> 4h, fc2 4h -> h) that is 32 T h bytes in bf16 and 25 T h + 32 in FP8; the
last stage's output layer (megatron's own linear, bf16 in both) holds the same in both. So the profiled
held-for-W bytes of every stage differ by exactly 7 T h - 32 per layer, and FP8 holds less. F saves that
quantized input (T K bytes and its scale-inverse) where bf16 saves the input (2 T K), all else alike: F's
activations differ by 7 T h - 16 per layer; the FP8 weights the layers cache across microbatches (megatron
passes `is_first_microbatch`) are not among them.
"""
from __future__ import annotations

import os
import sys

import pytest

import megatron_reference as ref

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import fp8_profile as FPB  # noqa: E402

MODEL = {"num_layers": 2, "hidden": 32, "heads": 2, "seq": 32, "mbs": 1, "vocab": 64, "m": 2, "steps": 1}


@pytest.fixture(scope="module")
def profiles():
    res = FPB.C.run_ranks(FPB.profile_body, {"pp": FPB.PP, "model": MODEL, "reps": 1}, FPB.PP, timeout_s=300,
                          sys_path=[FPB.TE_STANDIN, FPB.HERE])
    return FPB.agreed_medians(res)


def test_fp8_ran_in_fp8_and_bf16_did_not(profiles):
    assert profiles["fp8"]["fp8_modules"] > 0 and profiles["bf16"]["fp8_modules"] == 0


def test_fp8_holds_for_w_and_saves_in_f_what_te_keeps(profiles):
    tokens, hidden = MODEL["seq"] * MODEL["mbs"], MODEL["hidden"]
    layers = MODEL["num_layers"] // FPB.PP
    for stage in range(FPB.PP):
        held = {v: -profiles[v]["mem_w"][stage] for v in FPB.VARIANTS}
        assert held["fp8"] < held["bf16"], (stage, held)
        assert held["bf16"] - held["fp8"] == pytest.approx(layers * (7 * tokens * hidden - 32), abs=0.5), (stage, held)
        forward = {v: profiles[v]["mem_f"][stage] for v in FPB.VARIANTS}
        assert forward["bf16"] - forward["fp8"] == pytest.approx(layers * (7 * tokens * hidden - 16), abs=0.5), \
            (stage, forward)
    first = {v: -profiles[v]["mem_w"][0] for v in FPB.VARIANTS}  # stage 0: the layers only
    assert first["bf16"] == pytest.approx(layers * 32 * tokens * hidden, abs=0.5)
    assert first["fp8"] == pytest.approx(layers * (25 * tokens * hidden + 32), abs=0.5)
