"""scripts/setup_venv.sh (`make setup`): where .venv's torch comes from (TORCH), as dry runs.

Nothing is installed: PRIMUS_SETUP_DRY_RUN=1 prints the commands; PRIMUS_HOST_ROOT stands for a ROCm
node's driver files (/dev/kfd). `python` stand-ins answer the one question the script asks of PY.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETUP = os.path.join(ROOT, "scripts", "setup_venv.sh")


def setup(tmp_path, torch, py=sys.executable, rocm_node=False):
    host = tmp_path / "host"
    (host / "dev").mkdir(parents=True, exist_ok=True)
    if rocm_node:
        (host / "dev" / "kfd").write_text("")
    env = {**os.environ, "PRIMUS_SETUP_DRY_RUN": "1", "PRIMUS_HOST_ROOT": str(host), "TORCH": torch}
    proc = subprocess.run(["bash", SETUP, str(py), str(tmp_path / "venv")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def fake_python(tmp_path, hip):
    """A PY whose torch reports `hip` (empty: a CPU/CUDA build)."""
    py = tmp_path / "image-python"
    py.write_text("#!/bin/bash\n"
                  f'if [[ $1 == -c && $2 == *torch.version.hip* ]]; then echo "2.9.1+rocm7.1 {hip}"; exit 0; fi\n'
                  "exit 3\n")
    py.chmod(0o755)
    return py


def test_default_is_pypis_pinned_torch_but_refused_on_a_rocm_node(tmp_path):
    rc, out = setup(tmp_path, "auto")
    assert rc == 0 and "pip install -r requirements.txt -r requirements-megatron-lm.txt" in out, out
    assert "--system-site-packages" not in out
    rc, out = setup(tmp_path, "auto", rocm_node=True)
    assert rc == 2 and "this is a ROCm node" in out and "TORCH=system" in out and "pip install" not in out, out
    rc, out = setup(tmp_path, "pypi", rocm_node=True)  # asked for: a CPU venv there too
    assert rc == 0 and "requirements.txt -r requirements-megatron-lm.txt" in out, out


def test_system_takes_the_images_rocm_torch_and_installs_neither_torch_nor_triton(tmp_path):
    rc, out = setup(tmp_path, "system", py=fake_python(tmp_path, "7.1.25424"), rocm_node=True)
    assert rc == 0, out
    assert "torch 2.9.1+rocm7.1 (ROCm/HIP 7.1.25424)" in out and "-m venv --system-site-packages" in out
    pins = next(line for line in out.splitlines() if "requirements-without-torch.txt:" in line)
    assert "megatron-core==0.16.1" in pins and "torch==" not in pins and "triton" not in pins, pins
    assert "venv/bin/torchrun: python -m torch.distributed.run" in out  # ranks start with the venv's python
    rc, out = setup(tmp_path, "system", py=fake_python(tmp_path, ""), rocm_node=True)
    assert rc == 2 and "is not a ROCm build" in out, out


def test_an_index_url_installs_the_pinned_torch_from_it(tmp_path):
    url = "https://download.pytorch.org/whl/rocm7.1"
    rc, out = setup(tmp_path, url, rocm_node=True)
    assert rc == 0 and f"pip install torch==2.13.0 --index-url {url}" in out, out
    assert "pip install -r requirements.txt" not in out


@pytest.mark.parametrize("torch", ["rocm", "http://example.invalid/whl"])
def test_anything_else_is_one_sentence(tmp_path, torch):
    rc, out = setup(tmp_path, torch)
    assert rc == 2 and out.count("\n") == 1 and f"TORCH={torch}: allowed are auto, pypi, system" in out, out
