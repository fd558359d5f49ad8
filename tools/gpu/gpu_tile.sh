#!/usr/bin/env bash
# On the GPU machine: build, then check the tensor-core tile primitives on
# their own (tests/tile_cuda_test.cpp: one 3xBF16 product on mma.sync and on
# wgmma against the host, the two against each other) and time them side
# by side. Prints the [tile] lines and the test summary last.
#   tools/gpu/gpu_tile.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
tools/gpu/gpu_build.sh || exit 1
log=${OUT:-/tmp}/gpu_tile.log
./build-gpu/bitrank_tests --gtest_filter='TileCuda.*' > "$log" 2>&1
rc=$?
grep -E "^\[tile\]" "$log"
grep -E "^\[  (PASSED|FAILED)  \]|Failure|Expected|Which is" "$log" | head -20
exit $rc
