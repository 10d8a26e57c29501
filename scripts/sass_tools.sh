#!/usr/bin/env bash
# cuobjdump and nvdisasm on the development machine, from NVIDIA's PyPI wheels
# (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm), unpacked into build/tools.
# Prints the folder to put on PATH; then, for example,
#   cuobjdump -sass build/sm90/rlx/backends/cuda/CMakeFiles/rlx_backend_cuda.dir/kernels/gemm_sm90.cu.o
#   cuobjdump -res-usage OBJECT     (registers, stack and local memory per kernel)
# read a kernel's SASS without device time (session 43: spills, slow paths, instruction counts).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=build/tools
bin=$dest/nvidia/cu13/bin
if [ ! -x "$bin/cuobjdump" ] || [ ! -x "$bin/nvdisasm" ]; then
  mkdir -p "$dest/wheels"
  python3 -m pip download --no-deps -q -d "$dest/wheels" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
  for w in "$dest"/wheels/*.whl; do python3 -m zipfile -e "$w" "$dest"; done
  chmod +x "$bin"/*
fi
echo "$PWD/$bin"
