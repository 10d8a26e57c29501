#!/usr/bin/env bash
# Regenerates docs/env.md from the env table (rlx/core/env.cpp) through
# `rlx --help-env --markdown`. The ctest `cli.env_doc_current` fails until the
# file matches. Usage: scripts/gen_env_doc.sh [BUILD_DIR]  (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DRLX_BUILD_CUDA=OFF -DRLX_BUILD_BENCH=OFF
fi
cmake --build "$BUILD" --target rlx_cli
"$BUILD/cli/rlx" --help-env --markdown > docs/env.md
echo "wrote docs/env.md ($(grep -c '^| `RLX_' docs/env.md) knobs)"
