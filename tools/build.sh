#!/usr/bin/env bash
# Configures cleave with Ninja into build/ and builds everything (BUILD_TYPE, default Release).
set -euo pipefail
cd "$(dirname "$0")/.."

# ccache, where installed, makes rebuilds after a branch switch or a fresh clone cheap.
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" "${launcher[@]}"
cmake --build build -j"$(nproc)"
