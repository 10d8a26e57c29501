#!/usr/bin/env bash
# Device helper: configure (once) and build only the named targets for sm_90a,
# using the carried .deps. Usage: scripts/gpu_targets.sh TARGET...
# RLX_GPU_CMAKE_ARGS adds configure arguments (read when the build dir is new).
set -uo pipefail
cd "$(dirname "$0")/.."
[ -d .deps/root ] || scripts/gpu_deps.sh --extract >/dev/null || exit 1
export RLX_DEPS_PREFIX=$PWD/.deps/root
B=${RLX_GPU_BUILD:-build/gpu}
[ -f "$B/build.ninja" ] || cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRLX_BUILD_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a-real ${RLX_GPU_CMAKE_ARGS:-} > /tmp/rlx-configure.log 2>&1 || { tail -30 /tmp/rlx-configure.log; exit 1; }
cmake --build "$B" -j16 --target "$@" 2>&1 | grep -E "error|FAILED|warning: .*spill" | head -40
exit "${PIPESTATUS[0]}"
