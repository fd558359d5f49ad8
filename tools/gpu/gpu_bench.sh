#!/usr/bin/env bash
# On the GPU machine: build, check (every cuda parity case against the f64
# reference), run `bitrank bench --device cuda`, then the
# anchors that are not part of it (PyTorch SDPA; FLA when FLA_SRC points at a
# checkout of flash-linear-attention), and print the side-by-side table and
# the ratios against the issue's targets (tools/analysis/bench_ratios.py) last.
#   tools/gpu/gpu_bench.sh [--bypass-guard]
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
out=${OUT:-/tmp}
tools/gpu/gpu_build.sh || exit 1
# Check before timing: every op's cuda parity cases against the f64 reference.
./build-gpu/bitrank_tests --gtest_filter='Parity/*.cuda' > "$out/bench_parity.txt" 2>&1
checked=$?
./build-gpu/bitrank bench --device cuda --min-time 0.5 > "$out/bench_cuda.txt" 2>&1 || { tail -5 "$out/bench_cuda.txt"; exit 1; }
python3 bench/anchors/sdpa.py > "$out/anchor_sdpa.txt" 2>&1 || tail -3 "$out/anchor_sdpa.txt"
if [ -n "${FLA_SRC:-}" ]; then
  python3 bench/anchors/fla_gdn.py "$@" > "$out/anchor_fla.txt" 2>&1 || tail -3 "$out/anchor_fla.txt"
fi
echo "== bitrank bench --device cuda =="
sed -n '/^op /,$p' "$out/bench_cuda.txt"
echo "== anchors (median ms) =="
cat "$out/anchor_sdpa.txt"
[ -f "$out/anchor_fla.txt" ] && cat "$out/anchor_fla.txt"
echo "== cuda parity cases against the f64 reference (before the timings) =="
grep -E "^\[  (PASSED|FAILED)  \]" "$out/bench_parity.txt" | sort -u
python3 tools/analysis/bench_ratios.py "$out/bench_cuda.txt" "$out/anchor_sdpa.txt" $([ -f "$out/anchor_fla.txt" ] && echo "$out/anchor_fla.txt")
exit $checked
