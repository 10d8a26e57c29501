#!/usr/bin/env bash
# Per kernel of each CUDA object: SASS instructions, call sites (slow paths of
# IEEE division, sqrt, sincos...: their presence costs registers and branches
# even when not taken), and local-memory stores / loads (spills, or arrays
# indexed at run time). Kernels with calls or local memory first.
#   scripts/sass_audit.sh build/sm90/rlx/backends/cuda/CMakeFiles/rlx_backend_cuda.dir/kernels/gemv_q8.cu.o ...
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: scripts/sass_audit.sh OBJECT.cu.o..." >&2; exit 1; }
PATH="$("$(dirname "$0")/sass_tools.sh"):$PATH"
printf "%6s %5s %4s %4s  %s\n" instr calls STL LDL kernel
for o in "$@"; do
  cuobjdump -sass "$o" | awk '
    /Function :/ { if (name != "") printf "%6d %5d %4d %4d  %s\n", n, calls, stl, ldl, name
                   name = $3; n = calls = stl = ldl = 0; next }
    /\/\*[0-9a-f]+\*\// { n++ }
    /CALL\.REL/ { calls++ }
    / STL/ { stl++ }
    / LDL/ { ldl++ }
    END { if (name != "") printf "%6d %5d %4d %4d  %s\n", n, calls, stl, ldl, name }'
done | c++filt | sort -k2,2nr -k3,3nr -k1,1nr
