#!/usr/bin/env bash
# On the GPU machine: build, check the BLR layer on cuda (its parity cases,
# the bitmap expansion, and the end-to-end and hybrid-block parity cases
# that run it), and time it beside its six cuBLAS GEMMs. Prints a short
# table last.
#   tools/gpu/gpu_blr.sh             tests and times
#   tools/gpu/gpu_blr.sh --kernels   also each launch of one fwd+bwd+sign call under ncu
#                                    (time, DRAM bytes), the bench case without its anchor
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
out=${OUT:-/tmp}
tools/gpu/gpu_build.sh || exit 1
./build-gpu/bitrank_tests --gtest_filter='*Blr*:*blr*:Parity/e2e*:Parity/student*:Bitmap*:Parity/bitmap*' > "$out/gpu_blr_tests.log" 2>&1; rc=$?
./build-gpu/bitrank bench --device cuda --op blr --min-time 0.5 > "$out/gpu_blr_bench.txt" 2>&1
./build-gpu/bitrank bench --device cuda --op "six BLR" --min-time 0.5 >> "$out/gpu_blr_bench.txt" 2>&1
if [ "${1:-}" = "--kernels" ]; then
  # The case's first call (its setup's init kernels come before it).
  ncu -c 60 --csv --log-file /tmp/blr_ncu.csv --metrics gpu__time_duration.sum,dram__bytes.sum \
    ./build-gpu/bitrank bench --device cuda --op "blr fwd+bwd+sign" --no-anchors --min-time 0.01 > /dev/null 2>&1
  echo "== blr fwd+bwd+sign, m=n=5120 r=1024 T=4096 P=1: each launch (ncu; after the setup's init kernels) =="
  grep -v "init_kernel" /tmp/blr_ncu.csv > /tmp/blr_ncu_call.csv
  python3 tools/analysis/ncu_table.py /tmp/blr_ncu_call.csv
fi
echo "== cuda BLR tests =="
grep -E "^\[  (PASSED|FAILED)  \]" "$out/gpu_blr_tests.log" | sort -u
grep -E "\[parity\] blr.* cuda " "$out/gpu_blr_tests.log" | awk '{for(i=1;i<=NF;i++) if($i=="rel") {v=$(i+1); n=$(i-1)} ; if (v+0 > m[n]+0) m[n]=v} END {for (k in m) printf "  largest rel error %-5s %s\n", k, m[k]}'
echo "== bench (ms) =="
grep -E "^(blr|cuBLAS)" "$out/gpu_blr_bench.txt"
exit $rc
