#!/bin/bash
# The GPU check on a machine that reaches no package index (how it ran on the lent H200):
#   WHEELS=dir MEGATRON_LM_TARBALL=Megatron-LM-core_vX.tar.gz scripts/gpu_check_offline.sh [gpu_check options]
# installs the wheels in $WHEELS (megatron-core and what the machine lacks) into /tmp/site,
# unpacks the Megatron-LM snapshot for the check's Megatron-LM part, probes a 2-rank NCCL
# send/recv on GPU 0 (each rank a node of its own: benchmarks/rank_launch.py), then runs
# benchmarks/gpu_check.py. Output: $OUT (default /tmp/out): console.txt, report.{md,json}, logs.tgz.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
source "$(dirname "$0")/offline_env.sh"
python3 - <<'PY'
import os, sys, time
sys.path.insert(0, "benchmarks")
import rank_launch
probe = ("import torch, torch.distributed as d\n"
         "torch.cuda.set_device(0); d.init_process_group('nccl', device_id=torch.device('cuda', 0))\n"
         "r = d.get_rank(); t = torch.full((4,), float(r + 1), device='cuda')\n"
         "d.send(t, 1) if r == 0 else d.recv(t, 0)\n"
         "torch.cuda.synchronize(); print('probe rank', r, 'holds', t.tolist(), flush=True); d.destroy_process_group()\n")
with open("/tmp/nccl_probe.py", "w") as f:
    f.write(probe)
launch = rank_launch.Launch(["/tmp/nccl_probe.py"], dict(os.environ), "/tmp", 2, "/tmp/nccl_probe.txt", shared=True, gpus=1)
start = time.time()
while (code := launch.poll()) is None and time.time() - start < 60:
    time.sleep(0.3)
if code is None:
    launch.stop_with_stacks()
print("NCCL probe: exit", code, "after", round(time.time() - start, 1), "s")
print(launch.output()[-3000:])
PY
timeout "${GC_TIMEOUT:-3600}" python3 benchmarks/gpu_check.py "$@" --out /tmp/gc
echo "gpu_check exit $?"
} 2>&1 | tee "$OUT/console.txt"
cp /tmp/gc/report.md /tmp/gc/report.json "$OUT/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C /tmp gc 2>/dev/null
