"""`make gpu-bench` (benchmarks/gpu_bench.py) kept from rotting: its CPU dry run (gloo, toy shapes of
both blocks) through every part, the gap part through the GPU launch path (each rank a one-GPU
node of its own, benchmarks/rank_launch.py) with gloo.

What the dry run must show, as on a GPU: the split defers every hooked linear layer's weight
gradient (and W runs them), the profiles it writes are what `emulate --profile` reads and follow
from its own rows, every schedule of the gap part computes megatron's 1F1B's losses and gradients
bitwise (fp32 on CPU; on a GPU flash attention's backward is not deterministic, and the report
sets megatron's own second run beside them), offload moves what its plan says and changes no bit,
and gpu_check's part runs. What only a GPU measures (event times, the allocator, NCCL, pinned
copies) is in docs/benchmarks/gpu.md's GPU benchmark section.

What the dry run leaves to other tests (it is the kit's plumbing, run at its smallest): the launch
path for one pipelined part (gap; it is the same code for offload and offload-check, which run on
forked ranks: each launch starts two ranks afresh, imports and all); the check part's matrix for one
schedule (zbv: gpu_check's CPU matrix is tests/test_gpu_check.py's, and every schedule's parity with
megatron's 1F1B test_runtime_parity's).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import megatron_reference as ref
from primus_megatron.megatron_lm.args import parse_costs
from primus_megatron.schedules import balance

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu_bench.py")


def _run(*args, timeout=1200):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    return subprocess.run([sys.executable, SCRIPT, *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_bench")
    proc = _run("--cpu-dry-run", "--launch-on-cpu", "gap", "--check-schedules", "zbv", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, json.loads((out / "report.json").read_text())


def test_every_part_ran(dry_run):
    out, data = dry_run
    assert data["dry_run"] and {p: s["status"] for p, s in data["parts"].items()} == dict.fromkeys(
        ("split", "gap", "offload", "offload-check", "check"), "ok")
    text = (out / "report.md").read_text()
    for heading in ("## Split backward", "## Profiles", "## Host and GPU gaps", "## Activation offload",
                    "## Offload check", "## gpu_check.py"):
        assert heading in text


def test_split_defers_every_hooked_linear_and_w_frees_what_b_kept(dry_run):
    _, data = dry_run
    rows = {(r["block_name"], r["attention"], r["kind"]): r for r in data["split"]}
    assert set(rows) == {("dense", "sdpa", k) for k in ("mid", "first", "last")} | {("dense", "local", "mid")} | {
        ("moe", "sdpa", k) for k in ("mid", "first", "last")}
    # a dense layer's four linear layers (qkv, proj, fc1, fc2) in each of the chunk's two layers; the
    # last chunk's output layer too
    assert [rows[("dense", "sdpa", k)]["deferred_closures"] for k in ("mid", "first", "last")] == [8, 8, 9]
    assert rows[("moe", "sdpa", "mid")]["deferred_closures"] > 2 * 2  # attention's two and the experts'
    for r in rows.values():
        assert min(r["t_f"], r["t_b"], r["t_w"], r["t_bw"]) > 0, r
        assert 0 < r["mem_closures"] < r["mem_after_f"] and r["mem_after_w"] == 0, r  # B keeps a share, W frees it
        assert r["split_over_fused"] == pytest.approx((r["t_b"] + r["t_w"]) / r["t_bw"])


def test_profiles_are_emulates_and_follow_from_the_rows(dry_run):
    out, data = dry_run
    for name in ("dense", "moe"):
        model = balance.load_profile(str(out / f"{name}.profile.json"))
        mid = next(r for r in data["split"] if r["block_name"] == name and r["kind"] == "mid"
                   and r["attention"] == "sdpa")
        assert model.layer.f == pytest.approx(mid["t_f"] / 2) and model.layer.w == pytest.approx(mid["t_w"] / 2)
        assert model.fused == pytest.approx(mid["t_bw"] / (mid["t_b"] + mid["t_w"]))
        assert model.wgrad_memory == pytest.approx(mid["kept_for_w"])
        costs = parse_costs(data["pipeline_costs"][name])  # training's --pipeline-costs takes the string
        assert costs.f == pytest.approx(1e3 * mid["t_f"], rel=1e-3)


def test_gap_schedules_compute_megatrons_losses_and_gradients(dry_run):
    out, data = dry_run
    assert (out / "gap" / "log.rank1.txt").exists() and data["options"]["launch_on_cpu"] == ["gap"]  # launched
    m = data["options"]["microbatches"]
    ops = {"megatron-1f1b": 2 * m, "megatron-1f1b again": 2 * m, "1f1b": 2 * m, "zb-h1": 3 * m, "zbv": 6 * m,
           "zb-h1 just-in-time": 3 * m, "zbv just-in-time": 6 * m}  # receives just in time: the same ops, bits
    seen = {(r["seq"], r["variant"]) for r in data["gap"]}
    assert seen == {(s, v) for s in data["options"]["gap_seqs"] for v in ops}
    for r in data["gap"]:
        assert [s["ops"] for s in r["ranks"]] == [ops[r["variant"]]] * 2, r["variant"]
        if r["variant"] != "megatron-1f1b":
            vs = r["vs_megatron_1f1b"]
            assert vs["losses_bitwise"] and vs["grads_bitwise"] and vs["grads_compared"] > 10, (r["variant"], vs)


def test_offload_moves_what_its_plan_says_and_changes_no_bit(dry_run):
    _, data = dry_run
    rows = [r for r in data["offload"] if r["part"] == "offload"]
    assert [(r["schedule"], r["mode"]) for r in rows] == [
        (s, mode) for s in ("zb-h1", "zbv") for mode in ("off", "off again", "all", "auto")]
    for r in rows:
        if r["mode"] != "off":
            assert r["vs_off"]["losses_bitwise"] and r["vs_off"]["grads_bitwise"], r
        moved = sum(s["moved"] for s in r["ranks"]), sum(s["moved_w"] for s in r["ranks"])
        assert moved == (r["planned_keys"] - r["planned_w_shares"], r["planned_w_shares"]), r  # F's, W shares
        if r["mode"] == "all":  # every F, and every B's W share (the split's costs say W keeps some)
            fs = 2 * data["options"]["microbatches"] * (2 if r["schedule"] == "zbv" else 1)  # pp=2 ranks' F ops
            assert moved == (fs, fs), r
            assert r["costs"] == data["pipeline_costs"]["dense"]  # planned on the split part's measured costs


def test_offload_check_changes_no_bit_and_no_profiled_b(dry_run):
    """Issue 46's check, dry: with every F and W share offloaded and each freed block overwritten at
    once, gradients and losses bitwise those without offload, the profiled B memory the same, the
    pinned bytes reported, and the copy rate read from the run's own copies."""
    _, data = dry_run
    rows = data["offload-check"]
    assert [(r["schedule"], r["mode"]) for r in rows] == [(s, m) for s in ("zb-h1", "zbv") for m in ("off", "all")]
    for r in rows:
        assert all(s["profiled_b_mib"] for s in r["ranks"]), r  # the profile window measured B
        if r["mode"] == "all":
            assert r["vs_off"]["losses_bitwise"] and r["vs_off"]["grads_bitwise"], r
            assert r["profiled_b_equal"], r
            assert all(s["pinned_reported_mib"] > 0 and s["copy_gbps_in_run"] > 0 for s in r["ranks"]), r


def test_check_part_runs_gpu_checks_matrix(dry_run):
    _, data = dry_run
    matrix = data["check"]["matrix"]
    assert [r["schedule"] for r in matrix] == ["zbv"]  # --check-schedules reached it
    assert all(r["ok"] and r["losses_bitwise"] and r["grads_bitwise"] for r in matrix), matrix


def test_a_passed_deadline_reports_every_part_not_run(tmp_path):
    proc = _run("--cpu-dry-run", "--deadline-min", "0.01", "--out", str(tmp_path))
    assert proc.returncode == 1
    data = json.loads((tmp_path / "report.json").read_text())
    assert {s["status"] for s in data["parts"].values()} == {"not run"}
    assert all("deadline" in s["why"] for s in data["parts"].values())


@pytest.mark.parametrize("args, words", [(["--parts", "split,nope"], "--parts takes split, gap, offload, offload-check, check"),
                                         (["--blocks", "dense,big"], "--blocks takes dense, moe"),
                                         (["--gap-seqs", "0"], "--gap-seqs takes positive")])
def test_bad_input_is_one_line_naming_the_option(tmp_path, args, words):
    proc = _run("--cpu-dry-run", "--out", str(tmp_path), *args, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr
    assert not (tmp_path / "report.json").exists()
