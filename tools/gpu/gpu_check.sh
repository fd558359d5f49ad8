#!/usr/bin/env bash
# On the GPU machine: build with CUDA (sm_90a), run the whole test suite
# (the cuda parity cases run there), and print a summary table last.
#   tools/gpu/gpu_check.sh [gtest filter]      e.g. 'Parity/*'
# Output: the test log goes to $OUT/gpu_tests.log when OUT is set.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
filter=${1:-*}
log=${OUT:-/tmp}/gpu_tests.log
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
tools/gpu/gpu_build.sh || exit 1
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
