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
if [ -n "$WHEELS" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
    || echo "gpu_bench_offline: installing the wheels in $WHEELS failed"
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
nvidia-smi -L 2>/dev/null || rocm-smi 2>/dev/null
python3 -c "import sys, torch; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'hip', torch.version.hip, 'gpus', torch.cuda.device_count())"
if [ -n "$MEGATRON_LM_TARBALL" ]; then
  mkdir -p /tmp/mlm && tar xzf "$MEGATRON_LM_TARBALL" -C /tmp/mlm
  export MEGATRON_LM_PATH=$(ls -d /tmp/mlm/*/ | head -1)
  # the wheel's prebuilt dataset helpers spare a compile (Megatron-LM's Makefile finds them up to date)
  cp /tmp/site/megatron/core/datasets/helpers_cpp*.so "$MEGATRON_LM_PATH/megatron/core/datasets/" 2>/dev/null
fi
timeout "${GB_TIMEOUT:-3600}" python3 benchmarks/gpu_bench.py --out /tmp/gb "$@"
echo "gpu_bench exit $?"
} 2>&1 | tee "$OUT/console.txt"
cp /tmp/gb/report.md /tmp/gb/report.json /tmp/gb/*.profile.json "$OUT/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C /tmp gb 2>/dev/null
