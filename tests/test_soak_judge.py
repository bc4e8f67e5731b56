"""The soak benchmark's verdict (`benchmarks/soak.py`): growth between the first
and the last window, worst rank, and the options it refuses."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("soak_benchmark", os.path.join(ROOT, "benchmarks", "soak.py"))
soak = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(soak)

MIB = 2 ** 20
OPTS = {"iterations": 40, "warmup": 4, "window": 10, "sample_every": 2,
        "rss_tolerance_mib": 4.0, "tensor_tolerance": 0.0}


def rank_result(rss_mib=lambda i: 100.0, tensors=lambda i: 50, store_left=0, sends_left=0) -> dict:
    n = OPTS["iterations"]
    sampled = [i for i in range(n) if i % OPTS["sample_every"] == 0 or i == n - 1]
    return {"rss": [int(rss_mib(i) * MIB) for i in range(n)], "tensors": [(i, tensors(i)) for i in sampled],
            "store_left": store_left, "sends_left": sends_left, "step_s": 0.01}


def test_flat_memory_passes():
    verdict = soak.judge({0: rank_result(), 1: rank_result()}, OPTS)
    assert verdict["ok"]
    assert verdict["rss_growth"] == 0 and verdict["tensor_growth"] == 0


def test_noise_within_the_tolerance_passes_and_warmup_growth_is_ignored():
    # RSS climbs during warm-up (allocator), then wobbles by 1 MiB: not a leak.
    def rss(i): return 50.0 + 10 * min(i, 4) + (i % 2)
    verdict = soak.judge({0: rank_result(rss_mib=rss), 1: rank_result()}, OPTS)
    assert verdict["ok"]
    assert abs(verdict["rss_growth"]) < 1


def test_rss_growing_steadily_on_one_rank_fails_and_reports_that_rank():
    def rss(i): return 100.0 + 0.5 * i  # 0.5 MiB per iteration: 15 MiB between the windows' means
    verdict = soak.judge({0: rank_result(), 1: rank_result(rss_mib=rss)}, OPTS)
    assert not verdict["ok"]
    assert verdict["rank"] == 1
    assert verdict["rss_growth"] == pytest.approx(0.5 * (OPTS["iterations"] - OPTS["window"] - OPTS["warmup"]))


def test_one_leaked_tensor_per_iteration_fails_and_the_table_shows_the_leaking_rank():
    # rank 0 grows RSS a little (within tolerance), rank 1 leaks tensors: the tensor
    # columns must come from rank 1, the rank whose growth decides the verdict.
    verdict = soak.judge({0: rank_result(rss_mib=lambda i: 100.0 + 0.05 * i), 1: rank_result(tensors=lambda i: 50 + i)},
                         OPTS)
    assert not verdict["ok"]
    first, last = [4, 6, 8, 10, 12], [30, 32, 34, 36, 38, 39]  # sampled iterations in each window
    assert verdict["tensors_start"] == pytest.approx(50 + sum(first) / len(first))  # rank 0's would be 50
    assert verdict["tensors_end"] == pytest.approx(50 + sum(last) / len(last))
    assert verdict["rss_growth"] == pytest.approx(0.05 * 26, abs=0.01)  # rank 0's, the larger
    assert "LEAK?" in soak.table([("zb-h1", verdict)])


@pytest.mark.parametrize("field", ["store_left", "sends_left"])
def test_work_left_behind_fails_even_with_flat_memory(field):
    verdict = soak.judge({0: rank_result(), 1: rank_result(**{field: 1})}, OPTS)
    assert not verdict["ok"] and verdict[field] == 1
    assert "| ok |" not in soak.table([("zbv", verdict)])


@pytest.mark.parametrize("change, message", [
    ({"window": 30}, "--warmup 4 + 2 x --window 30 exceeds 40 iterations"),
    ({"sample_every": 11}, "--sample-every 11 must be at most --window 10"),
    ({"warmup": -1}, "--warmup must be at least 0, got -1"),
    ({"iterations": 0}, "--iterations must be at least 1, got 0"),
])
def test_options_that_cannot_be_judged_are_named(change, message):
    assert soak.options_error(OPTS) is None
    assert soak.options_error(dict(OPTS, **change)) == message


def test_the_command_refuses_bad_options_in_one_line_before_starting_ranks():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "soak.py"), "--iterations", "40",
                           "--window", "10", "--sample-every", "20", "--no-markdown"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2
    assert "--sample-every 20 must be at most --window 10" in proc.stderr
    assert "Traceback" not in proc.stderr and "soak:" not in proc.stdout
