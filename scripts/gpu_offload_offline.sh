#!/bin/bash
# Activation offload on one GPU (issue 46), on a machine that reaches no package index:
#   WHEELS=dir scripts/gpu_offload_offline.sh
# the CUDA offload unit tests (the device copies handed back while the copy lane runs late, the
# overwrite of every such block, the copy streams), then gpu_bench.py's offload-check and offload
# parts; into $OUT (default /tmp/out): console.txt, pytest.txt, report.md, report.json, logs.tgz.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
source "$(dirname "$0")/offline_env.sh"
timeout 120 python3 -m pytest -q -p no:cacheprovider -o addopts= tests/test_offload_units.py \
  tests/test_offload_device.py 2>&1 | tail -25 | tee "$OUT/pytest.txt"
timeout "${GB_TIMEOUT:-420}" python3 benchmarks/gpu_bench.py --out /tmp/gb --parts offload-check,offload \
  --deadline-min "${GB_DEADLINE_MIN:-6}" "$@"
echo "gpu_bench exit $?"
} 2>&1 | tee "$OUT/console.txt"
cp /tmp/gb/report.md /tmp/gb/report.json "$OUT/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C /tmp gb 2>/dev/null
