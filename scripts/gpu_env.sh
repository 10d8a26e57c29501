# Sourced by the device scripts: library paths for the carried .deps, and the
# model files unpacked by scripts/gpu_session.sh (when they were carried).
export PATH=/usr/local/cuda/bin:$PATH
L=$PWD/.deps/root/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$L:$L/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export RLX_DEPS_PREFIX=$PWD/.deps/root
[ -f /tmp/rlx-models/model/model.safetensors ] && export RLX_MINILM_DIR=/tmp/rlx-models/model
[ -f /tmp/rlx-models/gemma-3-270m-q4_k_m.gguf ] && export RLX_GEMMA_GGUF=/tmp/rlx-models/gemma-3-270m-q4_k_m.gguf
B=${RLX_GPU_BUILD:-build/gpu}
