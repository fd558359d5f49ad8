#!/usr/bin/env bash
# On the GPU machine: where one kernel's warps stall, instruction by
# instruction. Profiles one launch of each kernel matching REGEX in
# `bitrank bench --op gdn` under ncu's source counters (PC sampling), saves
# the report and its SASS source page as CSV under $OUT, and prints the
# instructions that hold most of the stall samples
# (tools/analysis/ncu_source_table.py).
#   tools/gpu/gpu_source_profile.sh BIN_DIR LABEL KERNEL[,KERNEL…]
#   BIN_DIR: a directory holding the bitrank binary (build-gpu, or a
#   variant's from tools/gpu/gpu_gdn_variants.sh); SHAPE=1x32768 for the long
#   window; TOP=N instructions listed (default 20)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
bin=${1:?BIN_DIR}; label=${2:?LABEL}; kernels=${3:?KERNEL[,KERNEL…]}
out=${OUT:-/tmp}
for kernel in $(echo "$kernels" | tr ',' ' '); do
  rep="$out/source_${label}_${kernel}"
  ncu -k regex:"${kernel}" -c 1 --section SourceCounters --section WarpStateStats \
    --import-source no -f -o "$rep" \
    "$bin/bitrank" bench --device cuda --op gdn --shape "${SHAPE:-8x512}" --min-time 0.01 > "$rep.log" 2>&1
  ncu -i "$rep.ncu-rep" --page source --print-source sass --csv > "$rep.csv" 2>> "$rep.log"
  echo "== ${label}: ${kernel} at ${SHAPE:-8x512}, instructions by stall samples =="
  python3 tools/analysis/ncu_source_table.py "$rep.csv" --top "${TOP:-20}" 2>&1
  echo "== ${label}: ${kernel}, memory instructions (per execution, against ncu's ideal) =="
  python3 tools/analysis/ncu_source_table.py "$rep.csv" --memory 2>&1 | head -16
  rm -f "$rep.ncu-rep"
done
(cd "$out" && tar czf "source_${label}.tgz" source_"${label}"_*.csv source_"${label}"_*.log && rm -f source_"${label}"_*.csv source_"${label}"_*.log)
