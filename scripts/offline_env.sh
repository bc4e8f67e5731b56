# Sourced by the offline GPU scripts (gpu_check_offline.sh, gpu_bench_offline.sh) on a machine that
# reaches no package index: installs the wheels in $WHEELS (megatron-core and what the machine
# lacks) into /tmp/site and puts them and the checkout on PYTHONPATH, prints the devices and
# torch's build, and unpacks $MEGATRON_LM_TARBALL (a Megatron-LM snapshot) as $MEGATRON_LM_PATH.
if [ -n "$WHEELS" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
    || echo "offline_env: installing the wheels in $WHEELS failed"
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
