#!/usr/bin/env bash
# On the GPU machine: build, time one layer-wise training step of a
# SmolLM2-135M block (`bitrank bench --device cuda --op "layer-wise step"`,
# 8×512 rows, random weights at the 1.0 bpw ranks; no model file needed),
# then profile a few steps under ncu and print the kernels by total time.
#   tools/gpu/gpu_step.sh [launches to profile, default 3000]
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
tools/gpu/gpu_build.sh || exit 1
echo "== bitrank bench --device cuda --op 'layer-wise step' =="
./build-gpu/bitrank bench --device cuda --op "layer-wise step" --min-time 1 2>&1 | grep -E "^layer-wise" || exit 1
echo "== kernels of the first ${1:-3000} launches (setup, then steps), by total time (ncu) =="
ncu -c "${1:-3000}" --csv --log-file /tmp/step_ncu.csv --metrics gpu__time_duration.sum \
  ./build-gpu/bitrank bench --device cuda --op "layer-wise step" --min-time 0.01 >/dev/null 2>&1
python3 tools/analysis/ncu_table.py /tmp/step_ncu.csv --group | head -40
