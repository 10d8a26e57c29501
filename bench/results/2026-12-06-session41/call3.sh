#!/usr/bin/env bash
# Session 41 call 3: the one-cluster prototype's breakdown (per-phase timestamps, parts left out).
cd "$(dirname "$0")/../.."
source scripts/carried_call.sh build/carry-s41c/s41c.tar.xz "${1:?OUT}"
timeout 100 $R/rlx_decode_cluster_bench --keys 96 --steps 50 > "$L/cluster-keys96.log" 2>&1; echo "rc=$?"; cat "$L/cluster-keys96.log"
pack
