#!/usr/bin/env bash
# The whole test suite in one command, exactly as CI runs it (.ci/run):
#   0. installs the packages it needs (scripts/install_deps.sh; RLX_SKIP_INSTALL=1 skips);
#   1. release build with warnings as errors (CUDA compiled when nvcc exists;
#      ptxas serializing a wgmma pipeline, its note C7514, also fails it),
#      every test except the GPU-labelled ones;
#   2. AddressSanitizer + UndefinedBehaviorSanitizer build of the CPU paths, its tests;
#   3. `cmake --install`, then tests/consumer built against the installed package and run;
#   4. the libFuzzer targets (clang), each run for RLX_FUZZ_SECONDS (when tests/fuzz exists).
# A failing step does not stop the independent ones after it; the exit code is
# non-zero when any step failed, and the last lines list which.
# Build trees go under $RLX_TEST_DIR (default build/test). Knobs: RLX_JOBS (2),
# RLX_FUZZ_SECONDS (60), RLX_CUDA_ARCHITECTURES (the project's default),
# RLX_TEST_STEPS (default "release asan install fuzz": run a subset), RLX_TEST_CUDA
# (auto | ON | OFF; auto = ON when nvcc is found).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${RLX_JOBS:-2}
OUT=${RLX_TEST_DIR:-$ROOT/build/test}
STEPS=" ${RLX_TEST_STEPS:-release asan install fuzz} "
FUZZ_SECONDS=${RLX_FUZZ_SECONDS:-60}

if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
CUDA=${RLX_TEST_CUDA:-auto}
if [ "$CUDA" = auto ]; then
  CUDA=OFF
  command -v nvcc >/dev/null && CUDA=ON
fi
CUDA_ARGS=()
[ "$CUDA" = ON ] && [ -n "${RLX_CUDA_ARCHITECTURES:-}" ] && CUDA_ARGS+=("-DCMAKE_CUDA_ARCHITECTURES=$RLX_CUDA_ARCHITECTURES")

FAILED=()
step() { echo; echo "==== $* [$(date +%T)]"; }
want() { [[ "$STEPS" == *" $1 "* ]]; }
# check NAME CMD...: runs CMD, records NAME when it fails; returns CMD's status.
check() {
  local name=$1
  shift
  "$@" && return 0
  FAILED+=("$name")
  echo "==== FAILED: $name" >&2
  return 1
}
T0=$SECONDS

# 0. Packages (apt-get, pip): a clean machine has none of them.
if [ "${RLX_SKIP_INSTALL:-0}" != 1 ]; then
  step "install packages"
  check "install packages" bash scripts/install_deps.sh || exit 1
fi
# build_logged DIR: cmake --build DIR, its output also kept in DIR/build-output.log.
build_logged() {
  cmake --build "$1" -j "$JOBS" 2>&1 | tee "$1/build-output.log"
  return "${PIPESTATUS[0]}"
}

# 1. Release (-O2), warnings are errors; GPU tests are excluded (they skip without a GPU anyway).
release_ok=false
if want release || want install; then
  step "release build (CUDA $CUDA)"
  check "release configure" cmake -S . -B "$OUT/release" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" -DRLX_WERROR=ON -DRLX_BUILD_CUDA=$CUDA "${CUDA_ARGS[@]}" &&
    check "release build" build_logged "$OUT/release" && release_ok=true
  # ptxas reports (as an "info" line, not a warning) when it serializes a
  # kernel's wgmma pipeline; for rlx's wgmma GEMMs that is a performance bug.
  if [ -f "$OUT/release/build-output.log" ] && grep -q 'C7514' "$OUT/release/build-output.log"; then
    grep 'C7514' "$OUT/release/build-output.log" >&2
    FAILED+=("ptxas serialized a wgmma pipeline (C7514)")
    echo "==== FAILED: ptxas serialized a wgmma pipeline (C7514)" >&2
  fi
fi
if want release && $release_ok; then
  step "release tests"
  check "release tests" ctest --test-dir "$OUT/release" --output-on-failure -LE gpu -j "$JOBS"
fi

# 2. Sanitizers on the CPU paths: -O1 with assertions and the between-pass IR
#    verifier on (no NDEBUG); no CUDA, no benchmarks.
if want asan; then
  step "ASan+UBSan build (CPU)"
  if check "asan configure" cmake -S . -B "$OUT/asan" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
       -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DRLX_SANITIZE=ON -DRLX_BUILD_CUDA=OFF -DRLX_BUILD_BENCH=OFF &&
     check "asan build" cmake --build "$OUT/asan" -j "$JOBS"; then
    step "ASan+UBSan tests"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      check "asan tests" ctest --test-dir "$OUT/asan" --output-on-failure -LE gpu -j "$JOBS"
  fi
fi

# 3. Install, then build and run a separate project against the installed package.
if want install && $release_ok; then
  step "install + consumer"
  rm -rf "$OUT/prefix" "$OUT/consumer"
  check "install" cmake --install "$OUT/release" --prefix "$OUT/prefix" &&
    check "consumer configure" cmake -S tests/consumer -B "$OUT/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$OUT/prefix" &&
    check "consumer build" cmake --build "$OUT/consumer" &&
    check "consumer run" "$OUT/consumer/rlx_consumer" &&
    check "installed rlx" "$OUT/prefix/bin/rlx" --version
fi

# 4. Fuzzing: clang, libFuzzer + ASan + UBSan, each target on a copy of its seed corpus.
if want fuzz && [ -f tests/fuzz/CMakeLists.txt ]; then
  if ! command -v clang++ >/dev/null; then
    echo "fuzz: clang++ not found; skipped" >&2
  else
    step "fuzz build (clang)"
    targets=()
    for src in tests/fuzz/fuzz_*.cpp; do
      [ -e "$src" ] && targets+=("$(basename "$src" .cpp)")
    done
    if [ ${#targets[@]} -gt 0 ] &&
       check "fuzz configure" env CC=clang CXX=clang++ cmake -S . -B "$OUT/fuzz" -G Ninja -DCMAKE_BUILD_TYPE=Release \
         -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g" -DRLX_BUILD_FUZZ=ON -DRLX_SANITIZE=ON \
         -DRLX_BUILD_CUDA=OFF -DRLX_BUILD_TESTS=OFF -DRLX_BUILD_BENCH=OFF &&
       check "fuzz build" cmake --build "$OUT/fuzz" -j "$JOBS" --target "${targets[@]}"; then
      for t in "${targets[@]}"; do
        step "fuzz $t (${FUZZ_SECONDS}s)"
        corpus="$OUT/fuzz/corpus/$t"
        rm -rf "$corpus" && mkdir -p "$corpus"
        seeds="tests/fuzz/corpus/${t#fuzz_}"
        [ -d "$seeds" ] && cp -r "$seeds/." "$corpus/"
        check "fuzz $t" "$OUT/fuzz/tests/fuzz/$t" -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 \
          -artifact_prefix="$OUT/fuzz/$t-" "$corpus"
      done
    fi
  fi
fi

elapsed="$(( (SECONDS - T0) / 60 )) min $(( (SECONDS - T0) % 60 )) s"
if [ ${#FAILED[@]} -gt 0 ]; then
  step "FAILED after $elapsed:"
  printf '  %s\n' "${FAILED[@]}"
  exit 1
fi
step "all passed in $elapsed"
