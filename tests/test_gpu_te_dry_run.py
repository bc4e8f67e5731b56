"""`make gpu-te` (benchmarks/gpu_te.py) kept from rotting: its CPU dry run, through the launch path the GPU
machine takes, with TE's stand-in (tests/te_standin) where the unpacked bundle would be.

The dry run's parts, each in its own process as on the GPU: the import probe runs a TE Linear in fp32 and
in FP8 (the stand-in answering as a Hopper); the split measures the dense block's mid chunk of TE layers
in FP8 with the weight gradients deferred and run in W; gpu_check.py's launch for the Megatron-LM part
writes its report. The two pytest parts (the conformance file and tests/test_gpu_te.py) skip every test
on CPU, and the suite runs both files itself: here their launcher runs a small test file of its own
instead (a pass, a skip, a failure), which costs no torch import. Also: the bundle's unpacking and the
environment it gives the parts (a small bundle made here), a passed deadline, bad options. What only the
GPU run shows is in docs/transformer-engine.md.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

import pytest

import megatron_reference as ref

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu_te.py")
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import gpu_te  # noqa: E402


def _run(*args, timeout=600, env=None):
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, SCRIPT, *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_te")
    proc = _run("--cpu-dry-run", "--parts", "import,split,megatron-lm", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, json.loads((out / "report.json").read_text())


def test_every_asked_part_ran_and_the_report_shows_it(dry_run):
    out, data = dry_run
    assert data["dry_run"] and {p: s["status"] for p, s in data["parts"].items()} == {
        "import": "ok", "conformance": "not run", "layers": "not run", "split": "ok", "megatron-lm": "ok"}
    assert all(s["cpu_s"] > 0 for p, s in data["parts"].items() if s["status"] == "ok")
    text = (out / "report.md").read_text()
    for heading in ("## A TE Linear on the device", "## Split backward"):
        assert heading in text


def test_the_import_probe_ran_tes_linear_in_fp32_and_fp8(dry_run):
    _, data = dry_run
    assert data["environment"]["transformer_engine"]["version"] == "2.11.0"
    runs = {r["precision"]: r for r in data["import"]["runs"]}
    assert set(runs) == {"float32", "fp8-delayed"} and all(r["ok"] for r in runs.values()), runs
    assert runs["float32"]["output_rel_error"] < 1e-6 < runs["fp8-delayed"]["output_rel_error"]  # FP8 rounds


SMALL_TESTS = """
import pytest

def test_passes():
    pass

def test_skips():
    pytest.skip("not here")

def test_fails():
    assert 1 == 2, "one is not two"
"""


def test_a_pytest_part_reports_each_test_and_names_the_failures(tmp_path, monkeypatch):
    (tmp_path / "test_small.py").write_text(SMALL_TESTS)
    monkeypatch.setitem(gpu_te.PYTEST_PARTS, "conformance", str(tmp_path / "test_small.py"))
    where = tmp_path / "part"
    where.mkdir()
    rows, why = gpu_te._run_pytest("conformance", {"env": dict(os.environ), "gpu": False}, str(where), 120)
    assert [(r["test"], r["outcome"]) for r in rows] == [
        ("test_passes", "passed"), ("test_skips", "skipped"), ("test_fails", "failed")]
    assert "not here" in rows[1]["message"] and "one is not two" in rows[2]["message"]
    assert why.startswith("1 of 3 failed: test_fails: ") and "one is not two" in why


def test_the_split_defers_every_te_linear_in_fp8(dry_run):
    _, data = dry_run
    [row] = data["split"]["rows"]
    assert (row["block_name"], row["layers"], row["precision"], row["kind"]) == ("dense", "te", "fp8-delayed", "mid")
    # two layers of qkv (LayerNormLinear), proj, fc1 (LayerNormLinear), fc2: 8 weight GEMMs, all run in W
    assert row["deferred_closures"] == 8 and row["fp8_modules"] >= 8
    assert 0 < row["mem_closures"] < row["mem_after_f"] and row["mem_after_w"] == 0, row
    assert row["split_over_fused"] == pytest.approx((row["t_b"] + row["t_w"]) / row["t_bw"])
    assert not data["split"]["profiles"]  # one chunk kind: no profile (the GPU run measures all three)


def test_the_megatron_lm_part_launched_gpu_check(dry_run):
    _, data = dry_run
    check = data["megatron-lm"]
    assert check["dry_run"] and check["matrix"] == [] and "megatron_lm" not in check
    assert "--no-matrix" in check["command"]


def test_unpacking_a_bundle_gives_the_parts_its_paths(tmp_path):
    made = tmp_path / "made"
    (made / "site" / "transformer_engine" / "wheel_lib").mkdir(parents=True)
    (made / gpu_te.MEGATRON_LM_TREE).mkdir()
    (made / "manifest.json").write_text(json.dumps({"name": "gpu-te-test", "built": "now", "gpu_code": "sm_90"}))
    bundle = tmp_path / "gpu-te-test.tar.xz"
    with tarfile.open(bundle, "w:xz") as tar:
        for name in ("site", gpu_te.MEGATRON_LM_TREE, "manifest.json"):
            tar.add(made / name, arcname=name)
    into = tmp_path / "into"
    into.mkdir()
    unpacked = gpu_te.unpack(str(bundle), str(into))
    assert unpacked["manifest"]["name"] == "gpu-te-test"
    env = gpu_te.part_env(unpacked["env"])
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(into / "site")
    assert env["LD_LIBRARY_PATH"].split(os.pathsep)[0] == str(into / "site" / "transformer_engine" / "wheel_lib")
    assert env["MEGATRON_LM_PATH"] == str(into / gpu_te.MEGATRON_LM_TREE)


def test_a_passed_deadline_reports_every_part_not_run(tmp_path):
    proc = _run("--cpu-dry-run", "--deadline-min", "0.01", "--out", str(tmp_path), timeout=120)
    assert proc.returncode == 1
    data = json.loads((tmp_path / "report.json").read_text())
    assert {s["status"] for s in data["parts"].values()} == {"not run"}
    assert all("deadline" in s["why"] for s in data["parts"].values())


@pytest.mark.parametrize("args, words", [(["--cpu-dry-run", "--parts", "import,nope"], "--parts takes import, "),
                                         (["--bundle", "/nonexistent/gpu-te.tar.xz"], "--bundle names no file")])
def test_bad_input_is_one_line_naming_the_option(tmp_path, args, words):
    proc = _run(*args, "--out", str(tmp_path), timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr
    assert not (tmp_path / "report.json").exists()


@pytest.mark.parametrize("args, words", [(["--jobs", "3"], "--jobs takes 1 or 2"),
                                         (["--megatron-lm", "/nonexistent.tar.gz"], "--megatron-lm names no file")])
def test_the_bundle_builds_bad_input_is_one_line_naming_the_option(tmp_path, args, words):
    """`make gpu-te-bundle` (benchmarks/gpu_te_bundle.py) refuses before it downloads or writes anything."""
    script = os.path.join(ROOT, "benchmarks", "gpu_te_bundle.py")
    proc = subprocess.run([sys.executable, script, "--cache", str(tmp_path / "cache"), *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr
    assert not (tmp_path / "cache").exists()
