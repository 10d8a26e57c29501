#!/usr/bin/env bash
# Builds and tests rlx on the GPU machine (CUDA 13, cmake, ninja, gcc 13; no
# Debian packages, no internet), then runs every benchmark. Third-party packages
# come from .deps (scripts/gpu_deps.sh; .deps/root is extracted from .deps/debs
# here when only the .debs were copied).
#
#   scripts/gpu_run.sh OUTDIR
#
# OUTDIR receives configure.log, build.log, ctest-cpu.log, ctest-gpu.log (+ JUnit
# XML) and bench-<name>.log per benchmark. Failing tests or benchmarks do not
# stop the run; the exit code is non-zero when any step failed.
# Knobs: RLX_GPU_BUILD (build dir, default build/gpu), RLX_JOBS (16),
# RLX_CUDA_ARCHITECTURES (90a-real), RLX_BENCH_TIMEOUT (seconds per bench, 600),
# RLX_GPU_STEPS (default "build test bench").
set -uo pipefail
OUT=${1:?usage: scripts/gpu_run.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
BUILD=${RLX_GPU_BUILD:-build/gpu}
JOBS=${RLX_JOBS:-16}
ARCHS=${RLX_CUDA_ARCHITECTURES:-90a-real}
STEPS=" ${RLX_GPU_STEPS:-build test bench} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
status=0
note() { echo "==== $* [$(date +%T)]" | tee -a "$OUT/summary.log"; }

if [ ! -d .deps/root ]; then
  if [ -d .deps/debs ]; then
    scripts/gpu_deps.sh --extract || exit 1
  else
    echo "gpu_run: neither .deps/root nor .deps/debs exists; run scripts/gpu_deps.sh first" >&2
    exit 1
  fi
fi
export RLX_DEPS_PREFIX=$PWD/.deps/root
LIBS=$RLX_DEPS_PREFIX/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$LIBS:$LIBS/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH

{
  echo "host: $(uname -a)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  nvcc --version 2>&1 | tail -1
  cmake --version | head -1
  g++ --version | head -1
} > "$OUT/machine.txt" 2>&1

if want build; then
  note "configure"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRLX_BUILD_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" > "$OUT/configure.log" 2>&1 || { note "configure FAILED"; exit 1; }
  # -k 0: keep building past a broken target so everything else still gets tested.
  note "build (-j$JOBS)"
  cmake --build "$BUILD" -j "$JOBS" -- -k 0 > "$OUT/build.log" 2>&1 || { note "build FAILED (see build.log)"; status=1; }
fi

if want test; then
  # CPU tests in parallel; GPU tests one at a time (they share one device).
  note "ctest (not gpu)"
  ctest --test-dir "$BUILD" --output-on-failure -LE gpu -j "$JOBS" --output-junit "$OUT/ctest-cpu.xml" \
    > "$OUT/ctest-cpu.log" 2>&1 || { note "cpu tests FAILED"; status=1; }
  tail -3 "$OUT/ctest-cpu.log" | tee -a "$OUT/summary.log"
  note "ctest (gpu)"
  ctest --test-dir "$BUILD" --output-on-failure -L gpu --output-junit "$OUT/ctest-gpu.xml" \
    > "$OUT/ctest-gpu.log" 2>&1 || { note "gpu tests FAILED"; status=1; }
  tail -3 "$OUT/ctest-gpu.log" | tee -a "$OUT/summary.log"
fi

if want bench; then
  for exe in "$BUILD"/bench/*; do
    [ -f "$exe" ] && [ -x "$exe" ] || continue
    name=$(basename "$exe")
    note "bench $name"
    timeout "${RLX_BENCH_TIMEOUT:-600}" "$exe" > "$OUT/bench-$name.log" 2>&1 || { note "bench $name FAILED ($?)"; status=1; }
  done
fi

note "done (status $status)"
exit $status
