#!/usr/bin/env bash
# On the GPU machine: build with CUDA (sm_90a), run the whole test suite
# (the cuda parity cases run there), and print a summary table last.
#   tools/gpu_check.sh [gtest filter]      e.g. 'Parity/*'
# Output: the test log goes to $OUT/gpu_tests.log when OUT is set.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
filter=${1:-*}
log=${OUT:-/tmp}/gpu_tests.log
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DBITRANK_FUZZ=OFF >/dev/null || exit 1
cmake --build build-gpu -j"$(nproc)" 2>&1 | grep -E "error|warning: " ; [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
./build-gpu/bitrank_tests --gtest_filter="$filter" > "$log" 2>&1
rc=$?
echo
echo "== cuda parity (case, output, error vs tolerance) =="
grep -E "^\s+\[parity\].* cuda " "$log" | sed 's/^ *\[parity\] //'
echo
echo "== failures =="
grep -E "^\[  FAILED  \]" "$log" | sort -u || true
echo
echo "== summary =="
grep -E "^\[==========\]|^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test" "$log"
exit $rc
