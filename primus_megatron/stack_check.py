"""The Python stack of an AMD Instinct node, checked (examples/slurm/rocm_host_check.sh runs it).

`python -m primus_megatron.stack_check` prints one `ok` / `WARN` / `FAIL` line per component, as the
host check does, and exits 1 on a FAIL: a ROCm build of torch that sees the GPUs, a megatron-core we
support (NVIDIA's, not the one of AMD's Megatron-LM fork), TransformerEngine that can defer weight
gradients (docs/amd.md has the versions). Run it with the Python that will train (the image's,
through the container prefix; or the venv's).
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import Callable, Optional

Line = tuple[str, str]  # (level: "ok" | "WARN" | "FAIL", text)
SUPPORTED_CORE = {(3, 11): "0.16.1", (3, 12): "0.19"}  # Python -> megatron-core: 0.16.1, or 0.19.x on 3.12+


def torch_lines(gpus: Optional[int]) -> list[Line]:
    """A ROCm torch (torch.version.hip) that sees `gpus` devices (the KFD topology's count, if known)."""
    try:
        torch = importlib.import_module("torch")
    except Exception as exc:  # noqa: BLE001 - not installed or broken: said, not raised
        return [("FAIL", f"torch does not import ({exc}): use the ROCm image's python or make setup TORCH=... "
                         "(docs/amd.md)")]
    hip = getattr(torch.version, "hip", None)
    if not hip:
        return [("FAIL", f"torch {torch.__version__} is not a ROCm build (torch.version.hip is None: PyPI's "
                         "wheel sees no AMD GPU); use the ROCm image's or PyTorch's ROCm index (docs/amd.md)")]
    seen = torch.cuda.device_count()
    lines = [("ok", f"torch {torch.__version__}, HIP {hip}, {seen} GPU(s) visible")]
    if seen == 0 or (gpus is not None and seen != gpus):
        lines.append(("FAIL", f"torch sees {seen} GPU(s) where the KFD topology has {gpus}: check "
                              "HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES and the container's --device flags"))
    return lines


def megatron_core_lines(python: tuple[int, int] = sys.version_info[:2]) -> list[Line]:
    """NVIDIA's megatron-core at a version we test with this Python; AMD's fork's is named."""
    try:
        core = importlib.import_module("megatron.core")
        from megatron.core.package_info import __version__ as version
    except Exception as exc:  # noqa: BLE001
        return [("FAIL", f"megatron-core does not import ({exc}): pip install megatron-core==0.16.1 (Python 3.11) "
                         "or megatron-core==0.19.* (3.12)")]
    home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(core.__file__))))
    if _is_amd_fork(home):
        return [("FAIL", f"megatron-core {version} comes from AMD's Megatron-LM fork ({home}), which primus_megatron "
                         "does not support: pip install NVIDIA's megatron-core (docs/amd.md)")]
    wanted = SUPPORTED_CORE[(3, 12)] if python >= (3, 12) else SUPPORTED_CORE.get(python)
    ok = wanted is not None and (version == wanted or version.startswith(wanted + "."))
    text = f"megatron-core {version} on Python {python[0]}.{python[1]}"
    return [("ok", text)] if ok else [("WARN", f"{text}: not a version we test (0.16.1 on 3.11, 0.19.x on 3.12)")]


def _is_amd_fork(checkout: str) -> bool:
    """AMD's fork carries AMD's copyright in its pretrain_gpt.py (a checkout installed editable)."""
    try:
        with open(os.path.join(checkout, "pretrain_gpt.py"), encoding="utf-8", errors="replace") as f:
            return "Advanced Micro Devices" in f.read(4000)
    except OSError:
        return False


def te_lines(problem: Callable[[], Optional[str]]) -> list[Line]:
    """TransformerEngine (optional: local layers need none) and whether it can defer weight gradients."""
    try:
        te = importlib.import_module("transformer_engine")
    except Exception:  # noqa: BLE001
        return [("WARN", "no TransformerEngine: --transformer-impl local only (ROCm's is built from "
                         "ROCm/TransformerEngine or comes with the image; docs/amd.md)")]
    found = f"TransformerEngine {getattr(te, '__version__', '?')}"
    why = problem()
    if why is not None:
        return [("WARN", f"{found}: schedules with W ops will be refused with its layers: {why}")]
    return [("ok", f"{found}: defers weight gradients (W ops accepted; FP8 with W ops stays refused)")]


def kfd_gpus(root: str = "") -> Optional[int]:
    """GPUs in the KFD topology (nodes with a non-zero gfx_target_version), None without one."""
    base = f"{root}/sys/class/kfd/kfd/topology/nodes"
    if not os.path.isdir(base):
        return None
    count = 0
    for node in os.listdir(base):
        try:
            with open(os.path.join(base, node, "properties")) as f:
                count += any(line.split()[:1] == ["gfx_target_version"] and line.split()[1] != "0" for line in f)
        except OSError:
            continue
    return count


def _te_problem() -> Optional[str]:
    """Our start-up gate's answer for a schedule with W ops (runtime/te_wgrad.py)."""
    try:
        from .runtime import te_wgrad
    except Exception as exc:  # noqa: BLE001 - torch or megatron-core missing: said above
        return f"primus_megatron's runtime does not import ({exc})"
    return te_wgrad.support_problem("--pipeline-schedule zbv")


def main() -> int:
    lines = [*torch_lines(kfd_gpus(os.environ.get("PRIMUS_HOST_ROOT", ""))), *megatron_core_lines(),
             *te_lines(_te_problem)]
    for level, text in lines:
        print(f"{level:<5} {text}")
    return 1 if any(level == "FAIL" for level, _ in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
