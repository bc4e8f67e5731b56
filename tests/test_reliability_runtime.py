"""Ranks that would run different schedules find out before any p2p, at once.

Every pipeline rank compares a fingerprint of the schedule it is about to run
(primus_megatron.runtime.planner.schedule_fingerprint) with the
others' before its first send or receive. Contract: a RuntimeError subclass
whose message says the ranks' schedules differ and names them (name, or the
fingerprints when the names agree), raised on every rank in well under the
p2p timeout, with no send or receive posted.
"""
from __future__ import annotations

import time

import pytest

import megatron_reference as ref
import pipeline_harness as H
from primus_megatron import schedules as S

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")

P2P_TIMEOUT_S = 30
MICROBATCHES = 4
# per scenario: what each of the 2 ranks is given (schedule, get_forward_backward_func options)
SCENARIOS = [
    [("zb-h1", {}), ("zb-h2", {})],
    [("zb-auto", {"memory_limit": 2.0}), ("zb-auto", {"memory_limit": 3.0})],
    [("zb-h2", {}), ("zb-h2", {})],  # agreeing ranks then run normally on the same process group
]


def mismatch_body(rank, world_case):
    """Each scenario: one training step with this rank's schedule, counting p2p posts."""
    from primus_megatron.runtime import p2p

    posts = {"n": 0}
    original = p2p.P2P.post  # every send and receive, lone or batched, is posted through it

    def counted(self, *a, **k):
        posts["n"] += 1
        return original(self, *a, **k)

    p2p.P2P.post = counted
    out = []
    for scenario in world_case["scenarios"]:
        schedule, options = scenario[rank]
        case = {"schedule": schedule, "microbatches": MICROBATCHES, "num_layers": 4,
                "options": {"p2p_timeout_s": P2P_TIMEOUT_S, **options}}
        posts["n"] = 0
        started = time.monotonic()
        try:
            H.one_step(rank, case, world_case["pp"])
            out.append({"error": None, "posts": posts["n"]})
        except Exception as exc:
            out.append({"error": type(exc).__name__, "runtime_error": isinstance(exc, RuntimeError),
                        "message": str(exc), "elapsed": time.monotonic() - started, "posts": posts["n"]})
    return out


@pytest.fixture(scope="module")
def results():
    return H.run_ranks({"body": mismatch_body, "pp": 2, "scenarios": SCENARIOS}, 2, timeout_s=300)


def _fingerprint(schedule, **options):
    from primus_megatron.runtime.planner import schedule_fingerprint

    return schedule_fingerprint(S.generate(schedule, 2, MICROBATCHES, **options))


@pytest.mark.parametrize("index", [0, 1], ids=["zb-h1 vs zb-h2", "zb-auto under two memory limits"])
def test_ranks_running_different_schedules_fail_before_any_p2p(results, index):
    names = {schedule for schedule, _ in SCENARIOS[index]}
    prints = [_fingerprint(schedule, **options) for schedule, options in SCENARIOS[index]]
    assert prints[0] != prints[1]
    for rank in (0, 1):
        res = results[rank][index]
        assert res["error"] is not None and res["runtime_error"], res
        message = res["message"]
        assert "schedule" in message and "differ" in message, message
        if len(names) == 2:
            assert all(name in message for name in names), message
        else:
            assert all(fp in message for fp in prints), (prints, message)
        assert res["posts"] == 0, "no send or receive may be posted before the ranks agree"
        assert res["elapsed"] < P2P_TIMEOUT_S / 3, res["elapsed"]


def test_ranks_that_agree_run_the_step(results):
    for rank in (0, 1):
        res = results[rank][2]
        assert res["error"] is None, res
        assert res["posts"] > 0
