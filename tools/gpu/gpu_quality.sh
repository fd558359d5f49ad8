#!/usr/bin/env bash
# On the GPU machine: several `bitrank compress --device cuda` recipes one
# after another on the same model, text and evaluation windows, then one
# table: bpw, budget, time, perplexity of the teacher, the initialisation
# and the student, the student's ratio to the teacher.
#   tools/gpu/gpu_quality.sh 'NAME: OPTIONS' ['NAME: OPTIONS' ...]
#   e.g. tools/gpu/gpu_quality.sh 'svid-layer: --init-method svid' 'act-seq: --objective sequential'
# A recipe whose options hold {NAME} reads the model another recipe wrote
# (e.g. 'e2e: --objective e2e --init {act-seq} --steps 600'); recipes run in
# the order given.
# Environment: BITRANK_MODEL (default: the SmolLM2 GGUF found at configure
# time), EVAL_WINDOWS (64), BUDGET_S (540: no recipe starts after it),
# NO_BUILD=1 (skip tools/gpu/gpu_build.sh), RESUME=1 (continue each recipe
# from the checkpoint an interrupted call left in /tmp/quality, with
# --resume; its summary's seconds are then the resumed part's only). Output
# in $OUT (else /tmp):
# NAME.json (summary), NAME.log (stderr); NAME.bitrank stays in /tmp/quality.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export PATH=/usr/local/cuda/bin:$PATH
out=${OUT:-/tmp}
models=/tmp/quality
mkdir -p "$out" "$models"
start=$(date +%s)
[ -n "${NO_BUILD:-}" ] || tools/gpu/gpu_build.sh || exit 1
nvidia-smi --query-gpu=name --format=csv,noheader || true
rows=()
for recipe in "$@"; do
  name=${recipe%%:*}
  opts=${recipe#*:}
  if (( $(date +%s) - start > ${BUDGET_S:-540} )); then
    rows+=("$name: not run (budget)")
    continue
  fi
  # {OTHER} → the model another recipe wrote.
  while [[ $opts =~ \{([A-Za-z0-9_.-]+)\} ]]; do
    opts=${opts//\{${BASH_REMATCH[1]}\}/$models/${BASH_REMATCH[1]}.bitrank}
  done
  args=(--device cuda --eval-windows "${EVAL_WINDOWS:-64}" -o "$models/$name.bitrank")
  [ -n "${BITRANK_MODEL:-}" ] && args+=(--model "$BITRANK_MODEL")
  if [ -n "${RESUME:-}" ]; then
    args+=(--resume)
  else
    rm -f "$models/$name.bitrank.ckpt" "$models/$name.bitrank.blockwise.bitrank.ckpt"
  fi
  # shellcheck disable=SC2086
  build-gpu/bitrank compress "${args[@]}" $opts > "$out/$name.json" 2> "$out/$name.log"
  rc=$?
  if [ $rc -ne 0 ]; then
    rows+=("$name: failed (rc $rc): $(tail -1 "$out/$name.log")")
    continue
  fi
  rows+=("$(python3 - "$out/$name.json" "$name" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
p, a, t, o = s["perplexity"], s["accounting"], s["training"], s["options"]
print(f"{sys.argv[2]:<14} {s['objective']:<10} {s.get('init_method','?'):<5} bpw {a['blr']['bpw']:.3f} ({a['model']['bpw']:.3f} model)"
      f"  tokens/block {o['steps']*o['windows_per_step']*o['seq_len']:>9}  {s['seconds']:6.0f} s"
      f"  ppl teacher {p['teacher']['ppl']:.3f} init {p['init']['ppl'] if p['init'] else float('nan'):.4g} student {p['student']['ppl']:.4g}"
      f"  ({p['student']['ppl']/p['teacher']['ppl']:.2f}x, {p['teacher']['windows']} windows)")
PY
)")
  echo "${rows[-1]}"
done
echo
echo "== recipes =="
printf '%s\n' "${rows[@]}" | tee "$out/quality_table.txt"
