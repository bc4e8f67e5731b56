#!/usr/bin/env bash
# First-ROCm-run checklist, step 1 (examples/slurm/README.md): is this AMD Instinct node set up as
# AMD's MI300X workload optimization guide asks, before anything of ours runs? Run it on each node
# (`srun -N <nodes> --ntasks-per-node 1 bash examples/slurm/rocm_host_check.sh`). Prints one line per
# check (ok / WARN / FAIL); exits 1 if any check fails. The host checks need nothing from ROCm's user
# space (the amdgpu driver's files in /dev, /proc and /sys only); the last ones ask the Python that will
# train (PRIMUS_PYTHON). PRIMUS_HOST_ROOT prefixes every path (tests).
set -u
R=${PRIMUS_HOST_ROOT:-}
failed=0
ok() { echo "ok    $*"; }
warn() { echo "WARN  $*"; }
fail() { echo "FAIL  $*"; failed=1; }

# the compute interface: ROCm's runtime opens /dev/kfd; each GPU has a render node
if [[ -e $R/dev/kfd ]]; then ok "/dev/kfd present (amdgpu's KFD)"; else fail "/dev/kfd missing: the amdgpu driver's compute interface is not up"; fi
ls "$R"/dev/dri/renderD* >/dev/null 2>&1 && ok "render nodes: $(ls "$R"/dev/dri/ | grep -c '^renderD')" \
    || fail "no /dev/dri/renderD* render nodes"

# GPU targets from the KFD topology (the kernel's amdkfd kfd_topology.c writes gfx_target_version =
# major*10000 + minor*100 + stepping; the CPU nodes show 0)
targets=$(awk '$1 == "gfx_target_version" && $2 != 0 {v = $2; printf "gfx%d%d%x\n", int(v / 10000), int(v / 100) % 100, v % 100}' \
    "$R"/sys/class/kfd/kfd/topology/nodes/*/properties 2>/dev/null | sort | uniq -c | awk '{print $1 " x " $2}' | paste -sd, -)
[[ -n $targets ]] && ok "GPU targets: $targets" || fail "no GPU in the KFD topology (/sys/class/kfd/kfd/topology/nodes)"

# NUMA auto-balancing off (the guide: it migrates pages under running kernels and costs throughput)
nb=$(cat "$R"/proc/sys/kernel/numa_balancing 2>/dev/null || echo "?")
[[ $nb == 0 ]] && ok "NUMA auto-balancing off" \
    || fail "NUMA auto-balancing is '$nb': the guide turns it off (sudo sh -c 'echo 0 > /proc/sys/kernel/numa_balancing')"

# the IOMMU in pass-through mode for device DMA (the guide's kernel command line: iommu=pt)
cmdline=$(cat "$R"/proc/cmdline 2>/dev/null || true)
if [[ " $cmdline " == *" iommu=pt "* || " $cmdline " == *" amd_iommu=off "* ]]; then
    ok "IOMMU: $(grep -o -E '(amd_)?iommu=[^ ]+' <<<"$cmdline" | paste -sd' ' -)"
else
    warn "the kernel command line has no iommu=pt (the guide boots MI300X nodes with it; DMA through a translating IOMMU is slower)"
fi

# MEC firmware (MI300: RCCL kernels failed with scratch reclaim on firmware older than 177, ROCm 6.4.3's
# release notes; the sbatch turns reclaim off on gfx942/gfx950 anyway). amdgpu prints it in hex.
mec=$(cat "$R"/sys/class/drm/card*/device/fw_version/mec_fw_version 2>/dev/null | sort -u | paste -sd, -)
[[ -n $mec ]] && ok "MEC firmware: $mec (MI300: 177 = 0xb1 or newer wanted)" || warn "MEC firmware version not readable"

# visible-device variables: ROCm's torch takes HIP_VISIBLE_DEVICES over CUDA_VISIBLE_DEVICES, and
# ROCR_VISIBLE_DEVICES filters below both; one left over from a base image hides GPUs
for v in HIP_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES GPU_DEVICE_ORDINAL; do
    [[ -n ${!v:-} ]] && warn "$v=${!v} is set: every rank sees only these devices (unset it unless you meant it)"
done
# the Python stack that will train (primus_megatron/stack_check.py): a ROCm torch seeing the GPUs,
# NVIDIA's megatron-core at a version we support, TransformerEngine able to defer weight gradients.
# PRIMUS_PYTHON names it (default: python3 on PATH); in a container, run this script through your launch
# prefix so that the image's Python answers.
PY=${PRIMUS_PYTHON:-python3}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if command -v "$PY" >/dev/null 2>&1; then
    PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH} timeout 300 "$PY" -m primus_megatron.stack_check 2>&1 || failed=1
else
    fail "no $PY on PATH: set PRIMUS_PYTHON to the Python that will train (docs/amd.md)"
fi
exit $failed
