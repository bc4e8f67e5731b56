#!/bin/bash
# `make gpu-te` on a GPU machine that reaches no package index, in one device call (how a lent H200 runs it):
#   scripts/gpu_te_offline.sh [gpu_te options, e.g. --deadline-min 7.5]
# with the TE bundle (`make gpu-te-bundle`) carried in .te-bundle/ (docs/transformer-engine.md). Runs
# benchmarks/gpu_te.py with the image's python3 (torch 2.11.0+cu130) and copies into $OUT (default
# /tmp/out): console.txt, report.md, report.json and logs.tgz (every part's logs and the TE profiles).
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
nvidia-smi -L 2>/dev/null
ls -l .te-bundle/ 2>&1
timeout "${GT_TIMEOUT:-3600}" python3 benchmarks/gpu_te.py --out /tmp/gt "$@"
echo "gpu_te exit $?"
} 2>&1 | tee "$OUT/console.txt"
cp /tmp/gt/report.md /tmp/gt/report.json "$OUT/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C /tmp gt 2>/dev/null
