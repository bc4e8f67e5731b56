"""compat.cpu_training: CPU mode for Megatron-LM's training loop (unit level; the loop
itself runs in tests/test_megatron_lm_e2e.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import megatron_reference as ref
from primus_megatron.compat import cpu_training

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("argv, cuda, expected", [
    (["--cpu", "--num-layers", "4"], True, True),
    (["--distributed-backend", "gloo"], False, True),
    (["--distributed-backend=gloo"], False, True),
    (["--distributed-backend", "gloo"], True, False),   # gloo on a GPU machine: the user's choice, not CPU mode
    (["--distributed-backend", "nccl"], False, False),
    ([], False, False),
])
def test_cpu_mode_is_requested_by_cpu_or_gloo_without_cuda(monkeypatch, argv, cuda, expected):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert cpu_training.requested(argv) is expected


@pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")
def test_enable_training_patches_the_cuda_call_sites():
    """In a fresh process (the changes are process-wide): megatron-core's timers and rerun
    state machine see one CPU 'CUDA' device, tensors asked for on cuda land on CPU,
    .cuda() keeps tensors where they are, checkpoints are written in-process."""
    script = r'''
import torch
from primus_megatron.compat import cpu
cpu.enable(training=True)
from megatron.core import timers, rerun_state_machine as rsm
from megatron.core.dist_checkpointing.strategies import filesystem_async as fa
t = timers.torch
assert t.cuda.is_available() and t.cuda.device_count() == 1 and t.cuda.current_device() == torch.device("cpu")
t.cuda.set_device(0); t.cuda.empty_cache(); t.cuda.synchronize()
assert t.cuda.memory_allocated() == 0 and t.cuda.max_memory_reserved() == 0 and t.cuda.memory_stats() == {}
s = t.cuda.Stream(); s.wait_stream(t.cuda.current_stream())
with t.cuda.stream(s):
    pass
assert t.rand(3, device="cuda").device.type == "cpu" and t.tensor([1], device="cuda").device.type == "cpu"
assert rsm.torch is t and torch.equal(t.cuda.get_rng_state(), torch.get_rng_state())
x = torch.ones(2)
assert x.cuda() is x and x.cuda(non_blocking=True) is x
m = torch.nn.Linear(2, 2).cuda(t.cuda.current_device())
assert m.weight.device.type == "cpu"
import queue
assert isinstance(fa._get_write_results_queue(), queue.Queue)
from primus_megatron.compat import cpu_training
assert cpu.is_enabled() and cpu_training.is_enabled()
print("OK")
'''
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", script], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]
