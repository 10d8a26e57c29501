#!/usr/bin/env bash
# Session 60, call 2 (~5 min): the full GPU suite and the CUDA op conformance on call 1's binaries.
cd "$(dirname "$0")/../../.."
source scripts/carried_call.sh build/carry-s60/s60.tar.xz "${1:?OUT}"
suites
