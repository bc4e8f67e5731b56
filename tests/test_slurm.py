"""examples/slurm/pretrain_gpt.sbatch under a real SLURM.

The launch logic (repository discovery, GPU count, rendezvous, argument pass-through, CPU mode)
is checked everywhere with a dry run and a stand-in `scontrol`. The end-to-end test starts a
single-node SLURM cluster on this machine with tests/slurm/slurm_local.sh (installing slurm-wlm and
munge with apt-get if needed), submits the sbatch script in CPU mode with 2 processes (pp=2,
zbv) and checks the job's exit code and its per-iteration losses. (4 processes at pp=4 until 2026-11-29:
each process imports torch and megatron-core, about 9 s of CPU, and what the job shows - the script
finding the repository, srun and torchrun starting the ranks it asks for, training - is the same with 2;
the dry runs above check the process count it computes.) It needs root; set
PRIMUS_SKIP_SLURM=1 to skip it. This file sorts last in tests/, and the cluster is stopped by a
fixture finalizer whatever happens, so no daemons are left behind.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import stat
import subprocess
import sys
import time

import pytest

import expected_skips

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SBATCH = os.path.join(ROOT, "examples", "slurm", "pretrain_gpt.sbatch")
SLURM_LOCAL = os.path.join(ROOT, "tests", "slurm", "slurm_local.sh")
DATA = os.path.join(ROOT, "out", "data", "corpus_text_document")
# the test cluster: its own directory and ports, so that it never touches a cluster a developer
# started with tests/slurm/slurm_local.sh (default /tmp/primus-slurm, ports 16817/16818)
CLUSTER_ENV = {"PRIMUS_SLURM_DIR": "/tmp/primus-slurm-pytest", "PRIMUS_SLURMCTLD_PORT": "16837",
               "PRIMUS_SLURMD_PORT": "16838", "PRIMUS_SLURM_TIMEOUT": "90"}
START_TIMEOUT_S = 900   # includes apt-get install (about 15-60 s with a reachable mirror)
JOB_TIMEOUT_S = 300     # the 2-process CPU job takes about 15 s on 2 cores
TRAIN_ITERS = 3
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE"}
LOSS_LINE = re.compile(r"^ iteration\s+(\d+)/\s*(\d+) \|.*\blm loss: ([-+0-9.eE]+|nan|inf)")


def _clean_env(**extra):
    """This environment without SLURM_* (a CI job may itself run under SLURM) plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and not k.startswith("PRIMUS_")}
    env.update(extra)
    return env


def _tail(text, n=60):
    return "\n".join(text.splitlines()[-n:])


# ---------------------------------------------------------------------------------------------
# launch logic: dry runs with a stand-in scontrol (no SLURM, no root needed)

@pytest.fixture
def fake_slurm(tmp_path):
    """A copy of the sbatch script outside the repository (as slurmd runs it, from its spool) and
    a stand-in `scontrol` that expands `node[1-2]` and reports the submitted command."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    scontrol = bindir / "scontrol"
    scontrol.write_text(
        "#!/bin/bash\n"
        'if [[ $1 == show && $2 == hostnames ]]; then printf "node1\\nnode2\\n"; exit 0; fi\n'
        f'if [[ $1 == show && $2 == job ]]; then echo "JobId=42 JobName=x Command={SBATCH} --cpu WorkDir=/x"; exit 0; fi\n'
        "exit 1\n")
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IXUSR)
    spool = tmp_path / "spool"
    spool.mkdir()
    script = spool / "slurm_script"
    shutil.copy(SBATCH, script)
    submit = tmp_path / "submit"
    submit.mkdir()

    # a virtualenv whose python has a ROCm torch (torch.version.hip) as far as the script asks
    rocm = tmp_path / "rocm-venv" / "bin"
    rocm.mkdir(parents=True)
    (rocm / "python").write_text(
        "#!/bin/bash\n"
        'if [[ $1 == -c && $2 == *torch.version.hip* ]]; then echo 6.4.43482; exit 0; fi\n'
        f'exec {sys.executable} "$@"\n')
    (rocm / "python").chmod(0o755)
    os.symlink(shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun"),
               rocm / "torchrun")

    def run(*args, path_first=None, **env):
        if env.get("PRIMUS_ROCM") == "1" and "PRIMUS_VENV" not in env and "PRIMUS_LAUNCH_PREFIX" not in env:
            env["PRIMUS_VENV"] = str(rocm.parent)
        path = ":".join([str(bindir), *([path_first] if path_first else []), os.environ["PATH"]])
        full = _clean_env(PATH=path, SLURM_JOB_ID="42", SLURM_JOB_NODELIST="node[1-2]",
                          SLURM_NNODES="2", SLURM_SUBMIT_DIR=str(submit), SLURM_CPUS_PER_TASK="16",
                          PRIMUS_DRY_RUN="1", **env)
        proc = subprocess.run(["bash", str(script), *args], cwd=submit, env=full, capture_output=True, text=True,
                              timeout=180)
        return proc.returncode, proc.stdout + proc.stderr

    run.rocm_bin = str(rocm)
    return run


def test_sbatch_script_syntax():
    subprocess.run(["bash", "-n", SBATCH], check=True, timeout=30)
    subprocess.run(["bash", "-n", SLURM_LOCAL], check=True, timeout=30)
    if shutil.which("shellcheck"):
        proc = subprocess.run(["shellcheck", SBATCH, SLURM_LOCAL], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_gpu_launch_from_allocation(fake_slurm):
    rc, out = fake_slurm("--pipeline-schedule", "zbv", "--pipeline-model-parallel-size", "16",
                         SLURM_GPUS_PER_NODE="mi300x:8", PRIMUS_ROCM="1")
    assert rc == 0, out
    assert f"repository {ROOT}," in out
    launch = next(line for line in out.splitlines() if "launch:" in line)
    assert "srun --nodes 2 --ntasks 2 --ntasks-per-node 1 --kill-on-bad-exit=1 --cpus-per-task 16 " in launch
    assert ("--nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint node1:20042 --rdzv-id 42 "
            in launch)
    assert launch.endswith("examples/pretrain_gpt.py --pipeline-schedule zbv --pipeline-model-parallel-size 16")
    for var in ("CUDA_DEVICE_MAX_CONNECTIONS=1", "RCCL_MSCCL_ENABLE=0", "GPU_MAX_HW_QUEUES=2"):
        assert f"env {var}" in out, out
    assert "HSA_ENABLE_SDMA" not in out  # copies stay on the DMA engines (issue 45 item 6)


def test_a_non_rocm_torch_on_a_rocm_node_is_refused_before_launch(fake_slurm):
    """Issue 45 item 2: PyPI's torch (this machine's CPU build here) on a ROCm node sees no GPU; the script
    says so in one sentence before launching anything."""
    rc, out = fake_slurm("--mock-data", SLURM_GPUS_PER_NODE="8", PRIMUS_ROCM="1", PRIMUS_VENV=os.path.dirname(
        os.path.dirname(sys.executable)))
    assert rc != 0 and "built without ROCm" in out and "launch:" not in out, out
    assert "make setup TORCH=system" in out  # how to build a venv with ROCm's torch instead


def test_rocm_target_from_sysfs_and_scratch_reclaim_on_mi355(fake_slurm, tmp_path):
    """Issue 45 item 7: the GPU target from the KFD topology (no rocminfo on PATH), HSA_NO_SCRATCH_RECLAIM=1
    on gfx950 (MI350X/MI355X) as on gfx942."""
    topology = tmp_path / "topology"
    for node, version in (("0", "0"), ("1", "90500")):  # node 0: the CPU
        (topology / node).mkdir(parents=True)
        (topology / node / "properties").write_text(f"cpu_cores_count 0\ngfx_target_version {version}\n")
    rc, out = fake_slurm("--mock-data", SLURM_GPUS_PER_NODE="8", PRIMUS_ROCM="1", PRIMUS_KFD_TOPOLOGY=str(topology))
    assert rc == 0, out
    assert "ROCm GPU target gfx950" in out and "env HSA_NO_SCRATCH_RECLAIM=1" in out, out


def test_launch_inside_a_container(fake_slurm):
    """Issue 45 item 8: PRIMUS_LAUNCH_PREFIX runs torchrun inside the image on each node (the image's torch:
    not checked on the host); PRIMUS_SRUN_ARGS passes srun options such as pyxis's."""
    rc, out = fake_slurm("--mock-data", SLURM_GPUS_PER_NODE="8", PRIMUS_ROCM="1",
                         PRIMUS_LAUNCH_PREFIX="apptainer exec --rocm /img/rocm.sif", PRIMUS_SRUN_ARGS="--mpi=none")
    assert rc == 0, out
    launch = next(line for line in out.splitlines() if "launch:" in line)
    assert "--cpus-per-task 16 --mpi=none apptainer exec --rocm /img/rocm.sif torchrun --nnodes 2 " in launch, launch
    if os.path.join(ROOT, ".venv", "bin") not in os.environ["PATH"].split(":"):
        # make setup's .venv is not put first on the PATH the container inherits (issue 59 item 3)
        assert f"python {ROOT}/.venv/bin/python" not in out, out


def test_a_rocm_node_takes_a_rocm_torch_on_path_over_make_setups_default_venv(fake_slurm):
    """Issue 59 item 3: make setup's .venv (without TORCH=...: PyPI's torch, no ROCm) would be first on
    PATH by default; on a ROCm node the script takes a ROCm torch found on PATH outside it, and says so."""
    default = os.path.join(ROOT, ".venv", "bin", "python")
    cpu_default = os.path.exists(default) and not _torch_hip(os.path.join(ROOT, ".venv"))
    rc, out = fake_slurm("--mock-data", SLURM_GPUS_PER_NODE="8", PRIMUS_ROCM="1", PRIMUS_VENV="",
                         path_first=fake_slurm.rocm_bin)
    assert rc == 0, out
    launch = next(line for line in out.splitlines() if "launch:" in line)
    assert f"{fake_slurm.rocm_bin}/torchrun --nnodes 2 " in launch, launch
    assert ("'s torch is not a ROCm build (make setup without TORCH=...): using "
            f"{fake_slurm.rocm_bin}/python from PATH, whose torch has HIP 6.4.43482" in out) == cpu_default, out


def _torch_hip(venv: str):
    """torch.version.hip of the torch in `venv`, read from its torch/version.py (importing torch for it costs
    a few seconds of CPU; the file is what torch.version is). None: a build without ROCm, or no torch there."""
    import glob

    for path in glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "torch", "version.py")):
        m = re.search(r"^hip\b[^=]*=\s*(.+)$", open(path).read(), re.M)
        return None if m is None or m.group(1).strip() == "None" else m.group(1).strip().strip("'\"")
    return None


def test_launch_inside_a_pyxis_container(fake_slurm):
    """Issue 45 item 8: with pyxis the container comes from srun's --container-image; the host's python
    (this machine's CPU torch: it would be refused on a ROCm node) is not the one that runs and is not
    checked, and torchrun is the image's."""
    venv = os.path.dirname(os.path.dirname(sys.executable))
    rc, out = fake_slurm("--mock-data", SLURM_GPUS_PER_NODE="8", PRIMUS_ROCM="1", PRIMUS_VENV=venv,
                         PRIMUS_SRUN_ARGS="--container-image=rocm/primus:v26 --container-mounts=/work:/work")
    assert rc == 0 and "built without ROCm" not in out, out
    launch = next(line for line in out.splitlines() if "launch:" in line)
    assert "--container-image=rocm/primus:v26 --container-mounts=/work:/work torchrun --nnodes 2 " in launch, launch


def test_a_docker_launch_passes_the_environment_in(fake_slurm):
    """`docker run` starts from the image's environment: the queue, scratch and collective settings the
    script exports (and what the caller set, e.g. NCCL_SOCKET_IFNAME) are passed by name."""
    rc, out = fake_slurm("--mock-data", SLURM_GPUS_PER_NODE="8", PRIMUS_ROCM="1", PRIMUS_ROCM_ARCH="gfx950",
                         NCCL_SOCKET_IFNAME="ens",
                         PRIMUS_LAUNCH_PREFIX="docker run --rm --network=host --device=/dev/kfd rocm/primus:v26")
    assert rc == 0, out
    launch = next(line for line in out.splitlines() if "launch:" in line)
    for name in ("GPU_MAX_HW_QUEUES", "TORCH_NCCL_HIGH_PRIORITY", "HSA_NO_SCRATCH_RECLAIM", "NCCL_SOCKET_IFNAME",
                 "CUDA_DEVICE_MAX_CONNECTIONS", "PYTHONPATH"):
        assert f" -e {name} " in launch, (name, launch)
    assert launch.index("docker run -e ") < launch.index("--rm --network=host --device=/dev/kfd rocm/primus:v26 "
                                                          "torchrun --nnodes 2 "), launch


def test_rocm_detected_from_the_kfd_driver_alone(fake_slurm, tmp_path):
    """A node whose ROCm user space is only in the image (no /opt/rocm, no rocm-smi) still has the amdgpu
    driver's KFD (/dev/kfd, /sys/class/kfd): its ROCm settings are set."""
    kfd = tmp_path / "kfd"
    kfd.mkdir()
    rc, out = fake_slurm("--mock-data", SLURM_GPUS_PER_NODE="8", PRIMUS_KFD_SYSFS=str(kfd),
                         PRIMUS_LAUNCH_PREFIX="apptainer exec --rocm /img/rocm.sif")
    assert rc == 0 and "env GPU_MAX_HW_QUEUES=2" in out, out
    if os.path.exists("/dev/kfd") or os.path.isdir("/opt/rocm") or shutil.which("rocm-smi"):
        return  # this host is a ROCm node itself: the control below does not apply
    rc, out = fake_slurm("--mock-data", SLURM_GPUS_PER_NODE="8", PRIMUS_KFD_SYSFS=str(tmp_path / "none"),
                         PRIMUS_LAUNCH_PREFIX="apptainer exec --rocm /img/rocm.sif")
    assert rc == 0 and "GPU_MAX_HW_QUEUES" not in out, out


HOST_CHECK = os.path.join(ROOT, "examples", "slurm", "rocm_host_check.sh")


def _fake_host(root, *, numa="0", cmdline="BOOT_IMAGE=/vmlinuz root=/dev/sda1 iommu=pt", gpus=8):
    """An AMD Instinct node's driver files under `root` (what rocm_host_check.sh reads)."""
    (root / "dev" / "dri").mkdir(parents=True)
    (root / "dev" / "kfd").write_text("")
    (root / "proc" / "sys" / "kernel").mkdir(parents=True)
    (root / "proc" / "sys" / "kernel" / "numa_balancing").write_text(numa + "\n")
    (root / "proc" / "cmdline").write_text(cmdline + "\n")
    nodes = root / "sys" / "class" / "kfd" / "kfd" / "topology" / "nodes"
    for n in range(gpus + 1):  # node 0: the CPU
        (nodes / str(n)).mkdir(parents=True)
        (nodes / str(n) / "properties").write_text(f"gfx_target_version {0 if n == 0 else 90402}\n")
        if n:
            (root / "dev" / "dri" / f"renderD{127 + n}").write_text("")
            fw = root / "sys" / "class" / "drm" / f"card{n}" / "device" / "fw_version"
            fw.mkdir(parents=True)
            (fw / "mec_fw_version").write_text("0x000000b2\n")


def _stack_ok(root):
    """A PRIMUS_PYTHON whose stack check reports a ROCm stack (the host checks are what these tests look at)."""
    py = root / "python-ok"
    py.write_text("#!/bin/bash\necho 'ok    torch 2.9.1+rocm7.1, HIP 7.1.25424, 8 GPU(s) visible'\n")
    py.chmod(0o755)
    return str(py)


@pytest.mark.parametrize("fault, expected", [
    ({}, None),
    ({"numa": "1"}, "FAIL  NUMA auto-balancing is '1'"),
    ({"cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1"}, "WARN  the kernel command line has no iommu=pt"),
    ({"gpus": 0}, "FAIL  no GPU in the KFD topology"),
])
def test_the_rocm_host_check_names_what_is_off(tmp_path, fault, expected):
    """Step 1 of the first-ROCm-run checklist, one command: a node set up as AMD's MI300X guide asks
    passes; each setting that is off is named (FAIL ends it with exit 1, WARN does not)."""
    _fake_host(tmp_path, **fault)
    env = {k: v for k, v in os.environ.items() if not k.endswith("VISIBLE_DEVICES")}
    proc = subprocess.run(["bash", HOST_CHECK], env={**env, "PRIMUS_HOST_ROOT": str(tmp_path),
                                                     "PRIMUS_PYTHON": _stack_ok(tmp_path)},
                          capture_output=True, text=True, timeout=60)
    out = proc.stdout
    if expected is None:
        assert proc.returncode == 0 and "FAIL" not in out and "WARN" not in out, out
        assert "GPU targets: 8 x gfx942" in out and "IOMMU: iommu=pt" in out and "0x000000b2" in out, out
    else:
        assert expected in out and proc.returncode == (1 if expected.startswith("FAIL") else 0), out


def test_the_rocm_host_check_names_an_inherited_visible_device_variable(tmp_path):
    _fake_host(tmp_path)
    proc = subprocess.run(["bash", HOST_CHECK], env={**os.environ, "PRIMUS_HOST_ROOT": str(tmp_path),
                                                     "HIP_VISIBLE_DEVICES": "0", "PRIMUS_PYTHON": _stack_ok(tmp_path)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "WARN  HIP_VISIBLE_DEVICES=0 is set" in proc.stdout, proc.stdout


def test_the_rocm_host_check_asks_the_python_that_will_train(tmp_path):
    """Issue 59 item 3: the host check ends with the Python stack (primus_megatron/stack_check.py) of
    PRIMUS_PYTHON: this machine's CPU torch on an Instinct node is a FAIL naming the fix, exit 1."""
    _fake_host(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.endswith("VISIBLE_DEVICES")}
    proc = subprocess.run(["bash", HOST_CHECK], env={**env, "PRIMUS_HOST_ROOT": str(tmp_path),
                                                     "PRIMUS_PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "FAIL  torch 2.13.0" in proc.stdout and "is not a ROCm build" in proc.stdout, \
        proc.stdout + proc.stderr
    assert "ok    megatron-core 0." in proc.stdout  # the stack check went on past torch
    proc = subprocess.run(["bash", HOST_CHECK], env={**env, "PRIMUS_HOST_ROOT": str(tmp_path),
                                                     "PRIMUS_PYTHON": str(tmp_path / "no-python")},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "FAIL  no " in proc.stdout and "PRIMUS_PYTHON" in proc.stdout, proc.stdout


@pytest.mark.parametrize("arch, reclaim", [("gfx942", True), ("gfx950", True), ("gfx90a", False)])
def test_rocm_scratch_reclaim_is_off_on_mi300_and_mi350(fake_slurm, arch, reclaim):
    """HSA_NO_SCRATCH_RECLAIM=1 on MI300 and MI350 (gfx942, gfx950); GPU_MAX_HW_QUEUES=2 on every ROCm GPU."""
    rc, out = fake_slurm("--mock-data", SLURM_GPUS_PER_NODE="8", PRIMUS_ROCM="1", PRIMUS_ROCM_ARCH=arch)
    assert rc == 0, out
    assert ("env HSA_NO_SCRATCH_RECLAIM=1" in out) == reclaim, out
    assert "env GPU_MAX_HW_QUEUES=2" in out


@pytest.mark.parametrize("env, expected", [
    ({"SLURM_GPUS_ON_NODE": "4", "SLURM_GPUS_PER_NODE": "8"}, 4),
    ({"SLURM_GPUS_ON_NODE": "0", "CUDA_VISIBLE_DEVICES": "0,1,2"}, 3),
    ({"ROCR_VISIBLE_DEVICES": "0,1,2,3,4,5"}, 6),
    ({"SLURM_GPUS_PER_NODE": "gpu:a100:2,gpu:v100:2"}, 4),
    ({"SLURM_GPUS_ON_NODE": "8", "PRIMUS_GPUS_PER_NODE": "2"}, 2),
])
def test_gpus_per_node(fake_slurm, env, expected):
    rc, out = fake_slurm("--mock-data", PRIMUS_ROCM="0", **env)
    assert rc == 0, out
    assert f"--nproc-per-node {expected} " in out
    assert "HSA_ENABLE_SDMA" not in out


def test_no_gpus_is_a_clear_error(fake_slurm):
    rc, out = fake_slurm("--mock-data", CUDA_VISIBLE_DEVICES="", PRIMUS_ROCM="0")
    assert rc != 0
    assert "no GPUs in this allocation" in out and "PRIMUS_CPU=1" in out


def test_cpu_mode_defaults_and_env_args(fake_slurm):
    rc, out = fake_slurm("--train-iters", "3", PRIMUS_CPU="1", PRIMUS_TRAIN_ARGS="--mock-data --seq-length 32")
    assert rc == 0, out
    assert "--nproc-per-node 4 " in out and "(CPU, gloo)" in out and "env OMP_NUM_THREADS=1" in out
    launch = next(line for line in out.splitlines() if "launch:" in line)
    assert launch.endswith("examples/pretrain_gpt.py --mock-data --seq-length 32 --train-iters 3 --cpu")
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in out
    # no training arguments: a default run sized to the allocation (2 nodes x 4 processes)
    rc, out = fake_slurm(PRIMUS_CPU="1")
    assert rc == 0, out
    assert "default run (pp 4, dp 2, zbv)" in out
    assert "--pipeline-model-parallel-size 4 --pipeline-schedule zbv --cpu" in out


def _checkout(root, version, script):
    """A stand-in Megatron-LM checkout: its pretrain_gpt.py and megatron-core version (package_info.py)."""
    (root / "megatron" / "core").mkdir(parents=True, exist_ok=True)
    major, minor, patch = version.split(".")
    (root / "megatron" / "core" / "package_info.py").write_text(
        f"MAJOR = {major}\nMINOR = {minor}\nPATCH = {patch}\nPRE_RELEASE = ''\n")
    (root / "pretrain_gpt.py").write_text(script)
    return root / "pretrain_gpt.py"


PATCHED = ("from primus_megatron import megatron_lm as primus_pipeline\n"
           "if __name__ == '__main__':\n"
           "    primus_pipeline.install()\n"
           "    pretrain(extra_args_provider=primus_pipeline.extra_args_provider(None))\n")


@pytest.mark.parametrize("version, tag", [("0.16.1", "core_v0.16.1"), ("0.19.1", "core_v0.19.0")])
def test_an_unpatched_or_half_patched_megatron_lm_is_refused_with_its_own_patch(fake_slurm, tmp_path, version, tag):
    """The refusal names the patch for the checkout's version; an import line without the plugin's
    install call (what a failed hunk leaves) is no patch."""
    checkout = tmp_path / "Megatron-LM"
    _checkout(checkout, version, "from model_provider import model_provider\n")
    rc, out = fake_slurm("--pipeline-schedule", "zbv", PRIMUS_CPU="1", MEGATRON_LM_PATH=str(checkout))
    assert rc != 0 and "is not patched" in out and "apply_patch.sh" in out, out
    assert f"megatron-lm-{tag}-pretrain_gpt.patch" in out and out.count(".patch") == 1, out
    _checkout(checkout, version, "from primus_megatron import megatron_lm as primus_pipeline  # import only\n")
    rc, out = fake_slurm("--pipeline-schedule", "zbv", PRIMUS_CPU="1", MEGATRON_LM_PATH=str(checkout))
    assert rc != 0 and "half-patched" in out and f"megatron-lm-{tag}-pretrain_gpt.patch" in out, out
    assert "launch:" not in out


def test_megatron_lm_variant(fake_slurm, tmp_path):
    """MEGATRON_LM_PATH: Megatron-LM's own (patched) pretrain_gpt.py is launched instead of ours."""
    checkout = tmp_path / "Megatron-LM"
    script = _checkout(checkout, "0.16.1", PATCHED)
    rc, out = fake_slurm("--pipeline-schedule", "zbv", "--mock-data", PRIMUS_CPU="1", MEGATRON_LM_PATH=str(checkout))
    assert rc == 0, out
    launch = next(line for line in out.splitlines() if "launch:" in line)
    assert launch.endswith(f"{script} --pipeline-schedule zbv --mock-data --cpu")
    assert f"Megatron-LM's own {script}" in out
    rc, out = fake_slurm(PRIMUS_CPU="1", MEGATRON_LM_PATH=str(checkout))  # default run, spelled for Megatron-LM
    assert rc == 0, out
    launch = next(line for line in out.splitlines() if "launch:" in line)
    for part in ("--mock-data", "--tokenizer-type NullTokenizer", "--max-position-embeddings 64",
                 "--transformer-impl local", "--pipeline-schedule zbv"):
        assert part in launch, launch
    _checkout(checkout, "0.19.1", "# Copyright (c) 2025, Advanced Micro Devices, Inc.\n" + PATCHED)
    rc, out = fake_slurm(PRIMUS_CPU="1", MEGATRON_LM_PATH=str(checkout))  # AMD's fork, patched by hand
    assert rc != 0 and "ROCm/Megatron-LM" in out and "launch:" not in out, out
    rc, out = fake_slurm(PRIMUS_CPU="1", MEGATRON_LM_PATH=str(tmp_path / "nowhere"))
    assert rc != 0 and "has no pretrain_gpt.py" in out


# ---------------------------------------------------------------------------------------------
# end to end under a real single-node SLURM

def _slurm_local(cmd, timeout):
    return subprocess.run(["bash", SLURM_LOCAL, cmd], env=_clean_env(**CLUSTER_ENV), capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def slurm_cluster(request):
    if os.environ.get("PRIMUS_SKIP_SLURM") == "1":
        pytest.skip(expected_skips.reason("no-slurm", "PRIMUS_SKIP_SLURM=1: the SLURM end-to-end test is disabled"))
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip(expected_skips.reason("no-slurm", "the SLURM end-to-end test needs root (it installs slurm-wlm/munge "
                                          "and runs slurmctld, slurmd)"))
    if not (shutil.which("slurmd") or os.path.exists("/usr/sbin/slurmd")) and not shutil.which("apt-get"):
        pytest.skip(expected_skips.reason("no-slurm", "SLURM is not installed and apt-get is not available to install it"))

    def stop():
        try:
            proc = _slurm_local("stop", timeout=120)
            if proc.returncode != 0:
                print(f"slurm_local.sh stop failed:\n{proc.stdout}{proc.stderr}", file=sys.stderr)
        except subprocess.TimeoutExpired:
            print("slurm_local.sh stop timed out", file=sys.stderr)

    request.addfinalizer(stop)  # first: a start that fails half way still gets its daemons stopped
    started = time.monotonic()
    try:
        proc = _slurm_local("start", timeout=START_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"tests/slurm/slurm_local.sh start took over {START_TIMEOUT_S} s:\n{exc.stdout}\n{exc.stderr}")
    if proc.returncode != 0:
        pytest.fail(f"tests/slurm/slurm_local.sh start failed (exit {proc.returncode}); set PRIMUS_SKIP_SLURM=1 "
                    f"to skip this test where SLURM cannot be installed:\n{_tail(proc.stdout + proc.stderr)}")
    print(f"single-node SLURM up in {time.monotonic() - started:.1f} s", file=sys.stderr)
    conf = os.path.join(CLUSTER_ENV["PRIMUS_SLURM_DIR"], "etc", "slurm.conf")
    assert os.path.isfile(conf)
    return conf


def _job_fields(job_id, env):
    proc = subprocess.run(["scontrol", "show", "job", "-o", job_id], env=env, capture_output=True, text=True,
                          timeout=30)
    if proc.returncode != 0:
        return None
    state = re.search(r"\bJobState=(\S+)", proc.stdout)
    code = re.search(r"\bExitCode=(\S+)", proc.stdout)
    return {"JobState": state.group(1) if state else "", "ExitCode": code.group(1) if code else "",
            "raw": proc.stdout}


def _ensure_dataset():
    if os.path.exists(DATA + ".bin") and os.path.exists(DATA + ".idx"):
        return
    venv_python = os.path.join(ROOT, ".venv", "bin", "python")
    python = venv_python if os.path.exists(venv_python) else sys.executable
    subprocess.run([python, "-m", "primus_megatron.train.data", "--build-corpus-dataset", DATA], cwd=ROOT,
                   env=_clean_env(PYTHONPATH=ROOT), check=True, timeout=600)


def _cpus(conf):
    cpus = re.search(r"\bCPUs=(\d+)", open(conf).read())
    return cpus.group(1) if cpus else 1


def _submit_and_wait(cmd, env, tmp_path):
    """sbatch `cmd` from `tmp_path`, wait for the job: (fields, output text, job id, seconds);
    fails unless it COMPLETED with exit code 0."""
    cmd = [cmd[0], f"--output={tmp_path / 'job-%j.out'}", *cmd[1:]]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"sbatch failed: {proc.stdout}{proc.stderr}"
    job_id = proc.stdout.strip().split(";")[0]
    assert job_id.isdigit(), proc.stdout
    out_file = tmp_path / f"job-{job_id}.out"

    started, fields = time.monotonic(), None
    try:
        while time.monotonic() - started < JOB_TIMEOUT_S:
            fields = _job_fields(job_id, env)
            if fields is not None and fields["JobState"] in TERMINAL:
                break
            time.sleep(2)
        else:
            text = out_file.read_text() if out_file.exists() else "(no output file)"
            pytest.fail(f"job {job_id} not finished after {JOB_TIMEOUT_S} s (state {fields and fields['JobState']}); "
                        f"output:\n{_tail(text)}")
    finally:
        if fields is None or fields["JobState"] not in TERMINAL:
            subprocess.run(["scancel", "--full", job_id], env=env, capture_output=True, timeout=30)

    elapsed = time.monotonic() - started
    text = out_file.read_text() if out_file.exists() else ""
    assert fields["JobState"] == "COMPLETED" and fields["ExitCode"] == "0:0", \
        f"job {job_id}: JobState={fields['JobState']} ExitCode={fields['ExitCode']}\n{_tail(text)}"
    return fields, text, job_id, elapsed


def test_sbatch_cpu_pipeline_zbv(slurm_cluster, tmp_path):
    _ensure_dataset()
    env = _clean_env(SLURM_CONF=slurm_cluster, PRIMUS_CPU="1", PRIMUS_NPROC_PER_NODE="2",
                     PATH=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    cmd = ["sbatch", "--parsable", "--nodes=1", "--gpus-per-node=0", f"--cpus-per-task={_cpus(slurm_cluster)}",
           "--time=00:10:00", "--job-name=primus-pytest", SBATCH,
           "--pipeline-model-parallel-size", "2", "--pipeline-schedule", "zbv", "--data-path", DATA,
           "--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",
           "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", str(TRAIN_ITERS),
           "--lr", "1e-3"]
    # submitted from a directory outside the repository: the script must find it on its own
    fields, text, job_id, elapsed = _submit_and_wait(cmd, env, tmp_path)
    losses = {}
    for line in text.splitlines():
        m = LOSS_LINE.match(line)
        if m:
            assert int(m.group(2)) == TRAIN_ITERS, line
            losses[int(m.group(1))] = float(m.group(3))
    assert sorted(losses) == list(range(1, TRAIN_ITERS + 1)), f"iteration lines {sorted(losses)}:\n{_tail(text)}"
    assert all(math.isfinite(v) and v > 0 for v in losses.values()), losses
    assert "1 node(s) x 2 process(es) (CPU, gloo)" in text
    assert f"repository {ROOT}," in text
    print(f"SLURM job {job_id}: {TRAIN_ITERS} iterations in {elapsed:.1f} s, losses {losses}", file=sys.stderr)


def test_sbatch_cpu_megatron_lm_pretrain_gpt(slurm_cluster, megatron_lm_tree, tmp_path):
    """MEGATRON_LM_PATH: Megatron-LM's own pretrain_gpt.py (core_v0.16.1 with patches/) under SLURM
    with zb-h1 on 2 CPU ranks trains exactly as Megatron's own schedule run directly with torchrun
    (same placement, so the same initial weights)."""
    import megatron_lm_harness as H

    tree = megatron_lm_tree
    args = [*H.TINY, "--pipeline-model-parallel-size", "2", "--global-batch-size", "8",
            "--train-iters", str(TRAIN_ITERS), "--eval-interval", str(TRAIN_ITERS)]
    bindir = os.path.join(os.path.dirname(tree), "bin")  # python3-config for Megatron-LM's helper build
    env = _clean_env(SLURM_CONF=slurm_cluster, PRIMUS_CPU="1", PRIMUS_NPROC_PER_NODE="2", MEGATRON_LM_PATH=tree,
                     PATH=f"{bindir}:{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    cmd = ["sbatch", "--parsable", "--nodes=1", "--gpus-per-node=0", f"--cpus-per-task={_cpus(slurm_cluster)}",
           "--time=00:10:00", "--job-name=primus-pytest-mlm", SBATCH, *args, "--pipeline-schedule", "zb-h1"]
    _, text, job_id, elapsed = _submit_and_wait(cmd, env, tmp_path)
    assert f"Megatron-LM's own {tree}/pretrain_gpt.py" in text
    assert "1 node(s) x 2 process(es) (CPU, gloo)" in text
    job = H.parse(text)
    assert sorted(job.losses) == list(range(1, TRAIN_ITERS + 1)), _tail(text)
    own = H.run(tree, 2, args[len(H.TINY):])  # Megatron's own schedule, TINY added by run()
    assert job.numbers() == own.numbers()
    print(f"SLURM job {job_id} (Megatron-LM's pretrain_gpt.py, zb-h1): {TRAIN_ITERS} iterations in {elapsed:.1f} s, "
          f"losses {job.losses}", file=sys.stderr)


@pytest.mark.parametrize("rocm, arch", [("1", "gfx942"), ("1", "gfx950"), ("1", "gfx90a"), ("0", "")])
def test_the_gpu_checks_shipped_environment_is_the_sbatchs(fake_slurm, rocm, arch):
    """Issue 45 item 4 / deliverable 2: the GPU check's `shipped` configurations run exactly the queue and
    stream settings the sbatch exports on such a node (read from its dry run)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import gpu_check

    rc, out = fake_slurm("--mock-data", SLURM_GPUS_PER_NODE="8", PRIMUS_ROCM=rocm,
                         **({"PRIMUS_ROCM_ARCH": arch} if arch else {}))
    assert rc == 0, out
    exported = dict(m.groups() for m in re.finditer(r"env (\w+)=(\S+)", out))
    from_sbatch = {k: v for k, v in exported.items() if k in gpu_check.KNOB_VARIABLES}
    assert gpu_check.shipped_env(rocm == "1", arch) == from_sbatch
    configs = gpu_check.configurations(["zbv"], [2], rocm=rocm == "1", gpu=True, inits=("eager",), arch=arch)
    assert [c["env"] for c in configs] == [from_sbatch, {}]  # shipped, then none of them


DEEPSEEK_V3 = os.path.join(ROOT, "examples", "slurm", "deepseek_v3.args")


def test_the_deepseek_v3_example_launches_megatron_lm_and_its_arguments_parse(fake_slurm, megatron_lm_tree):
    """examples/slurm/deepseek_v3.args as its header says to submit it (PRIMUS_TRAIN_ARGS, Megatron-LM's own
    script): the sbatch launches them as written, and Megatron-LM's parser (this session's tag) with our
    options takes every one, with the values the recipe means."""
    with open(DEEPSEEK_V3) as f:
        words = " ".join(line.split("#")[0] for line in f).split()
    rc, out = fake_slurm(PRIMUS_TRAIN_ARGS=" ".join(words), MEGATRON_LM_PATH=megatron_lm_tree, PRIMUS_GPUS_PER_NODE="8")
    assert rc == 0, out
    launch = next(line for line in out.splitlines() if "launch:" in line)
    assert launch.endswith(os.path.join(megatron_lm_tree, "pretrain_gpt.py") + " " + " ".join(words)), launch
    assert "--nnodes 2 --nproc-per-node 8" in launch  # 16 GPUs: PP=4 x DP=4, EP=4 over the DP ranks
    # Megatron-LM's own parser with our plugin's options, in a rank forked from the session's import-once process
    # of its tree (megatron_lm_harness.print_parsed_arguments: what pretrain() parses first, then the rank ends)
    import megatron_lm_harness as H

    done = H.run(megatron_lm_tree, 1, [], rank_setup=("megatron_lm_harness", "print_parsed_arguments", json.dumps(words)),
                 expect_ok=False)
    lines = [line for line in done.log.splitlines() if line.startswith("PARSED ")]
    assert done.returncode == 0 and len(lines) == 1, _tail(done.log)
    parsed = json.loads(lines[0][len("PARSED "):])
    expected = {"pipeline_schedule": "dualpipev", "multi_latent_attention": "True", "q_lora_rank": "768",
                "moe_layer_freq": str([0] + [1] * 15), "num_experts": "64", "moe_router_topk": "8",
                "moe_router_score_function": "sigmoid", "moe_router_enable_expert_bias": "True",
                "moe_router_num_groups": "8", "moe_router_group_topk": "4", "mtp_num_layers": "1",
                "overlap_moe_expert_parallel_comm": "True", "bf16": "True", "expert_model_parallel_size": "4",
                "moe_shared_expert_intermediate_size": "1408",
                "moe_router_load_balancing_type": str(["seq_aux_loss"])}  # a list: one type per balance loss
    assert {k: parsed.get(k) for k in expected} == expected
