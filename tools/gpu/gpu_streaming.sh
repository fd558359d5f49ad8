#!/usr/bin/env bash
# On the GPU machine: the streamed runs against the resident ones — the
# same losses bit for bit, what streaming costs in tokens/s, and the peak
# device memory under a cap below the model's weights. Prints a table last.
#   BITRANK_MODEL=<gguf> TRAIN_TEXT=<training part> EVAL_TEXT=<evaluation part> tools/gpu/gpu_streaming.sh
# Budget: STEPS (20) steps per block (layer-wise) or in all (e2e), 2
# evaluation windows; CAP (480MiB: under SmolLM2-135M's 513 MiB of f32
# weights), the capped runs with 2 (layer-wise) / 1 (e2e) windows of 256
# tokens per step so that a step's activations fit beside the head and the
# block slots.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
out=${OUT:-/tmp}/streaming
mkdir -p "$out"
tools/gpu/gpu_build.sh || exit 1
bin=build-gpu/bitrank
common=(--device cuda --steps "${STEPS:-20}" --eval-windows 2 --checkpoint-every 0)
[ -n "${BITRANK_MODEL:-}" ] && common+=(--model "$BITRANK_MODEL")
[ -n "${TRAIN_TEXT:-}" ] && common+=(--text "$TRAIN_TEXT")
[ -n "${EVAL_TEXT:-}" ] && common+=(--eval-text "$EVAL_TEXT")
cap=${CAP:-480MiB}
runs=()
for objective in layer e2e; do
  for mode in resident stream cap; do
    name=${objective}_$mode
    extra=(--no-stream)
    [ $mode = stream ] && extra=(--stream)
    if [ $mode = cap ]; then
      extra=(--device-memory-cap "$cap" --windows 2 --seq-len 256)
      [ $objective = e2e ] && extra=(--device-memory-cap "$cap" --windows 1 --seq-len 256)
    fi
    "$bin" compress "${common[@]}" --objective $objective "${extra[@]}" -o "$out/$name.bitrank" \
      > "$out/$name.json" 2> "$out/$name.log" || { echo "$name failed:"; tail -3 "$out/$name.log"; }
    rm -f "$out/$name.bitrank"
    runs+=("$name")
  done
done
evals=()
if [ -n "${BITRANK_MODEL:-}" ]; then
  for mode in no-stream stream; do
    "$bin" eval --device cuda --model "$BITRANK_MODEL" ${EVAL_TEXT:+--text "$EVAL_TEXT"} --max-windows 8 --$mode \
      > "$out/eval_$mode.txt" 2>&1 || tail -3 "$out/eval_$mode.txt"
    evals+=("$out/eval_$mode.txt")
  done
fi
python3 - "$out" "${runs[@]}" <<'PY'
import json, os, sys
out, runs = sys.argv[1], sys.argv[2:]
def losses(name):
    path = os.path.join(out, name + ".bitrank.steps.jsonl")
    return [json.loads(l)["loss"] for l in open(path)] if os.path.exists(path) else None
print(f"\n== streamed vs resident (cuda) ==")
print(f"{'run':<14}{'streamed':>9}{'cap':>10}{'tokens/s':>11}{'peak MiB':>10}{'ppl':>12}  losses vs resident")
for name in runs:
    try:
        s = json.load(open(os.path.join(out, name + ".json")))
    except Exception:
        print(f"{name:<14} (no summary)"); continue
    t = s["training"]
    ref, mine = losses(name.rsplit("_", 1)[0] + "_resident"), losses(name)
    if name.endswith("_cap"):
        same = "(other windows per step)"
    else:
        same = "bit-identical" if ref is not None and mine == ref and len(ref) > 0 else f"DIFFER ({len(mine or [])} vs {len(ref or [])})"
    cap = s.get("device_memory_cap_bytes")
    print(f"{name:<14}{str(s.get('streaming')):>9}{(f'{cap/2**20:.0f}' if cap else '-'):>10}{t['model_tokens_per_s']:>11.0f}"
          f"{(s['peak_device_memory_bytes'] or 0)/2**20:>10.0f}{s['perplexity']['student']['ppl']:>12.5g}  {same}")
PY
for f in "${evals[@]}"; do echo "$(basename "$f"): $(grep -E "\"(nll|ppl|tokens_per_s|peak[a-z_]*)\"" "$f" | tr -d " \n")"; done
