#!/usr/bin/env bash
# `make setup`'s virtualenv: requirements.txt + requirements-megatron-lm.txt + this package (editable),
# with torch from TORCH (docs/amd.md):
#   auto    (default) PyPI's pinned wheel (requirements.txt), except on a ROCm node (the amdgpu driver's
#           /dev/kfd or /sys/class/kfd), where that wheel sees no GPU: refused there, naming the two below
#   pypi    PyPI's pinned wheel, wherever (a CPU dry run on a ROCm login node, say)
#   system  the torch of the interpreter PY, e.g. a ROCm image's python3: the venv sees its site-packages
#           (--system-site-packages), and neither torch nor triton is installed over them
#   URL     (https://...) torch at requirements.txt's pin from that index, e.g. PyTorch's ROCm wheels
# Installed over a ROCm torch: not triton (ROCm's torch brings its own, pytorch-triton-rocm), nor
# TransformerEngine (ROCm's is built from source or comes with the image).
#
#   scripts/setup_venv.sh PY VENV        (the Makefile passes $(PY) $(VENV); TORCH from the environment)
# PRIMUS_SETUP_DRY_RUN=1 prints the commands instead of running them; PRIMUS_HOST_ROOT prefixes /dev and
# /sys (tests).
set -euo pipefail
PY=$1
VENV=$2
TORCH=${TORCH:-auto}
R=${PRIMUS_HOST_ROOT:-}
NAME="make setup"
die() { echo "$NAME: error: $*" >&2; exit 2; }
run() {
    if [[ ${PRIMUS_SETUP_DRY_RUN:-0} == 1 ]]; then echo "+ $*"; else "$@"; fi
}

rocm_node() { [[ -e $R/dev/kfd || -d $R/sys/class/kfd ]]; }
PIN=$(sed -n 's/^torch==\([^ ]*\).*/\1/p' requirements.txt)

case $TORCH in
    auto)
        if rocm_node; then
            die "this is a ROCm node (amdgpu's KFD) and PyPI's torch wheel would see no GPU here: run 'make setup TORCH=system PY=python3' with a ROCm image's python3 (its torch and TransformerEngine are used), or 'make setup TORCH=https://download.pytorch.org/whl/rocmX.Y' with the ROCm index PyTorch lists for torch $PIN, or 'make setup TORCH=pypi' for a CPU-only venv (docs/amd.md)"
        fi
        TORCH=pypi ;;
    pypi | system | https://*) ;;
    *) die "TORCH=$TORCH: allowed are auto, pypi, system (the interpreter PY's own torch) or an https:// package index URL" ;;
esac

if [[ $TORCH == system ]]; then
    # what the interpreter has: "VERSION HIP" (HIP empty for a CUDA or CPU build)
    found=$("$PY" -c 'import torch; print(torch.__version__, torch.version.hip or "")' 2>/dev/null) \
        || die "TORCH=system: $PY cannot import torch; give PY=<the python of your ROCm image or environment>"
    read -r version hip <<<"$found"
    if rocm_node && [[ -z ${hip:-} ]]; then
        die "TORCH=system: $PY's torch $version is not a ROCm build (torch.version.hip is None) and this is a ROCm node; use a ROCm image's python3 or TORCH=<a ROCm index URL>"
    fi
    echo "$NAME: torch $version${hip:+ (ROCm/HIP $hip)} from $PY, seen through --system-site-packages"
fi

[[ -x $VENV/bin/python ]] || run "$PY" -m venv $([[ $TORCH == system ]] && echo --system-site-packages) "$VENV"
run "$VENV/bin/python" -m pip install --upgrade pip
if [[ $TORCH == pypi ]]; then
    run "$VENV/bin/python" -m pip install -r requirements.txt -r requirements-megatron-lm.txt
else
    [[ $TORCH == https://* ]] && run "$VENV/bin/python" -m pip install "torch==$PIN" --index-url "$TORCH"
    # the same pins but torch and triton, which the ROCm torch above brings
    if [[ ${PRIMUS_SETUP_DRY_RUN:-0} == 1 ]]; then
        echo "+ $VENV/requirements-without-torch.txt: $(grep -Ehv '^(torch|triton)==|^#|^$' requirements.txt requirements-megatron-lm.txt | cut -d' ' -f1 | paste -sd' ' -)"
    else
        grep -Ehv '^(torch|triton)==' requirements.txt requirements-megatron-lm.txt >"$VENV/requirements-without-torch.txt"
    fi
    run "$VENV/bin/python" -m pip install -r "$VENV/requirements-without-torch.txt"
fi
run "$VENV/bin/python" -m pip install --no-deps --no-build-isolation -e .
# Megatron-LM builds its dataset helpers with `python3-config` from PATH: give the venv the
# interpreter's own (a pyenv shim would answer for the Python of the checkout's .python-version).
run "$VENV/bin/python" -c 'import os, sys, sysconfig
src = os.path.join(sysconfig.get_config_var("BINDIR"), "python3-config")
dst = os.path.join(os.path.dirname(sys.executable), "python3-config")
if os.path.exists(src) and not os.path.lexists(dst):
    os.symlink(src, dst)'
if [[ $TORCH == system ]]; then
    # torch's console scripts stay with the interpreter PY; a torchrun here starts the ranks with this
    # venv's python (megatron-core and the rest are only here), also inside a container given PATH
    if [[ ${PRIMUS_SETUP_DRY_RUN:-0} == 1 ]]; then echo "+ $VENV/bin/torchrun: python -m torch.distributed.run"
    else printf '#!/bin/sh\nexec "$(dirname "$0")/python" -m torch.distributed.run "$@"\n' >"$VENV/bin/torchrun"
        chmod +x "$VENV/bin/torchrun"
    fi
fi
if [[ $TORCH != pypi ]]; then
    run "$VENV/bin/python" -c 'import torch; print("make setup: torch", torch.__version__, "HIP", torch.version.hip)'
fi
