"""The README's megatron-core example runs as printed and learns."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import megatron_reference as ref

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_minimal_megatron_core_example_trains_with_zbv():
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    out = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2",
                          os.path.join(ROOT, "examples", "minimal_megatron_core.py"), "zbv"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    losses = [float(x) for x in re.findall(r"zbv step +\d+ +loss ([0-9.]+)", out.stdout)]
    assert len(losses) == 30
    assert losses[-1] < 0.5 * losses[0]
