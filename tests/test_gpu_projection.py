"""benchmarks/gpu_projection.py: a GPU's measured costs turned into projected step-time ratios.

A synthetic profile (layer F = B = 1 ms, W = 0.5 ms, fused backward at 0.95 of B + W), given as a
gpu_bench.py report and as a profile file: every pp and m asked gets a ratio for every schedule,
zb-h1's ratio against megatron's 1F1B matches the planner's own simulation of both at the same
stage costs (computed here, not copied), the baselines' fused backward counts, and bad input
stops with exit status 2 and one line naming the option.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys

import pytest

from primus_megatron.schedules import balance, generate, simulate
from primus_megatron.schedules.layer_split import LayerSplit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu_projection.py")
_spec = importlib.util.spec_from_file_location("gpu_projection_benchmark", SCRIPT)
gp = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = gp  # its dataclass looks its module up while the module runs
_spec.loader.exec_module(gp)

LAYER = {"f": 1e-3, "b": 1e-3, "w": 0.5e-3}
HEAD = {"f": 0.5e-3, "b": 0.5e-3, "w": 0.5e-3}
COMM, FUSED, WGRAD = 0.05e-3, 0.95, 0.6
PPS, M_PER_PP = (4, 8), (2, 4)


def _profile(model: str = "synthetic dense") -> dict:
    return {"format": "primus-pipeline-profile/1",
            "costs": {"layer": dict(LAYER), "embedding": {"f": 0.0, "b": 0.0, "w": 0.0}, "head": dict(HEAD),
                      "comm": COMM, "head_memory": 0.5, "fused": FUSED, "wgrad_memory": WGRAD},
            "meta": {"num_layers": 32, "model": model, "link_gbps_assumed": 50, "device": "synthetic"}}


def _write(path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpu_projection")
    report = {"when": "2026-01-01 00:00 UTC", "dry_run": False, "device": "Synthetic GPU",
              "environment": {"gpus": [{"name": "Synthetic GPU", "memory_gib": 80}]},
              "profiles": {"dense": _profile()}}
    return {"dir": d, "report": _write(d / "report.json", report),
            "profile": _write(d / "dense.profile.json", _profile()),
            "empty": _write(d / "empty.json", {**report, "profiles": {}})}


def _main(argv) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = gp.main(argv)
    return rc, out.getvalue()


@pytest.fixture(scope="module")
def projected(files):
    """One run from the report (writing the section into a scratch markdown file) and one from the
    profile file; (JSON of the first, its stdout, JSON of the second, the scratch markdown)."""
    d = files["dir"]
    grid = ["--pps", ",".join(map(str, PPS)), "--m-per-pp", ",".join(map(str, M_PER_PP))]
    rc, text = _main(["--report", files["report"], *grid, "--json", str(d / "a.json"),
                      "--markdown", str(d / "BENCH.md")])
    assert rc == 0
    rc2, _ = _main(["--profile", files["profile"], *grid, "--json", str(d / "b.json"), "--no-markdown"])
    assert rc2 == 0
    return (json.loads((d / "a.json").read_text()), text, json.loads((d / "b.json").read_text()),
            (d / "BENCH.md").read_text())


def _cell(data, pp, m, block=0):
    cells = [c for c in data["blocks"][block]["cells"] if c["pp"] == pp and c["microbatches"] == m]
    assert len(cells) == 1
    return cells[0]


def _independent(pp: int, m: int, fused: float = FUSED) -> dict:
    """Makespan of each schedule simulated here on the stage costs of 4 layers per rank."""
    model = balance.ModelCosts(layer=balance.Part(**LAYER), head=balance.Part(**HEAD), comm=COMM, head_memory=0.5,
                               fused=fused, wgrad_memory=WGRAD)
    out = {}
    for name, chunks in (("1f1b", 1), ("interleaved-1f1b", 2), ("zb-h1", 1)):
        costs = balance.stage_costs(model, LayerSplit(4 * pp), pp, chunks)
        out[name] = simulate(generate(name, pp, m, costs=costs), costs).makespan
    return out


def test_every_pp_and_m_gets_a_ratio_for_every_schedule(projected):
    data, text, _, _ = projected
    names = [n.strip() for n in gp.DEFAULT_SCHEDULES.split(",")]
    cells = data["blocks"][0]["cells"]
    assert sorted((c["pp"], c["microbatches"]) for c in cells) == sorted((p, k * p) for p in PPS for k in M_PER_PP)
    for c in cells:
        assert c["num_layers"] == 4 * c["pp"]
        assert list(c["schedules"]) == names
        for name, row in c["schedules"].items():
            assert "error" not in row, (c["pp"], c["microbatches"], name, row)
            assert row["vs_megatron_1f1b"] > 0 and row["vs_megatron_interleaved"] > 0
            assert 0.0 <= row["bubble_rate"] < 1.0
        assert c["schedules"]["1f1b"]["vs_megatron_1f1b"] == pytest.approx(1.0)
        assert c["schedules"]["interleaved-1f1b"]["vs_megatron_interleaved"] == pytest.approx(1.0)
        assert c["schedules"]["1f1b"]["peak_memory_vs_1f1b"] == pytest.approx(1.0)
    # the markdown: the section's table has a row per schedule and a column per (pp, m)
    assert "### synthetic dense (`dense`)" in text
    for p in PPS:
        for k in M_PER_PP:
            assert f"pp={p}, m={k * p}" in text
    assert "megatron 1F1B (`1f1b`)" in text and "megatron interleaved (2 chunks) (`interleaved-1f1b`)" in text
    assert "num_layers = 4 x pp" in text and "What this does not show" in text


def test_zb_h1_ratio_is_the_planners_own_simulation(projected):
    data = projected[0]
    pp, m = 8, 32
    row = _cell(data, pp, m)["schedules"]["zb-h1"]
    mine = _independent(pp, m)
    assert row["vs_megatron_1f1b"] == pytest.approx(mine["1f1b"] / mine["zb-h1"], rel=1e-9)
    assert row["vs_megatron_interleaved"] == pytest.approx(mine["interleaved-1f1b"] / mine["zb-h1"], rel=1e-9)
    assert row["vs_megatron_1f1b"] > 1.0  # W is a third of the backward: ZB-H1 fills 1F1B's cool-down
    assert row["makespan_s"] == pytest.approx(mine["zb-h1"], rel=1e-9)


def test_the_baselines_run_megatrons_fused_backward(projected):
    """With fused < 1 the baselines are faster than B + W would make them: every zero-bubble ratio
    grows when the split overhead is taken away (fused = 1), and by what the planner says."""
    data = projected[0]
    pp, m = 8, 32
    unfused = _independent(pp, m, fused=1.0)
    fused = _independent(pp, m)
    assert unfused["1f1b"] > fused["1f1b"]
    row = _cell(data, pp, m)["schedules"]["zb-h1"]
    assert row["fused_1"]["vs_megatron_1f1b"] == pytest.approx(unfused["1f1b"] / unfused["zb-h1"], rel=1e-9)
    for c in data["blocks"][0]["cells"]:
        for name in ("zb-h1", "zbv"):
            r = c["schedules"][name]
            assert r["fused_1"]["vs_megatron_1f1b"] > r["vs_megatron_1f1b"]
            assert r["fused_1"]["vs_megatron_interleaved"] > r["vs_megatron_interleaved"]


def test_a_profile_file_projects_as_the_report_does(projected):
    a, _, b, _ = projected
    assert a["source"]["device"] == "Synthetic GPU"
    assert len(b["blocks"]) == 1 and b["blocks"][0]["block"] == "dense"
    for ca, cb in zip(a["blocks"][0]["cells"], b["blocks"][0]["cells"]):
        for name, ra in ca["schedules"].items():
            assert cb["schedules"][name]["makespan_s"] == pytest.approx(ra["makespan_s"], rel=1e-12)


def test_the_section_goes_into_the_markdown_file(projected):
    _, text, _, md = projected
    assert md.startswith("# Benchmarks")
    assert gp.SECTION in md and "| `zbv` |" in md


def _cli(*argv):
    return subprocess.run([sys.executable, SCRIPT, *argv, "--no-markdown"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("case,option", [
    (("--schedules", "zb-h1,zbx"), "--schedules"),
    (("--pps", "8,one"), "--pps"),
])
def test_bad_options_are_one_line_exit_2(files, case, option):
    done = _cli("--report", files["report"], *case)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0], done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.parametrize("which,fragment", [("empty", "has no profiles"), ("missing", "does not exist")])
def test_a_report_without_profiles_is_refused(files, which, fragment):
    path = files["empty"] if which == "empty" else str(files["dir"] / "nowhere.json")
    done = _cli("--report", path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--report" in lines[0] and fragment in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_balanced_gives_each_schedule_its_own_fastest_split(files):
    """--balanced: each schedule and baseline on the fastest split balance.choose finds for it, the
    ratio that of those two iterations (computed here with the planner)."""
    d = files["dir"]
    rc, _ = _main(["--profile", files["profile"], "--pps", "4", "--m-per-pp", "2", "--schedules", "zb-h1",
                   "--balanced", "--json", str(d / "c.json"), "--no-markdown"])
    assert rc == 0
    cell = json.loads((d / "c.json").read_text())["blocks"][0]["cells"][0]
    model = balance.load_profile(files["profile"])
    ours, _ = balance.choose("zb-h1", 4, 8, model, 16)
    theirs, _ = balance.choose("1f1b", 4, 8, model, 16)
    row = cell["balanced"]["zb-h1"]
    assert row["vs_megatron_1f1b"] == pytest.approx(theirs.iteration / ours.iteration, rel=1e-9)
    assert row["split"] == (balance.flags(ours.split) or "even")
    assert set(cell["balanced"]) == {"1f1b", "interleaved-1f1b", "zb-h1"}
