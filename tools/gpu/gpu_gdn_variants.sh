#!/usr/bin/env bash
# On the GPU machine: the GDN tests and design 3's fwd+bwd times for the
# tree as it is and then for each patch applied on top of it, so that
# several candidate kernels are checked and timed in one call. The tree is
# built once; the variants' binaries are then built all at once, each
# recompiling only what its patch touches (tools/gpu/variant_build.py: a copy
# of the tree, the base build's own commands), and are tested and timed in
# turn; each variant's design-3 results are compared with the tree's bit for
# bit, shape by shape of the test's shapes (BITRANK_GDN_DUMP,
# tests/gdn_cuda_test.cpp), which checks a variant meant to change no result
# and names the shapes where one meant to change some does; and with each
# earlier variant, so that one built on another can be checked against it.
# Prints a table last.
#   tools/gpu/gpu_gdn_variants.sh [PATCH ...]   PATCH: a `git diff` of the tree (patch -p1)
#   KERNELS=1 tools/gpu/gpu_gdn_variants.sh …   also each kernel's time at 8x512 under ncu (one
#                                                fwd+bwd, ≈ 20 s more a variant), a line under its row
#   STALLS=REGEX [STALLS_COUNT=N] …             also every stall reason of the first N (default 1)
#                                                launches of the kernels matching REGEX at 8x512
#   TILE=1 tools/gpu/gpu_gdn_variants.sh …      also each build's TileCuda.SplitProducts* tests (a
#                                                variant that changes the tile primitives), a line under its row
#   BUDGET_S=N tools/gpu/gpu_gdn_variants.sh …  start no variant after N seconds (default 470: a
#                                                variant with KERNELS=1 takes ≈ 100 s, and a command on
#                                                the GPU machine is stopped at 600 s); the rest are listed as skipped
# Each variant's rows are printed as soon as it is done (and appended to
# $OUT/gdn_variants_table.txt), so a call stopped at its time limit still
# returns what it measured; the whole table is printed again last.
# e.g. on the development machine, inside the repository:
#   git diff main...gdn-state3 > variants/state3.patch; git diff main...gdn-split > variants/split.patch
#   then run `tools/gpu/gpu_gdn_variants.sh variants/*.patch` through the device tool.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
out=${OUT:-/tmp}
work=${TMPDIR:-/tmp}/gdn_variants
if ! tools/gpu/gpu_build.sh > "$out/gdn_variant_build.log" 2>&1; then
  echo "the tree does not build: see gdn_variant_build.log"; tail -20 "$out/gdn_variant_build.log"; exit 1
fi
rm -rf "$work" && mkdir -p "$work"
n=0
for p in "$@"; do
  n=$((n + 1))
  python3 tools/gpu/variant_build.py build-gpu "$p" "$work/$n" > "$work/$n.log" 2>&1 &
done
wait
rows=()
done_labels=() done_dumps=()  # the variants run so far (not the tree), for the bitwise comparisons
same_dump() {  # $1, $2: dump prefixes; true when every shape's results are equal bit for bit
  local i=0 name
  while IFS= read -r name; do
    cmp -s "$1.$i" "$2.$i" || return 1
    i=$((i + 1))
  done < "$2.shapes"
}
run_one() {  # $1: label, $2: the directory holding its bitrank and bitrank_tests
  local label=$1 bin=$2 log="$out/gdn_variant_$(echo "$1" | tr -c 'A-Za-z0-9_.-' '_').log"
  local dump="$work/$(echo "$1" | tr -c 'A-Za-z0-9_.-' '_').dump"
  BITRANK_GDN_DUMP="$dump" "$bin/bitrank_tests" --gtest_filter='GdnCuda.*:Parity/gdn*:*Hybrid*:*hybrid*' > "$log" 2>&1
  local tests; tests=$(grep -E "^\[  (PASSED|FAILED)  \] [0-9]+ test" "$log" | tr '\n' ' ')
  local bits="results: no dump"
  if [ "$label" = "tree as is" ]; then
    [ -s "$dump.shapes" ] && base_dump=$dump && bits="results: the base"
  elif [ -s "$dump.shapes" ] && [ -n "${base_dump:-}" ]; then
    # shape by shape (the test's PREFIX.i files, named in PREFIX.shapes)
    local i=0 same=0 differ=() name
    while IFS= read -r name; do
      if cmp -s "$dump.$i" "$base_dump.$i"; then same=$((same + 1)); else differ+=("$name"); fi
      i=$((i + 1))
    done < "$base_dump.shapes"
    if [ ${#differ[@]} -eq 0 ]; then bits="results: bitwise = tree ($i shapes)"
    else bits="results: bitwise = tree on $same of $i shapes; differ: $(IFS=';'; echo "${differ[*]}")"; fi
    local k
    for k in "${!done_dumps[@]}"; do  # and to each earlier variant
      same_dump "$dump" "${done_dumps[$k]}" && bits+="; bitwise = ${done_labels[$k]}"
    done
    done_labels+=("$label")
    done_dumps+=("$dump")
  fi
  local t8 t32
  t8=$("$bin/bitrank" bench --device cuda --op gdn --shape 8x512 --min-time 0.3 2>&1 | awk '/^gdn fwd/ {print $(NF-2); exit}')
  t32=$("$bin/bitrank" bench --device cuda --op gdn --shape 1x32768 --min-time 0.3 2>&1 | awk '/^gdn fwd/ {print $(NF-2); exit}')
  rows+=("$(printf '%-28s 8x512 %8s ms   1x32768 %8s ms   %s  %s' "$label" "${t8:-?}" "${t32:-?}" "$tests" "$bits")")
  if [ -n "${TILE:-}" ]; then
    local tile_log="${log%.log}_tile.log" tile
    "$bin/bitrank_tests" --gtest_filter='TileCuda.SplitProducts*' > "$tile_log" 2>&1
    tile=$(grep -E "^\[  (PASSED|FAILED)  \] [0-9]+ test" "$tile_log" | tr '\n' ' ')
    rows+=("    TileCuda.SplitProducts*: ${tile:-no result (see $(basename "$tile_log"))}")
  fi
  if [ -n "${KERNELS:-}" ]; then
    local csv="$out/gdn_variant_ncu.csv"
    ncu -k regex:"conv_|qk_|gate_|prep_|state_|out_kernel|norm_|du_local|grads_|finish_" -c 17 --csv --log-file "$csv" \
      --metrics gpu__time_duration.sum "$bin/bitrank" bench --device cuda --op gdn --shape 8x512 --min-time 0.01 \
      >/dev/null 2>&1
    rows+=("    8x512 kernels (ncu): $(python3 tools/analysis/ncu_table.py "$csv" --line 2>&1 | tail -1)")
  fi
  if [ -n "${STALLS:-}" ]; then
    local csv="$out/gdn_variant_stalls.csv"
    ncu -k regex:"$STALLS" -c "${STALLS_COUNT:-1}" --csv --log-file "$csv" \
      --metrics "gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,$(python3 tools/analysis/ncu_table.py --stall-metrics)" \
      "$bin/bitrank" bench --device cuda --op gdn --shape 8x512 --min-time 0.01 >/dev/null 2>&1
    while IFS= read -r line; do rows+=("    stalls (cycles an issue):$line"); done < <(python3 tools/analysis/ncu_table.py "$csv" --all-stalls 2>&1 | grep -v "^  total")
  fi
}
table="$out/gdn_variants_table.txt"
: > "$table"
shown=0
show_new_rows() {  # the rows added since the last call, now (a later timeout keeps them)
  while [ "$shown" -lt "${#rows[@]}" ]; do
    echo "${rows[$shown]}" | tee -a "$table"
    shown=$((shown + 1))
  done
}
run_one "tree as is" build-gpu
show_new_rows
n=0
for p in "$@"; do
  n=$((n + 1))
  if [ "$SECONDS" -gt "${BUDGET_S:-470}" ]; then
    rows+=("$(printf '%-28s %s' "$(basename "$p")" "skipped: ${SECONDS} s gone, BUDGET_S=${BUDGET_S:-470}")")
  elif [ -x "$work/$n/bitrank_tests" ] && [ -x "$work/$n/bitrank" ]; then
    run_one "$(basename "$p")" "$work/$n"
  else
    cp "$work/$n.log" "$out/gdn_variant_$(basename "$p" | tr -c 'A-Za-z0-9_.-' '_')_build.log"
    rows+=("$(printf '%-28s %s' "$(basename "$p")" "build failed: $(tail -1 "$work/$n.log")")")
  fi
  show_new_rows
done
echo "== GDN design 3 per variant (tests: GdnCuda, gdn parity, hybrid) =="
printf '%s\n' "${rows[@]}"
