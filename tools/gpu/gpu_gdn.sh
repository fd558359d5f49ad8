#!/usr/bin/env bash
# On the GPU machine: build, check the Gated DeltaNet designs against the f64
# reference (GdnCuda.*, the gdn parity cases under design 3) and the hybrid
# model's tests (which run the default design), time
# fwd+bwd for designs 2 and 3, and (with --kernels) each kernel of design 3
# at 8×512 and at 1×32768 under ncu (time, DRAM bytes, active warps, the
# three largest stall reasons). Prints a short table last.
#   tools/gpu/gpu_gdn.sh [--kernels]
#   FLA_SRC=<flash-linear-attention checkout> tools/gpu/gpu_gdn.sh …   also times FLA's
#                                          chunk_gated_delta_rule in the same run (its
#                                          backward's version guard bypassed: see
#                                          bench/anchors/fla_gdn.py)
#   tools/gpu/gpu_gdn.sh --detail K[,K…]   ncu's stall reasons, pipe and memory use and
#                                          occupancy for one launch of each kernel K at
#                                          8x512 (e.g. state_fwd,state_bwd; SHAPE=1x32768 for
#                                          the long window); builds and profiles only (no tests,
#                                          no timing)
#   tools/gpu/gpu_gdn.sh --sanitize         compute-sanitizer memcheck over the GDN tests,
#                                          racecheck over two small cases (no other runs;
#                                          SANITIZE=memcheck or racecheck runs only that one)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
tools/gpu/gpu_build.sh || exit 1
mode=${1:-}
rc=0
# Tests and timings (not for --detail or --sanitize, which only build and run their tool).
if [ "$mode" = "" ] || [ "$mode" = "--kernels" ]; then
  log=${OUT:-/tmp}/gpu_gdn.log
  ./build-gpu/bitrank_tests --gtest_filter='GdnCuda.*:*Hybrid*:*hybrid*' > "$log" 2>&1; rc=$?
  ./build-gpu/bitrank_tests --gtest_filter='Parity/gdn*' >> "$log" 2>&1 || rc=1
  echo "== design 3 against the f64 reference (largest relative L2 error per output) =="
  grep -E "design 3|\[parity\] gdn.* cuda " "$log" | awk '{for(i=1;i<=NF;i++) if($i=="rel") {v=$(i+1); n=$(i-1)} ; if (v+0 > m[n]+0) m[n]=v} END {for (k in m) printf "  %-6s %s\n", k, m[k]}'
  echo "== tests =="; grep -E "^\[  PASSED  \]|^\[  FAILED  \]" "$log" | sort -u
  for k in 2 3; do
    echo "== design $k =="
    ./build-gpu/bitrank bench --device cuda --gdn-design "$k" --op gdn --min-time 0.3 2>&1 | grep -E "^gdn fwd" |
      head -2 | tee "${OUT:-/tmp}/gdn_design$k.txt"
  done
  if [ -n "${FLA_SRC:-}" ]; then
    echo "== FLA chunk_gated_delta_rule, bf16 (guard bypassed), median ms =="
    python3 bench/anchors/fla_gdn.py --bypass-guard > "${OUT:-/tmp}/gdn_fla.txt" 2>&1
    tail -9 "${OUT:-/tmp}/gdn_fla.txt"
    python3 tools/analysis/bench_ratios.py "${OUT:-/tmp}/gdn_design3.txt" "${OUT:-/tmp}/gdn_fla.txt"
  fi
fi
if [ "$mode" = "--detail" ]; then
  for kernel in $(echo "${2:?kernel names, e.g. state_fwd,state_bwd}" | tr ',' ' '); do
    echo "== ${kernel} under ncu (one launch at ${SHAPE:-8x512}) =="
    ncu -k regex:"${kernel}" -c 1 --section WarpStateStats --section SchedulerStats \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \
      --section LaunchStats --section SourceCounters \
      ./build-gpu/bitrank bench --device cuda --op gdn --shape "${SHAPE:-8x512}" --min-time 0.01 2>&1 |
      grep -vE "^==PROF==|^gdn |^op |^---|^bitrank bench|^$" | head -160
  done
fi
if [ "$mode" = "--sanitize" ]; then
  # memcheck over every GDN test; racecheck (far slower) over two small cases:
  # one chunk per window, and a window of two chunks (the state passes'
  # operands fetched a chunk ahead).
  for run in "memcheck 150 GdnCuda.*:Parity/gdn*.cuda" \
             "racecheck 200 Parity/gdn_6v2k_d128_2x45_ckpt8.cuda:Parity/gdn_conv2_1x70.cuda"; do
    read -r tool limit filter <<< "$run"
    [ -n "${SANITIZE:-}" ] && [ "$tool" != "$SANITIZE" ] && continue
    echo "== compute-sanitizer --tool ${tool} over ${filter} =="
    timeout "${limit}" compute-sanitizer --tool "${tool}" ./build-gpu/bitrank_tests \
      --gtest_filter="${filter}" > "${OUT:-/tmp}/gdn_${tool}.log" 2>&1
    echo "rc=$? (124: the timeout)"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "${OUT:-/tmp}/gdn_${tool}.log" | sort -u
  done
fi
if [ "$mode" = "--kernels" ]; then
  for shape in 8x512 1x32768; do
    echo "== design 3 kernels at ${shape} (ncu, one fwd+bwd: its 16 launches, the conv, norm and gate kernels included) =="
    ncu -k regex:"conv_|qk_|gate_|prep_|state_|out_kernel|norm_|du_local|grads_|finish_" -c 16 --csv \
      --log-file /tmp/gdn_ncu.csv \
      --metrics "gpu__time_duration.sum,dram__bytes.sum,sm__warps_active.avg.pct_of_peak_sustained_active,$(python3 tools/analysis/ncu_table.py --stall-metrics)" \
      ./build-gpu/bitrank bench --device cuda --op gdn --shape "${shape}" --min-time 0.01 >/dev/null 2>&1
    python3 tools/analysis/ncu_table.py /tmp/gdn_ncu.csv
  done
fi
exit $rc
