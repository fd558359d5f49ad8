#!/usr/bin/env bash
# On the GPU machine: build, check the Gated DeltaNet designs against the f64
# reference (GdnCuda.*, the gdn parity cases under design 3) and the hybrid
# model's tests (which run the default design), time
# fwd+bwd for designs 2 and 3, and (with --kernels) each kernel of design 3
# at 8×512 under ncu. Prints a short table last.
#   tools/gpu_gdn.sh [--kernels]
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DBITRANK_FUZZ=OFF >/dev/null || exit 1
cmake --build build-gpu -j"$(nproc)" 2>&1 | grep -E "error" -A3
log=${OUT:-/tmp}/gpu_gdn.log
./build-gpu/bitrank_tests --gtest_filter='GdnCuda.*:*Hybrid*:*hybrid*' > "$log" 2>&1; rc=$?
BITRANK_GDN_KERNEL=3 ./build-gpu/bitrank_tests --gtest_filter='Parity/gdn*' >> "$log" 2>&1 || rc=1
echo "== design 3 against the f64 reference (largest relative L2 error per output) =="
grep -E "design 3|\[parity\] gdn.* cuda " "$log" | awk '{for(i=1;i<=NF;i++) if($i=="rel") {v=$(i+1); n=$(i-1)} ; if (v+0 > m[n]+0) m[n]=v} END {for (k in m) printf "  %-6s %s\n", k, m[k]}'
echo "== tests =="; grep -E "^\[  PASSED  \]|^\[  FAILED  \]" "$log" | sort -u
for k in 2 3; do
  echo "== design $k =="
  BITRANK_GDN_KERNEL=$k ./build-gpu/bitrank bench --device cuda --op gdn --min-time 0.3 2>&1 | grep -E "^gdn fwd" | head -2
done
if [ "${1:-}" = "--kernels" ]; then
  echo "== design 3 kernels at 8x512 (ncu, one fwd+bwd: the first 11 launches) =="
  BITRANK_GDN_KERNEL=3 ncu -k regex:"prep_|state_|out_kernel|du_local|grads_|finish_" -c 11 --csv \
    --log-file /tmp/gdn_ncu.csv --metrics gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active \
    ./build-gpu/bitrank bench --device cuda --op gdn --min-time 0.01 >/dev/null 2>&1
  python3 - /tmp/gdn_ncu.csv <<'PY'
import csv, re, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
h = rows[0]; K, M, U, V, I = (h.index(x) for x in ("Kernel Name", "Metric Name", "Metric Unit", "Metric Value", "ID"))
out = {}
for r in rows[1:]:
    name = re.sub(r"\(.*", "", r[K]).split("::")[-1]
    out.setdefault(r[I], [name, 0.0, 0.0])
    if r[M] == "gpu__time_duration.sum":
        out[r[I]][1] = float(r[V].replace(",", "")) * (1e-3 if r[U] == "ns" else 1e3 if r[U] == "ms" else 1.0)
    else:
        out[r[I]][2] = float(r[V].replace(",", ""))
total = 0.0
for name, us, warps in out.values():
    total += us
    print(f"  {name:22s} {us:9.1f} us   active warps {warps:5.1f}%")
print(f"  {'total':22s} {total:9.1f} us")
PY
fi
exit $rc
