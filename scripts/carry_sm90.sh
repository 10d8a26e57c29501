#!/usr/bin/env bash
# Build binaries here for sm_90a only (half the size of the two-architecture
# build) and pack them for a device call that runs them without building:
#   scripts/carry_sm90.sh NAME TARGET...   e.g. carry_sm90.sh all rlx_op_tests rlx_gpu_tests rlx_bert_bench
# writes build/carry-NAME/NAME.tar.xz (and TREE, the commit it was built from).
# Carry build/carry-NAME, then on the device:
#   mkdir -p build/run && tar xJf build/carry-NAME/NAME.tar.xz -C build/run
#   LD_LIBRARY_PATH=$PWD/build/run/lib build/run/rlx_op_tests --gtest_filter='*cuda*'
# (scripts/gpu_sanitize.sh takes RLX_GPU_BUILD=build/run once tests/ links to the test binaries there).
set -euo pipefail
NAME=${1:?usage: scripts/carry_sm90.sh NAME TARGET...}
shift
[ $# -gt 0 ] || { echo "carry_sm90: no targets given" >&2; exit 1; }
cd "$(dirname "$0")/.."
B=build/sm90
[ -f "$B/build.ninja" ] || cmake -G Ninja -S . -B "$B" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90a-real -DRLX_WERROR=ON > /dev/null
ninja -C "$B" "$@"
bins=()
for t in "$@"; do
  bin=$(find "$B/tests" "$B/bench" "$B/cli" -maxdepth 1 -type f -name "$t" 2>/dev/null | head -1)
  [ -n "$bin" ] || { echo "carry_sm90: no executable named $t under $B" >&2; exit 1; }
  bins+=("$bin")
done
rm -rf "build/carry-$NAME"
scripts/carry_binaries.sh "build/carry-$NAME/$NAME.tar.xz" "${bins[@]}"
git rev-parse --short HEAD > "build/carry-$NAME/TREE"
[ -z "$(git status --porcelain --untracked-files=no)" ] || echo "carry_sm90: built from a tree with uncommitted changes" >&2
