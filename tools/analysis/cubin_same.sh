#!/usr/bin/env bash
# Whether the CUDA device code of the working tree is the same, byte for
# byte, as that of a base revision: each src/cuda/*.cu and each of the
# tests' tests/support/*.cu compiled to an sm_90a cubin in both (the build's
# flags, without -lineinfo, whose line table changes whenever lines move),
# the cubins compared. For a change meant to
# alter no kernel (a refactor, a comment, a shared helper): "identical" for
# every file proves it without a GPU; a file that differs needs the GPU
# machine's tests like any kernel change. A file moved since BASE is
# compared with its old path's. Needs nvcc, not a GPU.
#   tools/analysis/cubin_same.sh [BASE]     BASE: a revision (default HEAD)
# Prints one line a file and exits non-zero when any differs or fails.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
base=${1:-HEAD}
command -v nvcc >/dev/null || { echo "cubin_same: no nvcc on this machine"; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/base" "$work/tree"
git archive "$base" src include tests | tar -x -C "$work/base" || { echo "cubin_same: cannot read revision $base"; exit 2; }
flags=(-std=c++20 --expt-relaxed-constexpr -O3 -gencode arch=compute_90a,code=sm_90a -cubin)
compile() {  # $1: source root, $2: file (relative to it), $3: output
  (cd "$1" && nvcc "${flags[@]}" -Iinclude -Isrc -Itests "$2" -o "$3" 2> "$3.log")
}
# nvcc names a file's anonymous namespace _GLOBAL__N__<8 hex digits>_ after
# its absolute path, so the two copies' symbols differ in those digits alone:
# compared with the digits zeroed (same length, so no offset moves)
same_code() {
  python3 - "$1" "$2" <<'PY'
import re, sys
norm = lambda p: re.sub(rb"_GLOBAL__N__[0-9a-f]{8}_", b"_GLOBAL__N__00000000_", open(p, "rb").read())
sys.exit(0 if norm(sys.argv[1]) == norm(sys.argv[2]) else 1)
PY
}
status=0
# Files renamed since base (git's rename detection): new path → old path.
renamed=$(git diff -M --name-status "$base" | awk '$1 ~ /^R/ {print $3 " " $2}')
for f in src/cuda/*.cu tests/support/*.cu; do
  [ -f "$f" ] || continue
  name=$(basename "$f" .cu)
  old=$f
  [ -f "$work/base/$f" ] || old=$(awk -v f="$f" '$1 == f {print $2}' <<< "$renamed")
  if [ -z "$old" ] || [ ! -f "$work/base/$old" ]; then
    echo "$f: new (no base to compare)"; status=1; continue
  fi
  label=$f; [ "$old" = "$f" ] || label="$f (was $old)"
  compile "$work/base" "$old" "$work/$name.base.cubin" & compile . "$f" "$work/$name.tree.cubin" & wait
  if [ ! -s "$work/$name.base.cubin" ] || [ ! -s "$work/$name.tree.cubin" ]; then
    echo "$label: does not compile"; cat "$work/$name.base.cubin.log" "$work/$name.tree.cubin.log" | grep -m3 error
    status=1
  elif same_code "$work/$name.base.cubin" "$work/$name.tree.cubin"; then
    echo "$label: identical"
  else
    echo "$label: DIFFERS"; status=1
  fi
done
exit $status
