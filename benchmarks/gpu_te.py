"""TransformerEngine on one GPU in one device call (`make gpu-te`): unpacks the TE bundle built on a CPU
machine (`make gpu-te-bundle`, benchmarks/gpu_te_bundle.py) and runs, in order, what only real TE shows.

    python benchmarks/gpu_te.py --bundle PATH        # on the GPU machine: out/gpu_te/report.{md,json}
    python benchmarks/gpu_te.py --cpu-dry-run        # the same launch path on CPU, TE's stand-in in its place

The bundle is unpacked into a temporary directory (Python's tarfile, seconds; no pip, no package index): its
`site/` goes first on PYTHONPATH (TE 2.11.0 with its core library cut to sm_90, the binding compiled
against torch 2.11.0+cu130, pydantic, einops, megatron-core 0.19.2), the core's directory on
LD_LIBRARY_PATH, and its Megatron-LM core_v0.19.0 tree is MEGATRON_LM_PATH. Parts, each in processes
of its own with what is left of `--deadline-min` as its limit (gpu_bench.py's machinery: a part that
fails or hangs ends alone, the report is rewritten after each, so a short lease still leaves one):

1. `import`: the environment (gpu_check.environment: torch, CUDA, TE, FP8 support) and a TE Linear's
   forward and backward on the GPU in bf16 and, where the GPU has it, FP8 (delayed scaling): does the
   cut library load and run;
2. `conformance`: tests/test_te_standin_conformance.py, the CPU stand-in's scenarios through real TE
   (bf16, and FP8 with the delayed and tensorwise recipes in E4M3 and HYBRID);
3. `layers`: tests/test_gpu_te.py, megatron's TE layer spec at pp=2 on the one GPU (two ranks over gloo
   with host-staged transfers) under zb-h1, zbv and dualpipev, plain and under megatron's DDP, against
   megatron's own 1F1B, every loss and gradient, in fp32, bf16 and FP8 (delayed and tensorwise);
4. `split`: what the weight-gradient split costs with TE layers (gpu_split.py through gpu_bench.py's split
   process): (T_B + T_W) / T_BW and the memory held until W at the Llama-3-8B-like block in bf16 and
   FP8 (delayed, tensorwise) and at the Qwen3-30B-A3B-like block with TE's GroupedLinear experts in bf16,
   and their profiles (`primus-pipeline emulate --profile`, `make gpu-projection`);
5. `megatron-lm`: gpu_check.py's Megatron-LM part: Megatron-LM's own pretrain_gpt.py with TE layers
   (`--transformer-impl transformer_engine`) in bf16 and FP8 under zbv (`--megatron-lm-schedules`)
   against its own 1F1B, the two ranks as one-GPU nodes of their own.

A part may take what is left of the deadline, but at most PART_CAP_S of it, so a hang leaves time to
the parts after it; one that runs past it is stopped with every process it started.

`--cpu-dry-run` runs the same parts through the same launches on CPU with tests/te_standin in place of
the bundle, at toy sizes (`make gpu-te-dry-run`; tests/test_gpu_te_dry_run.py runs its import, split and
Megatron-LM parts): the import part runs the stand-in's Linear, conformance and layers skip themselves
(no real TE, no GPU), the split measures one chunk with FP8 emulated, and the Megatron-LM part starts
gpu_check.py without its Megatron-LM runs.
Output in --out: report.md, report.json, the parts' logs, and the TE profiles (`<case>.profile.json`).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import gpu_bench  # noqa: E402

PARTS = ("import", "conformance", "layers", "split", "megatron-lm")
STANDIN = os.path.join(ROOT, "tests", "te_standin")
MEGATRON_LM_TREE = "Megatron-LM-core_v0.19.0"
# (block, precision): TE layers in bf16 and FP8 at the dense block, TE's grouped experts in bf16 at the MoE one
TE_CASES = {"gpu": [("dense", "bf16"), ("dense", "fp8-delayed"), ("dense", "fp8-tensorwise"), ("moe", "bf16")],
            "dry": [("dense", "fp8-delayed")]}
PYTEST_PARTS = {"conformance": "tests/test_te_standin_conformance.py", "layers": "tests/test_gpu_te.py"}
# the most a part may take on the GPU (seconds), so one that hangs leaves time to the next; the last takes what is left
PART_CAP_S = {"import": 90, "conformance": 150, "layers": 180, "split": 150}


# -- the bundle ----------------------------------------------------------------------------------

def unpack(bundle: str, into: str) -> dict:
    """The bundle unpacked into `into`; the environment its parts run in. Python's tarfile, not the tar
    command: an image may lack xz; the zeroed GPU code comes back as holes either way (sparse members)."""
    import tarfile

    started = time.monotonic()
    with tarfile.open(bundle, "r:xz") as tar:
        tar.extractall(into, filter="data")
    site = os.path.join(into, "site")
    with open(os.path.join(into, "manifest.json")) as f:
        manifest = json.load(f)
    env = {"PYTHONPATH": site, "LD_LIBRARY_PATH": os.path.join(site, "transformer_engine", "wheel_lib"),
           "MEGATRON_LM_PATH": os.path.join(into, MEGATRON_LM_TREE), "MEGATRON_LM_TAG": "core_v0.19.0"}
    return {"seconds": round(time.monotonic() - started, 1), "env": env, "manifest": {
        k: manifest.get(k) for k in ("name", "built", "transformer_engine", "torch", "gpu_code")}}


def part_env(extra: dict) -> dict:
    """This process's environment with the bundle's (or the stand-in's) paths first."""
    env = dict(os.environ)
    for key, value in extra.items():
        if key in ("PYTHONPATH", "LD_LIBRARY_PATH") and env.get(key):
            value = value + os.pathsep + env[key]
        env[key] = value
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


# -- 1. import -----------------------------------------------------------------------------------

def import_probe(out: str) -> int:
    """The import part's process: the environment, then a TE Linear forward and backward (bf16, FP8)."""
    import gpu_check

    result = {"environment": gpu_check.environment(), "runs": []}
    try:
        import torch
        import transformer_engine.pytorch as te

        device = "cuda" if torch.cuda.is_available() else "cpu"
        for fp8 in (False, True):
            result["runs"].append(_linear_run(te, torch, device, fp8))
    except Exception as exc:  # noqa: BLE001 (the report says what failed)
        result["error"] = f"{type(exc).__name__}: {exc}"
    with open(out, "w") as f:
        json.dump(result, f, indent=1, default=str)
    return 0 if "error" not in result and all(r.get("ok") for r in result["runs"]) else 1


def _linear_run(te, torch, device: str, fp8: bool) -> dict:
    import contextlib

    from transformer_engine.common.recipe import DelayedScaling

    if fp8:
        emulate = getattr(__import__("transformer_engine.pytorch.quantization", fromlist=["x"]),
                          "emulate_fp8_device", None)  # the stand-in's, on CPU
        available, why = te.fp8.check_fp8_support() if emulate is None else (True, "")
        if not available:
            return {"precision": "fp8", "ok": None, "why": why}
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    layer = te.Linear(256, 512, params_dtype=dtype, device=device)
    x = torch.randn(128, 256, device=device, dtype=dtype, requires_grad=True)
    ctx = te.fp8_autocast(enabled=True, fp8_recipe=DelayedScaling()) if fp8 else contextlib.nullcontext()
    with (emulate() if fp8 and emulate is not None else contextlib.nullcontext()), ctx:
        y = layer(x)
    y.float().square().mean().backward()
    if device == "cuda":
        torch.cuda.synchronize()
    want = (x.float() @ layer.weight.float().t() + layer.bias.float())
    rel = float((y.float() - want).norm() / want.norm())
    ok = bool(torch.isfinite(layer.weight.grad).all()) and x.grad is not None and rel < (0.1 if fp8 else 0.02)
    return {"precision": "fp8-delayed" if fp8 else str(dtype).removeprefix("torch."), "ok": ok,
            "output_rel_error": rel, "device": device}


def _run_import(opts: dict, where: str, timeout_s: float) -> tuple[dict, Optional[str]]:
    out = os.path.join(where, "import.json")
    why = gpu_bench.part_process([sys.executable, os.path.abspath(__file__), "--import-probe", out],
                                 os.path.join(where, "log.txt"), timeout_s, env=opts["env"])
    data = {}
    if os.path.isfile(out):
        with open(out) as f:
            data = json.load(f)
    if data.get("error"):  # what the probe caught says more than its exit status
        why = f"{data['error']} (log: {os.path.join(where, 'log.txt')})"
    return data, why


# -- 2-3. the pytest parts -----------------------------------------------------------------------

def _run_pytest(part: str, opts: dict, where: str, timeout_s: float) -> tuple[list, Optional[str]]:
    """One test file in its own pytest process; each test's outcome from its JUnit XML."""
    xml = os.path.join(where, "junit.xml")
    args = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", f"--junitxml={xml}",
            os.path.join(ROOT, PYTEST_PARTS[part])]
    # status 1: a test failed, which the rows say
    why = gpu_bench.part_process(args, os.path.join(where, "log.txt"), timeout_s, ok=(0, 1), env=opts["env"])
    rows = junit_rows(xml) if os.path.isfile(xml) else []
    failed = [r for r in rows if r["outcome"] in ("failed", "error")]
    if why is None and failed:
        why = f"{len(failed)} of {len(rows)} failed: " + "; ".join(f"{r['test']}: {r['message']}" for r in failed[:3])
    elif why is None and opts["gpu"] and rows and all(r["outcome"] == "skipped" for r in rows):
        why = f"all {len(rows)} skipped: {rows[0]['message']}"  # on the GPU that is a finding, not a pass
    return rows, why


def junit_rows(path: str) -> list:
    """(test, outcome, one-line message) of each test case in a JUnit XML file."""
    rows = []
    for case in ET.parse(path).iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = gpu_bench.one_line(found.get("message") or found.text or "")
                break
        rows.append({"test": case.get("name"), "outcome": outcome, "seconds": float(case.get("time") or 0),
                     "message": message})
    return rows


# -- 4. split ------------------------------------------------------------------------------------

def _run_split(opts: dict, where: str, timeout_s: float) -> tuple[dict, Optional[str]]:
    import gpu_blocks as G
    import gpu_split

    case = {"gpu": opts["gpu"], "dry_run": not opts["gpu"], "blocks": [], "te_cases": opts["te_cases"],
            "repeats": opts["repeats"], "warmup": opts["warmup"], "emulate_fp8": not opts["gpu"]}
    if not opts["gpu"]:
        case["kinds"] = ["mid"]  # the dry run: one chunk, the code path, not a profile
    rows, why = gpu_bench.run_split(case, where, timeout_s, env=opts["env"])
    profiles = {}
    for name, precision in opts["te_cases"]:
        mine = [r for r in rows if r["block_name"] == name and r["precision"] == precision]
        if {r["kind"] for r in mine} == set(gpu_split.KINDS):
            block = G.blocks(not opts["gpu"])[name]
            profile = gpu_split.profile_of(mine, block, link_gbps=50.0, device_name=opts["device"])
            profile["meta"].update(layers="transformer_engine", precision=precision)
            profiles[f"{name}-te-{precision}"] = profile
            with open(os.path.join(opts["out"], f"{name}-te-{precision}.profile.json"), "w") as f:
                json.dump(profile, f, indent=2)
    return {"rows": rows, "profiles": profiles}, why


# -- 5. Megatron-LM ------------------------------------------------------------------------------

def _run_megatron_lm(opts: dict, where: str, timeout_s: float) -> tuple[dict, Optional[str]]:
    """gpu_check.py's Megatron-LM part alone (no schedule matrix): TE layers, bf16 and FP8."""
    args = [sys.executable, os.path.join(HERE, "gpu_check.py"), "--pps", "2", "--inits", "eager", "--knobs", "unset",
            "--no-matrix", "--out", where, "--deadline-min", f"{max(0.5, timeout_s / 60 - 0.5):.2f}"]
    if opts["gpu"]:
        args += ["--megatron-lm", "--megatron-lm-schedules", opts["megatron_lm_schedules"]]
    else:  # the dry run: the launch and the report; Megatron-LM's own CPU run is tests/test_gpu_check.py's
        args += ["--cpu-dry-run", "--no-megatron-lm"]
    # status 1: a run failed, which its report says
    why = gpu_bench.part_process(args, os.path.join(where, "console.txt"), timeout_s + 30, ok=(0, 1),
                                 env=opts["env"])
    report = os.path.join(where, "report.json")
    data = {}
    if os.path.isfile(report):
        with open(report) as f:
            data = json.load(f)
    failed = [r for r in data.get("megatron_lm") or [] if not r.get("ok")]
    if why is None and failed:
        why = f"{len(failed)} Megatron-LM run(s) failed: " + "; ".join(
            f"{r['schedule']} {r.get('precision', '')}: {r.get('error', '')}" for r in failed[:3])
    return data, why


# -- report --------------------------------------------------------------------------------------

def _pytest_section(title: str, rows: list) -> list:
    from _common import table

    counts = {o: sum(1 for r in rows if r["outcome"] == o) for o in ("passed", "failed", "error", "skipped")}
    summary = ", ".join(f"{n} {o}" for o, n in counts.items() if n) or "no tests ran"
    return ["", f"## {title}", "", summary + ".", "",
            table(["test", "outcome", "s", "message"], [[r["test"], r["outcome"], f"{r['seconds']:.1f}", r["message"]]
                                                         for r in rows])]


def _split_section(split: dict) -> list:
    import gpu_split
    from _common import table

    rows = split.get("rows") or []
    if not rows:
        return []
    body = gpu_bench.split_rows({"split": rows})
    lines = ["", "## Split backward against TE's own backward, TE layers (one chunk = 2 layers, medians)", "",
             table(["precision", *gpu_bench.SPLIT_HEADERS], [[r["precision"], *b] for r, b in zip(rows, body)])]
    if split.get("profiles"):
        costs = {n: gpu_split.pipeline_costs(p) for n, p in split["profiles"].items()}
        lines += ["", "Profiles (`primus-pipeline emulate --profile`, `make gpu-projection`):", "",
                  table(gpu_bench.PROFILE_HEADERS, gpu_bench.profile_rows({"profiles": split["profiles"],
                                                                           "pipeline_costs": costs}))]
    return lines


def report_markdown(data: dict) -> str:
    from _common import table

    env = data.get("environment") or {}
    gpus = ", ".join(f"{g['name']} ({g['memory_gib']} GiB)" for g in env.get("gpus", [])) or (
        "none (CPU dry run)" if data["dry_run"] else "none visible")
    bundle = data["bundle"]
    lines = [f"# TransformerEngine on the GPU ({data['when']}{', CPU dry run' if data['dry_run'] else ''})", "",
             f"Bundle: {bundle['manifest'].get('name')} (built {bundle['manifest'].get('built')}, "
             f"{bundle['manifest'].get('gpu_code')}), unpacked in {bundle['seconds']} s.", ""]
    if env:
        lines += [f"Device: {gpus}; torch {env.get('torch')} (CUDA {env.get('cuda')}), megatron-core "
                  f"{env.get('megatron_core')}, TransformerEngine {env.get('transformer_engine')}, "
                  f"Python {env.get('python')}.", ""]
    lines.append(gpu_bench.parts_table(data))
    runs = (data.get("import") or {}).get("runs") or []
    if runs:
        lines += ["", "## A TE Linear on the device", "",
                  table(["precision", "ok", "output rel. error", "device"],
                        [[r["precision"], r["ok"], f"{r['output_rel_error']:.2e}" if "output_rel_error" in r
                          else r.get("why", "-"), r.get("device", "-")] for r in runs])]
    if data.get("conformance"):
        lines += _pytest_section("The stand-in against real TE (tests/test_te_standin_conformance.py)",
                                 data["conformance"])
    if data.get("layers"):
        lines += _pytest_section("TE layers under our schedules against megatron's 1F1B (tests/test_gpu_te.py)",
                                 data["layers"])
    lines += _split_section(data.get("split") or {})
    check = data.get("megatron-lm") or {}
    if check.get("megatron_lm"):
        import gpu_check

        text = gpu_check.report_markdown(check)
        lines += ["", "## Megatron-LM pretrain_gpt.py with TE layers (gpu_check.py)",
                  text.split("\n", 1)[1] if "\n" in text else text]
    lines += ["", f"Command: `{data['command']}`", ""]
    return "\n".join(lines)


# -- main ----------------------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # bad input: one line naming the option, status 2
        print(f"gpu_te: error: {message}", file=sys.stderr)
        sys.exit(2)


def default_bundle() -> Optional[str]:
    """$PRIMUS_TE_BUNDLE, else a bundle carried into the checkout's .te-bundle/, else the one built here."""
    import glob

    import gpu_te_bundle

    if os.environ.get("PRIMUS_TE_BUNDLE"):
        return os.environ["PRIMUS_TE_BUNDLE"]
    carried = sorted(glob.glob(os.path.join(ROOT, ".te-bundle", "gpu-te-*.tar.xz")))
    built = gpu_te_bundle.bundle_paths()[0]
    return carried[-1] if carried else built if os.path.isfile(built) else None


def parse(argv) -> argparse.Namespace:
    parser = _Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-dry-run", action="store_true", help="on CPU with TE's stand-in (the suite's)")
    parser.add_argument("--bundle", help="the TE bundle (default: $PRIMUS_TE_BUNDLE, .te-bundle/gpu-te-*.tar.xz, "
                                         "or the one `make gpu-te-bundle` built here)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)} (default all)")
    parser.add_argument("--megatron-lm-schedules", default="zbv",
                        help="the Megatron-LM part's schedules, each against megatron's 1F1B in bf16 and FP8 "
                             "(default zbv: each is two launches of pretrain_gpt.py)")
    parser.add_argument("--deadline-min", type=float, default=8.0,
                        help="minutes for the whole run, unpacking included (default 8)")
    parser.add_argument("--out", default=os.path.join(ROOT, "out", "gpu_te"))
    parser.add_argument("--import-probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.parts_list = [p for p in args.parts.split(",") if p]
    if not args.parts_list or any(p not in PARTS for p in args.parts_list):
        parser.error(f"--parts takes {', '.join(PARTS)} (comma-separated), got {args.parts}")
    if args.deadline_min <= 0:
        parser.error("--deadline-min must be positive")
    if not args.cpu_dry_run and not args.import_probe:
        args.bundle = args.bundle or default_bundle()
        if not args.bundle or not os.path.isfile(args.bundle):
            parser.error(f"--bundle names no file ({args.bundle or 'none found'}): build one with `make gpu-te-bundle` "
                         f"and carry it into .te-bundle/ (docs/transformer-engine.md)")
    return args


def _setup(args, tmp: str) -> tuple[dict, dict]:
    """(the bundle's record, the parts' options): the bundle unpacked, or the stand-in for the dry run."""
    gpu = not args.cpu_dry_run
    if gpu:
        bundle = unpack(args.bundle, tmp)
    else:
        bundle = {"seconds": 0.0, "env": {"PYTHONPATH": STANDIN},
                  "manifest": {"name": "tests/te_standin (the CPU stand-in of TE 2.11)", "built": "-", "gpu_code": "-"}}
    opts = {"gpu": gpu, "env": part_env(bundle["env"]), "te_cases": TE_CASES["gpu" if gpu else "dry"],
            "repeats": 5 if gpu else 1, "warmup": 2 if gpu else 0, "out": args.out, "device": "cpu",
            "megatron_lm_schedules": args.megatron_lm_schedules}
    return bundle, opts


def main(argv=None) -> int:
    args = parse(argv)
    if args.import_probe:
        return import_probe(args.import_probe)
    os.makedirs(args.out, exist_ok=True)
    deadline = time.monotonic() + 60 * args.deadline_min
    with tempfile.TemporaryDirectory(prefix="gpu-te-") as tmp:
        bundle, opts = _setup(args, tmp)
        data = {"when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                "dry_run": not opts["gpu"], "bundle": {k: v for k, v in bundle.items() if k != "env"},
                "command": " ".join(["python", "benchmarks/gpu_te.py", *(argv if argv is not None else sys.argv[1:])]),
                "parts": {p: {"status": "not run", "why": "not asked for (--parts)"} for p in PARTS}}
        runners = {"import": _run_import, "split": _run_split, "megatron-lm": _run_megatron_lm}

        def run_one(part: str, left: float) -> Optional[str]:
            where = os.path.join(args.out, part)
            os.makedirs(where, exist_ok=True)
            left = min(left, PART_CAP_S.get(part, left))
            if part in PYTEST_PARTS:
                data[part], why = _run_pytest(part, opts, where, left)
            else:
                data[part], why = runners[part](opts, where, left)
            if part == "import" and data[part].get("environment"):
                data["environment"] = data[part]["environment"]
                opts["device"] = (data["environment"].get("gpus") or [{"name": "cpu"}])[0]["name"]
            return why

        gpu_bench.run_parts("gpu_te", data, args.parts_list, deadline, run_one,
                            lambda: gpu_bench.write_report(data, args.out, report_markdown))
    print(gpu_bench.write_report(data, args.out, report_markdown))
    failed = [p for p in args.parts_list if data["parts"][p]["status"] != "ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
