"""The skips the suite expects, and when: any other skip fails the session (tests/conftest.py).

A skip counted as a pass hides a broken install: about twenty modules skip themselves when
megatron-core does not import, so a leg whose megatron-core is broken would otherwise end
green. Both CI legs (`make test-py311`, `make test-py312`) run with this check.

Declaring an expected skip: give the skip a reason made by `reason(CONDITION, text)`, e.g.

    pytestmark = pytest.mark.skipif(not gpu, reason=expected_skips.reason("no-cuda-te", "needs a GPU ..."))
    pytest.skip(expected_skips.reason("megatron-core<0.19", "GTP weight sharding is 0.19's"))

which reads "[expected when no-cuda-te] needs a GPU ...". CONDITION is a key of CONDITIONS
below: a description and a check of the environment written independently of the test's own
skip test. At the end of the session every skip is sorted:

* expected: its reason names a condition that holds here;
* unexpected (the session fails, each listed with its reason): no condition named, an unknown
  one, or one that does not hold (say a megatron-core 0.19 feature test skipped under 0.19).

A new kind of expected skip (another accelerator, an optional package) adds its condition here.
A listed skip that runs instead is fine (a GPU machine runs the GPU tests).
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
from typing import Callable, Optional


def _megatron_core_older_than(major: int, minor: int) -> bool:
    from importlib import metadata

    try:
        version = metadata.version("megatron-core")
    except metadata.PackageNotFoundError:
        return False  # no megatron-core is never an expected condition
    numbers = [int(n) for n in re.findall(r"\d+", version)[:2]]
    return tuple(numbers) < (major, minor)


def _no_cuda_or_te() -> bool:
    import torch

    return not torch.cuda.is_available() or importlib.util.find_spec("transformer_engine") is None


def _real_te_installed() -> bool:
    spec = importlib.util.find_spec("transformer_engine")
    return spec is not None and "te_standin" not in (spec.origin or "")


def _no_cuda() -> bool:
    import torch

    return not torch.cuda.is_available()


def _no_real_te_on_cuda() -> bool:
    """No real TransformerEngine that can run here: none importable (or only the test stand-in),
    or no CUDA device for it."""
    return not _real_te_installed() or _no_cuda()


def _no_fp8_gpu() -> bool:
    """No GPU that TE runs FP8 on (compute capability 8.9 or newer, CUDA) with a real TE."""
    import torch

    if _no_real_te_on_cuda() or torch.version.hip:
        return True
    return torch.cuda.get_device_capability(0) < (8, 9)


def _slurm_unavailable() -> bool:
    if os.environ.get("PRIMUS_SKIP_SLURM") == "1":
        return True
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return True
    return not (shutil.which("slurmd") or os.path.exists("/usr/sbin/slurmd")) and not shutil.which("apt-get")


def _no_te_bundle() -> bool:
    """No TransformerEngine bundle built on this machine (`make gpu-te-bundle` puts one in its cache)."""
    import glob

    cache = os.environ.get("PRIMUS_TE_BUNDLE_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "primus_megatron", "te-bundle")
    return not glob.glob(os.path.join(cache, "gpu-te-*.tar.xz"))


def _no_sailsg_checkout() -> bool:
    root = os.environ.get("PRIMUS_SAILSG_CHECKOUT", "")
    return not (root and os.path.isfile(os.path.join(root, "megatron", "core", "pipeline_parallel", "zerobubble",
                                                      "scheduler", "zbv.py")))


# condition -> (when it holds, in words; the check)
CONDITIONS: dict[str, tuple[str, Callable[[], bool]]] = {
    "no-cuda-te": ("no CUDA GPU or no TransformerEngine (the CPU machines)", _no_cuda_or_te),
    "real-te": ("a real TransformerEngine is installed (the CPU stand-in cannot load)", _real_te_installed),
    "no-cuda": ("no CUDA (or HIP) device", _no_cuda),
    "no-real-te": ("no real TransformerEngine that runs here (none installed, or no GPU for it)", _no_real_te_on_cuda),
    "no-cuda-fp8": ("no CUDA GPU with FP8 (compute capability 8.9+) and a real TransformerEngine", _no_fp8_gpu),
    "megatron-core<0.19": ("the installed megatron-core is older than 0.19 (leg 1: 0.16.1)",
                           lambda: _megatron_core_older_than(0, 19)),
    "no-slurm": ("PRIMUS_SKIP_SLURM=1, not root, or neither SLURM nor apt-get", _slurm_unavailable),
    "no-te-bundle": ("no TransformerEngine bundle built here (`make gpu-te-bundle` builds one into "
                     "~/.cache/primus_megatron/te-bundle)", _no_te_bundle),
    "no-sailsg": ("PRIMUS_SAILSG_CHECKOUT does not name a checkout of sail-sg/zero-bubble-pipeline-parallelism",
                  _no_sailsg_checkout),
}

_PREFIX = re.compile(r"^\[expected when ([^\]]+)\] ")


def reason(condition: str, text: str) -> str:
    """A skip reason the session accepts while `condition` (a key of CONDITIONS) holds."""
    if condition not in CONDITIONS:
        raise KeyError(f"unknown expected-skip condition {condition!r}; known: {sorted(CONDITIONS)}")
    return f"[expected when {condition}] {text}"


def condition_of(skip_reason: str) -> Optional[str]:
    """The condition a skip reason declares, or None."""
    found = _PREFIX.match(skip_reason.removeprefix("Skipped: "))
    return found.group(1) if found else None


def unexpected_because(skip_reason: str) -> Optional[str]:
    """Why a skip with this reason is unexpected here, or None when it is expected."""
    condition = condition_of(skip_reason)
    if condition is None:
        return "no expected-skip condition declared"
    if condition not in CONDITIONS:
        return f"unknown condition {condition!r}"
    words, holds = CONDITIONS[condition]
    if not holds():
        return f"declared expected when {condition} ({words}), which does not hold here"
    return None
