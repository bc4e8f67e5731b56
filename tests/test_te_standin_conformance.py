"""The TransformerEngine stand-in against real TransformerEngine, wherever real TE imports.

tests/te_standin claims to reproduce TE v2.11 (tests/te_standin/transformer_engine/__init__.py).
Where a real TransformerEngine is installed (a GPU machine), this runs the stand-in's scenarios
(tests/te_conformance_cases.py) once through the stand-in (CPU) and once through real TE (CUDA),
from the same seeded weights and inputs, and compares what each recorded: outputs, input
gradients, which gradients exist after B, the delayed weight and bias gradients after
backward_dw, main_grad under fuse_wgrad_accumulation and is_first_microbatch, attention (TE's
unfused backend: fp32), the norms, the types handed to put, and what raises (type and message).
Under FP8 (on a device that has it: the per-tensor recipes, delayed and tensorwise, formats
E4M3 and HYBRID, weight gradients delayed and fused into main_grad, the quantized weight cached
with is_first_microbatch; LayerNormLinear + Linear, and GroupedLinear with an expert given no rows
and an unaligned one whose weight-gradient GEMM raises) the facts are compared exactly (types and usages of what put holds,
which gradients exist when) and the values loosely (outputs, gradients, delayed scaling's scales
and amax histories: the same casts, rounded from fp32 values of another accumulation order). So the first GPU run also checks the stand-in.

Without a real TransformerEngine every case is skipped, with the reason (never passed).
Tensor/sequence parallelism is not compared here (it needs two GPUs).
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

import expected_skips
import te_conformance_cases as cases

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STANDIN = os.path.join(HERE, "te_standin")
CASES_SCRIPT = os.path.join(HERE, "te_conformance_cases.py")
RTOL, ATOL = 1e-4, 1e-5  # fp32 on CPU against fp32 cuBLAS / TE kernels (TF32 off)
# relative norm error of FP8 values: the stand-in casts as TE does, but an element whose value before
# the cast differs in its last fp32 bit (another accumulation order) may round to the next float8
# value, and cuBLASLt's FP8 accumulation is not the CPU's
FP8_REL = 0.1


def _env(standin: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != STANDIN]
    env["PYTHONPATH"] = os.pathsep.join(([STANDIN] if standin else []) + [ROOT] + path)
    return env


def real_te_unavailable() -> str | None:
    """Why real TransformerEngine cannot be compared here (None when it can)."""
    spec = importlib.util.find_spec("transformer_engine")
    if spec is None or (spec.origin or "").startswith(STANDIN):
        return "no real TransformerEngine installed (the stand-in is compared with it where TE imports: a GPU machine)"
    probe = subprocess.run([sys.executable, "-c", "import transformer_engine.pytorch, torch; "
                            "assert torch.cuda.is_available(), 'no CUDA device'"],
                           env=_env(standin=False), capture_output=True, text=True, timeout=600)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["(no output)"])[-1]
        return f"TransformerEngine is installed but cannot run here: {last}"
    return None


def _run(standin: bool, out: str) -> dict:
    proc = subprocess.run([sys.executable, CASES_SCRIPT, out], env=_env(standin), capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, f"{'stand-in' if standin else 'real TE'} cases failed:\n{proc.stderr[-3000:]}"
    return torch.load(out, weights_only=False)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    reason = real_te_unavailable()
    if reason:
        pytest.skip(expected_skips.reason("no-real-te", reason))
    work = tmp_path_factory.mktemp("te-conformance")
    standin, real = _run(True, str(work / "standin.pt")), _run(False, str(work / "real.pt"))
    assert standin["standin"] and not real["standin"]
    return standin, real


def compare(got, want, where: str = "", *, fp8: bool = False) -> list:
    """Differences between the stand-in's record (`got`) and real TE's (`want`), as sentences."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return [f"{where}: keys {sorted(got) if isinstance(got, dict) else got!r} vs {sorted(want)}"]
        return [d for k in want for d in compare(got[k], want[k], f"{where}.{k}", fp8=fp8)]
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return [f"{where}: {getattr(got, 'shape', got)} vs shape {tuple(want.shape)}"]
        if fp8:
            rel = float((got - want).norm() / want.norm().clamp_min(1e-12))
            return [] if rel <= FP8_REL else [f"{where}: relative error {rel:.3g} > {FP8_REL}"]
        if not torch.allclose(got, want, rtol=RTOL, atol=ATOL):
            return [f"{where}: max abs difference {float((got - want).abs().max()):.3g}"]
        return []
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return [f"{where}: {got!r} vs {want!r}"]
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in compare(g, w, f"{where}[{i}]", fp8=fp8)]
    return [] if got == want else [f"{where}: stand-in {got!r}, real TE {want!r}"]


@pytest.mark.parametrize("case", cases.CASES)
def test_standin_conforms_to_real_te(recorded, case):
    standin, real = recorded
    got, want = standin[case], real[case]
    if "error" in want or "error" in got:
        assert got.get("error") == want.get("error"), (
            f"TE {real['version']}: stand-in {got.get('error') or 'ran'}, real TE {want.get('error') or 'ran'}\n"
            f"{want.get('traceback') or got.get('traceback')}")
        return
    if "unavailable" in want["ok"]:
        pytest.skip(expected_skips.reason("real-te", f"real TE {real['version']}: {want['ok']['unavailable']}"))
    differences = compare(got["ok"], want["ok"], case, fp8=case.startswith("fp8"))
    assert not differences, f"stand-in vs TE {real['version']}:\n" + "\n".join(differences)
