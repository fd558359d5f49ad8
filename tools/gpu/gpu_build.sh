#!/usr/bin/env bash
# On the GPU machine: configure and build build-gpu (CUDA for sm_90a,
# Release), printing only the compiler's errors and warnings and ninja's
# failed steps; exits non-zero when the build fails. The tools/gpu/gpu_*.sh
# scripts start with `tools/gpu/gpu_build.sh || exit 1`.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DBITRANK_FUZZ=OFF >/dev/null || exit 1
# (the patterns name the messages, not file names: src/core/error.cpp is built too)
cmake --build build-gpu -j"$(nproc)" 2>&1 | grep -E "FAILED: |error: |warning: " -A3
exit "${PIPESTATUS[0]}"
