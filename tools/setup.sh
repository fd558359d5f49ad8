#!/usr/bin/env bash
# Installs what bitrank needs (Debian packages only) and builds it into build/.
# Safe to rerun: installs only what is missing, rebuilds incrementally.
#   BUILD_DIR   build directory (default: build)
#   CUDA        AUTO (default: build the CUDA backend when nvcc exists), ON, OFF
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ pkg-config libopenblas-dev liblapacke-dev nlohmann-json3-dev libcli11-dev
          libfmt-dev libgtest-dev libbenchmark-dev clang libclang-rt-14-dev
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

# nvcc lives outside PATH on some images.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA="${CUDA:-AUTO}" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)"
