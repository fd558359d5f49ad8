#!/usr/bin/env bash
# On the GPU machine: the NanoQuant anchor (bench/anchors/nanoquant.py) —
# NanoQuant's own post-training pipeline (calibration statistics, block
# reconstruction with ADMM binary factorisation, model-level KD) compresses
# SmolLM2-135M-Instruct at --bits 1.0 on bitrank's calibration tokens;
# perplexity of the teacher and of the result on bitrank's evaluation windows,
# seconds per phase, peak memory, bpw from the compressed tensors; table last.
#   tools/gpu/gpu_nanoquant.sh
#   EXTRA="--admm-outer-iters 100 --nonfact-epochs 1 --fact-epochs 1" tools/gpu/gpu_nanoquant.sh
#   STOP_AFTER_S=480 tools/gpu/gpu_nanoquant.sh   (then the same again, to resume)
# Inputs (relative to the repository root; each path can be overridden):
#   NANOQUANT_SRC  a checkout of SamsungLabs/NanoQuant (src/nanoquant;
#                  media/ and the CUDA kernel sources are not needed)  .anchors/NanoQuant
#   GGUF, TRAIN_IDS, EVAL_IDS and the wheels (.anchors/*.whl: gguf for
#   transformers' GGUF loader, cut_cross_entropy for NanoQuant's calibration
#   loss, pure Python + Triton) as tools/gpu/anchor_inputs.sh says.
# Budget: NanoQuant's defaults unless EXTRA caps them (the flags of
#   bench/anchors/nanoquant.py: --admm-outer-iters, --nonfact-epochs,
#   --fact-epochs, --model-kd-epochs, --no-model-kd, --num-calib-samples,
#   --seqlen, --bits); EVAL_WINDOWS (64) windows of 512 tokens;
#   BLOCK_PPL_WINDOWS (4) windows for the perplexity printed after each block.
# Longer than one sitting: STOP_AFTER_S=N stops after the first block that
#   ends past N seconds (exit 3), its state kept in ${TMPDIR:-/tmp}/nanoquant[_TAG].model;
#   the same command again resumes from there (bench/anchors/nanoquant.py says how).
# Output: $OUT (default /tmp)/nanoquant[_TAG].{log,json} (TAG from $TAG).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tools/gpu/anchor_inputs.sh
. tools/gpu/anchor_inputs.sh
anchor_inputs gpu_nanoquant || exit 1
src=${NANOQUANT_SRC:-$anchors/NanoQuant}
python3 -c "import cut_cross_entropy" 2>/dev/null ||
  { echo "gpu_nanoquant: no cut_cross_entropy package (put its wheel in $anchors/)"; exit 1; }
[ -f "$src/src/nanoquant/core/compress_model.py" ] || { echo "gpu_nanoquant: $src is not a NanoQuant checkout"; exit 1; }

name=nanoquant${TAG:+_$TAG}
# shellcheck disable=SC2086  # EXTRA is a list of flags
python3 bench/anchors/nanoquant.py --nanoquant-src "$src" --gguf "$gguf" --train-ids "$train" --eval-ids "$eval" \
  --eval-windows "${EVAL_WINDOWS:-64}" --eval-seq-len 512 --block-ppl-windows "${BLOCK_PPL_WINDOWS:-4}" \
  --workdir "${TMPDIR:-/tmp}/$name.model" --stop-after-s "${STOP_AFTER_S:-0}" --out "$out/$name.json" ${EXTRA:-} \
  2>&1 | tee -a "$out/$name.log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 3 ] && { echo "gpu_nanoquant: stopped to resume; run the same command again"; exit 3; }
rm -rf "${TMPDIR:-/tmp}/$name.model"
[ "$rc" -eq 0 ] || { echo "gpu_nanoquant: the run failed (see $out/$name.log)"; exit "$rc"; }
echo
sed -n '/^== NanoQuant anchor/,$p' "$out/$name.log"
