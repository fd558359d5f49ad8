#!/usr/bin/env bash
# On the GPU machine: the LittleBit anchor (bench/anchors/littlebit.py) —
# LittleBit's own code compresses SmolLM2-135M-Instruct to 1.0 and 0.55 bpw
# (2 paths) and distils it on bitrank's training split; perplexity on
# bitrank's evaluation split, tokens/s and peak memory; each run's table last.
#   tools/gpu/gpu_littlebit.sh
# Inputs (relative to the repository root; each path can be overridden):
#   LITTLEBIT_SRC  a checkout of SamsungLabs/LittleBit           .anchors/LittleBit
#   GGUF, TRAIN_IDS, EVAL_IDS and the wheels (.anchors/*.whl: at least gguf;
#   also accelerate if the image lacks it: transformers refuses GGUF files
#   without it) as tools/gpu/anchor_inputs.sh says.
# Budget: STEPS (200) steps × BATCH (4) windows × SEQ_LEN (512) tokens, LR (4e-5),
#   EFF_BITS ("1.0 0.55"), EVAL_WINDOWS (0: the whole split), EVAL_SEQ_LEN
#   (512, as bitrank compress), EXTRA (more
#   flags for the script, e.g. "--tokens 10000000").
# Output: $OUT (default /tmp)/littlebit_<eff_bit>.{log,json}.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tools/gpu/anchor_inputs.sh
. tools/gpu/anchor_inputs.sh
anchor_inputs gpu_littlebit || exit 1
src=${LITTLEBIT_SRC:-$anchors/LittleBit}
[ -f "$src/quantization/modules/littlebit.py" ] || { echo "gpu_littlebit: $src is not a LittleBit checkout"; exit 1; }

bits=${EFF_BITS:-1.0 0.55}
for b in $bits; do
  # shellcheck disable=SC2086  # EXTRA is a list of flags
  python3 bench/anchors/littlebit.py --littlebit-src "$src" --gguf "$gguf" --train-ids "$train" \
    --eval-ids "$eval" --eff-bit "$b" --residual 1 --steps "${STEPS:-200}" --batch "${BATCH:-4}" \
    --seq-len "${SEQ_LEN:-512}" --lr "${LR:-4e-5}" --l2l-loss-scale 10 --eval-windows "${EVAL_WINDOWS:-0}" \
    --eval-seq-len "${EVAL_SEQ_LEN:-512}" \
    --out "$out/littlebit_$b.json" ${EXTRA:-} 2>&1 | tee "$out/littlebit_$b.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || echo "gpu_littlebit: the run at eff_bit $b failed (see $out/littlebit_$b.log)"
done
echo
for b in $bits; do sed -n '/^== LittleBit anchor/,$p' "$out/littlebit_$b.log"; done
