#!/usr/bin/env bash
# On the GPU machine: build, then check the tensor-core tile primitives on
# their own (tests/tile_cuda_test.cpp: one 3xBF16 product on mma.sync and on
# wgmma against the host, the two against each other) and time them side
# by side. Prints the [tile] lines and the test summary last.
#   tools/gpu_tile.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DBITRANK_FUZZ=OFF >/dev/null || exit 1
cmake --build build-gpu -j"$(nproc)" 2>&1 | grep -E "error|warning: " -A3 ; [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
log=${OUT:-/tmp}/gpu_tile.log
./build-gpu/bitrank_tests --gtest_filter='TileCuda.*' > "$log" 2>&1
rc=$?
grep -E "^\[tile\]" "$log"
grep -E "^\[  (PASSED|FAILED)  \]|Failure|Expected|Which is" "$log" | head -20
exit $rc
