#!/usr/bin/env bash
# Configures cleave with Ninja into build/ and builds everything (BUILD_TYPE, default Release).
set -euo pipefail
cd "$(dirname "$0")/.."

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}"
cmake --build build -j"$(nproc)"
