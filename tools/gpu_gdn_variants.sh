#!/usr/bin/env bash
# On the GPU machine: the GDN tests and design 3's fwd+bwd times for the
# tree as it is and then for each patch applied on top of it (one at a time,
# reverted after), so that several candidate kernels are checked and timed
# in one call; only what a patch touches is rebuilt. Prints a table last.
#   tools/gpu_gdn_variants.sh [PATCH ...]   PATCH: a `git diff` of the tree (patch -p1)
#   KERNELS=1 tools/gpu_gdn_variants.sh …   also each kernel's time at 8x512 under ncu (one
#                                            fwd+bwd, ≈ 20 s more a variant), a line under its row
# e.g. on the development machine, inside the repository:
#   git diff main...gdn-state3 > variants/state3.patch; git diff main...gdn-split > variants/split.patch
#   then run `tools/gpu_gdn_variants.sh variants/*.patch` through the device tool.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
out=${OUT:-/tmp}
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DBITRANK_FUZZ=OFF >/dev/null || exit 1
rows=()
run_one() {  # $1: label
  local label=$1 log="$out/gdn_variant_$(echo "$1" | tr -c 'A-Za-z0-9_.-' '_').log"
  if ! cmake --build build-gpu -j"$(nproc)" > "$log" 2>&1; then
    rows+=("$(printf '%-28s %s' "$label" "build failed (see $(basename "$log"))")"); return
  fi
  ./build-gpu/bitrank_tests --gtest_filter='GdnCuda.*:Parity/gdn*:*Hybrid*:*hybrid*' >> "$log" 2>&1
  local tests; tests=$(grep -E "^\[  (PASSED|FAILED)  \] [0-9]+ test" "$log" | tr '\n' ' ')
  local t8 t32
  t8=$(BITRANK_GDN_KERNEL=3 ./build-gpu/bitrank bench --device cuda --op gdn --shape 8x512 --min-time 0.3 2>&1 | awk '/^gdn fwd/ {print $(NF-2); exit}')
  t32=$(BITRANK_GDN_KERNEL=3 ./build-gpu/bitrank bench --device cuda --op gdn --shape 1x32768 --min-time 0.3 2>&1 | awk '/^gdn fwd/ {print $(NF-2); exit}')
  rows+=("$(printf '%-28s 8x512 %8s ms   1x32768 %8s ms   %s' "$label" "${t8:-?}" "${t32:-?}" "$tests")")
  if [ -n "${KERNELS:-}" ]; then
    local csv="$out/gdn_variant_ncu.csv"
    BITRANK_GDN_KERNEL=3 ncu -k regex:"prep_|state_|out_kernel|du_local|grads_|finish_" -c 10 --csv --log-file "$csv" \
      --metrics gpu__time_duration.sum ./build-gpu/bitrank bench --device cuda --op gdn --shape 8x512 --min-time 0.01 \
      >/dev/null 2>&1
    rows+=("    8x512 kernels (ncu): $(python3 tools/ncu_table.py "$csv" --line 2>&1 | tail -1)")
  fi
}
run_one "tree as is"
for p in "$@"; do
  if patch -p1 --dry-run -s < "$p" >/dev/null && patch -p1 -s < "$p"; then
    run_one "$(basename "$p")"
    patch -p1 -R -s < "$p"
  else
    rows+=("$(printf '%-28s %s' "$(basename "$p")" "does not apply")")
  fi
done
echo "== GDN design 3 per variant (tests: GdnCuda, gdn parity, hybrid) =="
printf '%s\n' "${rows[@]}"
