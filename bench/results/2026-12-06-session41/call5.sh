#!/usr/bin/env bash
# Session 41 call 5: the decode prototype with norm weights by bulk copy a layer ahead, tile tables in shared
# memory, and the grid form's attention merged by 16 owners.
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s41e/s41e.tar.xz "${1:?OUT}"
timeout 120 $R/rlx_decode_cluster_bench --keys 96 --steps 50 > "$L/proto-keys96.log" 2>&1; echo "rc=$?"; cat "$L/proto-keys96.log"
pack
