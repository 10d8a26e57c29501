# Sourced by a device call that runs binaries packed here by carry_binaries.sh
# (the call's script lives in a carried folder under build/, or in bench/results):
#   source scripts/carried_call.sh ARCHIVE OUT
# unpacks ARCHIVE into build/run and sets LD_LIBRARY_PATH, R (the binaries'
# folder), L (a fresh log folder) and G (the synthetic Gemma decode flags), and
# prints the GPU's name. It defines
#   pack      the logs so far as $OUT/logs.tgz (a call returns few loose files,
#             and what a timed-out call left must still come back);
#   val FILE  the decode and prefill tok/s of an rlx_generate_bench log;
#   gen_ab SETTING...  rlx_generate_bench $G under each NAME=VALUE setting, two
#             rounds interleaved, a line each, then pack;
#   gen_variants SUFFIX...  rlx_generate_bench_SUFFIX $G for each variant binary
#             (packed under that name), two rounds interleaved, then pack;
#   bench_variants BIN ARGS PATTERN SUFFIX...  $R/BIN_SUFFIX ARGS for each variant
#             binary, two rounds interleaved, each log's lines matching PATTERN (grep -E)
#             on one line, then pack;
#   suites    the full rlx_gpu_tests and the CUDA op conformance (rlx_op_tests), then pack;
#   encoders  rlx_bert_bench --graphs-only, then pack;
#   host_cpu_tests  the CPU kernel and runtime tests (rlx_runtime_tests) on the device host's CPU,
#             whose ISA (AMX, AVX-512) is printed first, then pack;
#   bert_ab MODEL SHAPE SETTING...  rlx_bert_bench --graphs-only on one model and shape under
#             each NAME=VALUE setting, two rounds interleaved, a line each, then pack;
#   torch_peer  the PyTorch peer (bench/bert_torch.py, eager and torch.compile), then pack;
#   random_model_corpus SKELETON N  a random-weight model in SKELETON's layout (bench/random_weights_like.py)
#             at $M and bench/embed_e2e.py's corpus of N texts at $CORPUS.
ARCHIVE=${1:?usage: source scripts/carried_call.sh ARCHIVE OUT}
OUT=${2:?usage: source scripts/carried_call.sh ARCHIVE OUT}
L=$(mktemp -d)
pack() { tar czf "$OUT/logs.tgz.tmp" -C "$L" . && mv "$OUT/logs.tgz.tmp" "$OUT/logs.tgz"; }
val() {
  grep -oE '"case": "[a-z0-9_]*_(decode|prefill512)_tok_s", "value": [0-9.]+' "$1" |
    sed -E 's/.*_(decode|prefill512)_tok_s", "value": /\1 /' | tr '\n' ' '
}
mkdir -p build/run && tar xJf "$ARCHIVE" -C build/run
export LD_LIBRARY_PATH=$PWD/build/run/lib
R=build/run
G="--synthetic --device cuda --dtype bf16 --kv-dtype bf16"
nvidia-smi --query-gpu=name --format=csv,noheader || true
gen_ab() {
  local round s f
  for round in 1 2; do
    for s in "$@"; do
      f="$L/gen-$(echo "$s" | tr " =" "_-")-$round.log"
      env $s timeout 60 $R/rlx_generate_bench $G > "$f" 2>&1  # $s unquoted: a setting may be several NAME=VALUE
      echo "$s round $round rc=$? $(val "$f")"
    done
  done
  pack
}
gen_variants() {
  local round v f
  for round in 1 2; do
    for v in "$@"; do
      f="$L/gen-$v-$round.log"
      timeout 60 $R/rlx_generate_bench_$v $G > "$f" 2>&1
      echo "gen $v round $round rc=$? $(val "$f")"
    done
  done
  pack
}
bench_variants() {
  local bin=$1 args=$2 pat=$3 round v f
  shift 3
  for round in 1 2; do
    for v in "$@"; do
      f="$L/$bin-$v-$round.log"
      timeout 120 $R/${bin}_$v $args > "$f" 2>&1  # $args unquoted: several arguments
      echo "$bin $v round $round rc=$? $(grep -E "$pat" "$f" | sed 's/  */ /g' | tr '\n' '|')"
    done
  done
  pack
}
suites() {
  timeout 240 $R/rlx_gpu_tests > "$L/gpu-tests.log" 2>&1
  echo "gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/gpu-tests.log" | tr '\n' ' ')" \
    "$(grep -E '^\[  FAILED  \]' "$L/gpu-tests.log" | head -5 | tr '\n' ' ')"
  pack
  timeout 60 $R/rlx_op_tests --gtest_filter='*cuda*' > "$L/conformance.log" 2>&1
  echo "conformance rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/conformance.log" | tr '\n' ' ')"
  pack
}
encoders() {
  timeout 120 $R/rlx_bert_bench --graphs-only > "$L/bert.log" 2>&1
  echo "bert rc=$? $(grep -v '^{' "$L/bert.log" | head -12 | tr '\n' '|')"
  pack
}
bert_ab() {
  local m=$1 s=$2 round v f
  shift 2
  for round in 1 2; do
    for v in "$@"; do
      f="$L/$m-$s-$(echo "$v" | tr " =" "_-")-$round.log"
      env $v timeout 60 $R/rlx_bert_bench --graphs-only --model $m --shape $s > "$f" 2>&1
      echo "$m $s $v round $round rc=$? $(grep -E 'cuda-graphs' "$f" | sed 's/  */ /g')"
    done
  done
  pack
}
host_cpu_tests() {
  grep -o -m1 -E 'amx_bf16|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' '
  echo
  timeout 120 $R/rlx_runtime_tests --gtest_filter='CpuKernelsB.*:Runtime.*' > "$L/runtime-tests.log" 2>&1
  echo "runtime tests rc=$? $(grep -E '^\[  (PASSED|FAILED)|SKIPPED|Amx' "$L/runtime-tests.log" | head -6 | tr '\n' ' ')"
  pack
}
torch_peer() {
  (cd bench && timeout 200 python3 bert_torch.py --compile) > "$L/bert-torch.log" 2>&1
  echo "torch rc=$? $(grep -E 'MiniLM|BERT|bert|minilm' "$L/bert-torch.log" | grep -v '^{' | head -12 | tr '\n' '|')"
  pack
}
random_model_corpus() {
  M=/tmp/random-model CORPUS=/tmp/corpus.txt
  python3 bench/random_weights_like.py fill "$1" $M
  python3 -c "
import sys; sys.path.insert(0, 'bench')
from embed_e2e import make_corpus
c = make_corpus('$M', $2)
open('$CORPUS', 'w').write('\n'.join(c) + '\n')
print('corpus', len(c))"
}
