#!/usr/bin/env bash
# Third-party packages for the GPU machine, which has CUDA, cmake, ninja and gcc
# but no Debian packages and no internet. On a Debian 12 machine with network:
#
#   scripts/gpu_deps.sh            download the .debs into .deps/debs (apt-get download)
#                                  and extract them into .deps/root
#   scripts/gpu_deps.sh --extract  only (re)extract .deps/debs into .deps/root
#                                  (scripts/gpu_run.sh does this when .deps/root is absent)
#
# Docs, manuals, lintian files, the source package and static libraries are
# dropped, except GoogleTest's and Google Benchmark's (their CMake configs import
# the .a files). Builds find the result through RLX_DEPS_PREFIX=$PWD/.deps/root
# (cmake/rlx_deps.cmake). The .debs (~14 MB) are the compact thing to copy; the
# extracted tree is larger because OpenBLAS alone is ~36 MB unpacked.
set -euo pipefail
cd "$(dirname "$0")/.."
DEBS=.deps/debs
ROOT=.deps/root

PACKAGES=(
  nlohmann-json3-dev libcli11-dev
  libutf8proc-dev libutf8proc2
  libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0  # OpenBLAS needs gfortran's runtime
  libgtest-dev libgmock-dev
  libbenchmark-dev libbenchmark1debian
)

# Extracts one .deb without dpkg when the machine has none (ar archive holding
# data.tar.{xz,gz,zst}); python3's tarfile handles xz and gz.
extract_deb() {
  local deb=$1 dest=$2
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$deb" "$dest"
    return
  fi
  python3 - "$deb" "$dest" <<'PY'
import io, sys, tarfile
deb, dest = sys.argv[1], sys.argv[2]
data = open(deb, "rb").read()
assert data[:8] == b"!<arch>\n", f"{deb}: not an ar archive"
pos = 8
while pos + 60 <= len(data):
    name = data[pos:pos + 16].decode().strip().rstrip("/")
    size = int(data[pos + 48:pos + 58].decode().strip())
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
        tarfile.open(fileobj=io.BytesIO(body)).extractall(dest, **kw)
        break
    pos += 60 + size + (size & 1)
else:
    sys.exit(f"{deb}: no data.tar member")
PY
}

if [ "${1:-}" != "--extract" ]; then
  mkdir -p "$DEBS"
  rm -f "$DEBS"/*.deb
  (cd "$DEBS" && apt-get download "${PACKAGES[@]}")
fi

ls "$DEBS"/*.deb >/dev/null 2>&1 || { echo "gpu_deps: no .deb files in $DEBS" >&2; exit 1; }
rm -rf "$ROOT"
mkdir -p "$ROOT"
for deb in "$DEBS"/*.deb; do
  extract_deb "$deb" "$ROOT"
done

# Trim: documentation, and static archives nothing links (OpenBLAS's is 58 MB;
# the build uses its shared library). LAPACK/BLAS compatibility libraries are
# not used either (rlx calls cblas_* from libopenblas).
rm -rf "$ROOT/usr/share/doc" "$ROOT/usr/share/man" "$ROOT/usr/share/lintian" "$ROOT/usr/src"
find "$ROOT" -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' ! -name 'libbenchmark*.a' -delete
find "$ROOT" \( -name 'liblapack.*' -o -name 'libblas.*' \) -delete
# Dangling links left by the deletions (e.g. libopenblas.a -> libopenblasp-r0.3.21.a).
find "$ROOT" -xtype l -delete

echo "gpu_deps: $(du -sh "$DEBS" | cut -f1) of .debs in $DEBS; extracted into $ROOT: $(du -sh "$ROOT" | cut -f1)"
