"""Start one multi-rank job for the GPU check: torchrun when every rank has a GPU of its own,
else every rank as a node of its own on a shared GPU.

NCCL refuses two ranks of a communicator on one GPU ("Duplicate GPU detected"): it compares
each rank's host hash and bus id. NCCL_HOSTID replaces the hostname in that hash, so a rank
started with a host id of its own counts as another node: NCCL then connects the ranks through
its network transport (sockets on loopback here, NCCL_SOCKET_IFNAME=lo) instead of P2P/SHM. The
schedule's send/recv order, the communicators' init (eager or lazy) and CUDA streams are NCCL's
and CUDA's own; only the link is slower, and the ranks share the GPU's SMs, so times are not a
pipeline's. Each such rank gets torchrun's variables as a one-GPU node would: RANK, WORLD_SIZE,
LOCAL_RANK=0, LOCAL_WORLD_SIZE=1, GROUP_RANK, MASTER_ADDR/PORT, and CUDA_VISIBLE_DEVICES naming
its GPU (the rank-modulo-GPU-count-th entry of an inherited visible-device list, or that index).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Optional

from primus_megatron.runtime.local_ranks import AGENT_STORE_ENV, rendezvous_store


def device_for(env: dict, rank: int, gpus: int) -> str:
    """The device rank `rank` is given, as the launcher's own environment names it: the (rank mod gpus)-th
    entry of the visible-device list torch obeys there (HIP_VISIBLE_DEVICES over CUDA_VISIBLE_DEVICES on
    ROCm's torch, both indices into what ROCR_VISIBLE_DEVICES leaves; ROCm docs, "GPU isolation
    techniques"), else that index itself. An inherited "4,5,6,7" puts ranks on 4-7, not on 0-3."""
    for name in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        listed = [d.strip() for d in env.get(name, "").split(",") if d.strip()]
        if listed:
            return listed[rank % len(listed)]
    return str(rank % gpus)


def node_env(env: dict, rank: int, world: int, gpus: int, port: int) -> dict:
    """Rank `rank`'s environment as the only rank of a one-GPU node."""
    device = device_for(env, rank, gpus)
    out = {**env, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "GROUP_RANK": str(rank), "NODE_RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "CUDA_VISIBLE_DEVICES": device, "NCCL_HOSTID": f"primus-gpu-check-node{rank}",
           **AGENT_STORE_ENV}  # every rank a client of the launcher's store (Launch)
    # ROCm's torch takes HIP_VISIBLE_DEVICES over CUDA_VISIBLE_DEVICES: an inherited one is narrowed to this
    # rank's device too, or every rank would see all of it and take its first (on NVIDIA it is ignored);
    # ROCR_VISIBLE_DEVICES, which filters before both, stays as inherited
    if "HIP_VISIBLE_DEVICES" in env:
        out["HIP_VISIBLE_DEVICES"] = device
    out.setdefault("NCCL_SOCKET_IFNAME", "lo")
    out.setdefault("NCCL_IB_DISABLE", "1")
    return out


class Launch:
    """`nproc` ranks of `script args`: torchrun --standalone (`shared=False`) or one process per
    rank (`shared=True`, node_env). Output goes to `log`, or with shared ranks to `<log>.rank<r>.txt`
    (files: a full pipe would stall a rank)."""

    def __init__(self, script: list, env: dict, cwd: str, nproc: int, log: str, *, shared: bool, gpus: int) -> None:
        self.torchrun = not shared
        # one log per rank where the ranks are ours (their stack dumps would interleave in one)
        self.logs = [log] if not shared else [f"{os.path.splitext(log)[0]}.rank{r}.txt" for r in range(nproc)]
        self._files = [open(path, "w") for path in self.logs]
        if shared:
            self._store = rendezvous_store(nproc)  # held until this launch is dropped: no port window
            port = self._store.port
            self.procs = [subprocess.Popen([sys.executable, *script], cwd=cwd, env=node_env(env, r, nproc, gpus, port),
                                           stdout=self._files[r], stderr=subprocess.STDOUT, start_new_session=True)
                          for r in range(nproc)]
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
                   *script]
            self.procs = [subprocess.Popen(cmd, cwd=cwd, env=env, stdout=self._files[0], stderr=subprocess.STDOUT,
                                           start_new_session=True)]

    def poll(self) -> Optional[int]:
        """None while any rank runs; else the first non-zero status, or 0. One rank that fails
        ends the others (as torchrun does)."""
        codes = [p.poll() for p in self.procs]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            self.kill()
            return failed[0]
        return None if None in codes else 0

    def stop_with_stacks(self) -> None:
        """A hung job: every rank prints its stack (SIGUSR1, faulthandler), then all are killed."""
        for pid in self._rank_pids():
            try:
                os.kill(pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass
        time.sleep(3)
        self.kill()

    def kill(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        for f in self._files:
            f.close()

    def output(self) -> str:
        """Every log, each rank's under a header of its own."""
        parts = []
        for i, path in enumerate(self.logs):
            with open(path, errors="replace") as f:
                parts.append((f"==== rank {i} ====\n" if len(self.logs) > 1 else "") + f.read())
        return "\n".join(parts)

    def _rank_pids(self) -> list:
        if not self.torchrun:
            return [p.pid for p in self.procs]
        leader = self.procs[0].pid  # torchrun's workers share its session; torchrun itself is spared
        out = []
        for pid in os.listdir("/proc"):
            if pid.isdigit() and int(pid) != leader:
                try:
                    if os.getsid(int(pid)) == leader:
                        out.append(int(pid))
                except (ProcessLookupError, PermissionError):
                    pass
        return out
