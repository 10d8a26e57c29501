#!/usr/bin/env bash
# Pack binaries built here for a device call that runs them without building
# there (binaries built on the development machine run on the GPU machine):
#   scripts/carry_binaries.sh ARCHIVE BINARY...
# strips each BINARY, adds the shared libraries it needs that the GPU machine
# lacks (the Debian ones under /usr/lib, e.g. libutf8proc, libopenblas; not
# CUDA's or the C runtime's), and writes ARCHIVE (.tar.xz) with the binaries
# at its top and the libraries under lib/. Pass ARCHIVE's folder in the call's
# carry (under build/, which git ignores; the 64 MiB limit counts the archive and the tree:
# six binaries pack into ~20 MB), then on the device:
#   mkdir -p build/run && tar xJf ARCHIVE -C build/run
#   LD_LIBRARY_PATH=$PWD/build/run/lib build/run/rlx_gemm_bench ...
set -euo pipefail
ARCHIVE=${1:?usage: scripts/carry_binaries.sh ARCHIVE.tar.xz BINARY...}
shift
[ $# -gt 0 ] || { echo "carry_binaries: no binaries given" >&2; exit 1; }
# The shared libraries of $1 from the system library folder, but not the C or C++ runtime.
debian_libs() {
  ldd "$1" | awk '$3 ~ /^(\/usr)?\/lib\/x86_64-linux-gnu\// {print $3}' |
    grep -vE '/lib(c|m|dl|rt|pthread|gcc_s|stdc\+\+)\.so' || true
}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib"
for bin in "$@"; do
  [ -x "$bin" ] || { echo "carry_binaries: $bin is not an executable" >&2; exit 1; }
  cp "$bin" "$stage/" && strip "$stage/$(basename "$bin")"
  # Debian libraries the GPU machine does not have (it has CUDA, glibc, libstdc++).
  for lib in $(debian_libs "$bin"); do
    cp -L "$lib" "$stage/lib/"
    for dep in $(debian_libs "$lib"); do cp -L "$dep" "$stage/lib/"; done  # OpenBLAS: the Fortran runtime
  done
done
mkdir -p "$(dirname "$ARCHIVE")"
# A 256 MiB dictionary spans several whole binaries (~63 MB each, stripped), so the next one (the
# same library and device code, mostly) costs little; at xz -9's 64 MiB a binary's twin sat at the
# dictionary's edge and six packed into 42 MB. Packing takes ~3 GB of memory, unpacking 256 MiB.
XZ_OPT='--lzma2=preset=9,dict=256MiB' tar cJf "$ARCHIVE" -C "$stage" .
echo "carry_binaries: $ARCHIVE $(du -h "$ARCHIVE" | cut -f1) ($(ls "$stage" | grep -v '^lib$' | tr '\n' ' ')+ $(ls "$stage/lib" | wc -l) libraries)"
