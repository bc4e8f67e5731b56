#!/bin/bash
# The GPU benchmark on a machine that reaches no package index (how it runs on a lent GPU machine):
#   WHEELS=dir MEGATRON_LM_TARBALL=Megatron-LM-core_vX.tar.gz scripts/gpu_bench_offline.sh [gpu_bench options]
# installs the wheels in $WHEELS (megatron-core and what the machine lacks) into /tmp/site, unpacks
# the Megatron-LM snapshot for the check part's pretrain_gpt.py, runs benchmarks/gpu_bench.py and
# copies into $OUT (default /tmp/out): console.txt, report.md, report.json, the block profiles and
# logs.tgz (every part's logs).
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
source "$(dirname "$0")/offline_env.sh"
timeout "${GB_TIMEOUT:-3600}" python3 benchmarks/gpu_bench.py --out /tmp/gb "$@"
echo "gpu_bench exit $?"
} 2>&1 | tee "$OUT/console.txt"
cp /tmp/gb/report.md /tmp/gb/report.json /tmp/gb/*.profile.json "$OUT/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C /tmp gb 2>/dev/null
