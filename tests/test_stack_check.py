"""primus_megatron/stack_check.py: the Python stack lines of the ROCm host check, on stand-ins.

torch and TransformerEngine are replaced in sys.modules by modules that answer as a ROCm build
would; megatron-core is this environment's (0.16.1 on 3.11 or 0.19.x on 3.12: both supported).
"""
from __future__ import annotations

import sys
import types

import pytest

from primus_megatron import stack_check as SC


def fake_torch(monkeypatch, hip, devices):
    torch = types.ModuleType("torch")
    torch.__version__ = "2.9.1+rocm7.1" if hip else "2.13.0+cpu"
    torch.version = types.SimpleNamespace(hip=hip)
    torch.cuda = types.SimpleNamespace(device_count=lambda: devices)
    monkeypatch.setitem(sys.modules, "torch", torch)


@pytest.mark.parametrize("hip, devices, gpus, levels", [
    ("7.1.25424", 8, 8, ["ok"]),
    ("7.1.25424", 8, None, ["ok"]),          # no KFD topology to compare with
    ("7.1.25424", 4, 8, ["ok", "FAIL"]),     # a visible-devices variable or a container flag hides GPUs
    ("7.1.25424", 0, None, ["ok", "FAIL"]),
    (None, 0, 8, ["FAIL"]),                  # PyPI's wheel on an Instinct node
])
def test_torch_must_be_a_rocm_build_that_sees_the_gpus(monkeypatch, hip, devices, gpus, levels):
    fake_torch(monkeypatch, hip, devices)
    lines = SC.torch_lines(gpus)
    assert [level for level, _ in lines] == levels, lines
    if hip is None:
        assert "not a ROCm build" in lines[0][1]


def test_megatron_core_supported_per_python():
    installed = sys.version_info[:2]
    assert [level for level, _ in SC.megatron_core_lines(installed)] == ["ok"]
    other = (3, 12) if installed == (3, 11) else (3, 11)  # the other leg's version is not this Python's
    level, text = SC.megatron_core_lines(other)[0]
    assert level == "WARN" and "not a version we test" in text


def test_amds_fork_is_recognised_by_its_pretrain_gpt(tmp_path):
    (tmp_path / "pretrain_gpt.py").write_text("# Copyright (c) 2025, Advanced Micro Devices, Inc.\n")
    assert SC._is_amd_fork(str(tmp_path))
    (tmp_path / "pretrain_gpt.py").write_text("# Copyright (c) 2025 NVIDIA CORPORATION & AFFILIATES.\n")
    assert not SC._is_amd_fork(str(tmp_path)) and not SC._is_amd_fork(str(tmp_path / "none"))


def test_transformer_engine_is_optional_and_its_gate_is_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformer_engine", None)  # import fails
    assert SC.te_lines(lambda: None)[0][0] == "WARN"
    te = types.ModuleType("transformer_engine")
    te.__version__ = "2.18.0.dev0+rocm"
    monkeypatch.setitem(sys.modules, "transformer_engine", te)
    assert SC.te_lines(lambda: None) == [("ok", "TransformerEngine 2.18.0.dev0+rocm: defers weight gradients "
                                                "(W ops accepted; FP8 with W ops stays refused)")]
    level, text = SC.te_lines(lambda: "it has no WeightGradStore")[0]
    assert level == "WARN" and "will be refused" in text and "WeightGradStore" in text


def test_gpus_counted_from_the_kfd_topology(tmp_path):
    nodes = tmp_path / "sys" / "class" / "kfd" / "kfd" / "topology" / "nodes"
    for n, version in enumerate(["0", "90402", "90402"]):
        (nodes / str(n)).mkdir(parents=True)
        (nodes / str(n) / "properties").write_text(f"cpu_cores_count 4\ngfx_target_version {version}\n")
    assert SC.kfd_gpus(str(tmp_path)) == 2 and SC.kfd_gpus(str(tmp_path / "none")) is None
