#!/usr/bin/env bash
# Makes what bench/peers needs: the peers' venv from PyPI at the pinned versions of
# bench/peers/requirements.txt (torch 2.x, torchvision, transformers, onnxruntime; about 6 GB with
# torch's CUDA libraries) and a build with the benchmarks (-DCLEAVE_BUILD_BENCH=ON). Idempotent.
# Usage: bench/setup_peers.sh   (env: PEERS_VENV, default /tmp/peers-venv; BUILD, default build)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${PEERS_VENV:-/tmp/peers-venv}
build=${BUILD:-build}
bash tools/setup.sh
if ! "$venv/bin/python" -c "import torch, torchvision, transformers, onnxruntime" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r bench/peers/requirements.txt
fi
"$venv/bin/pip" freeze | grep -E '^(torch|torchvision|transformers|onnxruntime|onnx|numpy)==' | sed 's/^/setup_peers: /'
cmake -S . -B "$build" -G Ninja -DCLEAVE_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target cleave onnx_inference_bench kernels_bench
echo "setup_peers: venv $venv, cleave $build/tools/cleave; now: bash bench/peers/run_all.sh"
