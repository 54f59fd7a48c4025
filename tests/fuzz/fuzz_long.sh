#!/usr/bin/env bash
# A long fuzzing session, not part of CI: builds the libFuzzer targets optimized and without ASan
# (for speed: crashes, aborts, UBSan-free hangs and out-of-memory inputs are still found; replay any
# finding under ASan with tools/check_sanitizers.sh's build), then fuzzes each file reader for RUNS
# executions (default 10^7), one after another, and prints the counts.
# Usage: bash tests/fuzz/fuzz_long.sh [RUNS] [TARGET...]   (targets as tests/fuzz/run_fuzzers.sh)
# CLEAVE_FUZZ_BUILD sets the build folder (default build-fuzz); a finding is saved in
# BUILD/fuzz/crashes, the inputs that grew coverage in BUILD/fuzz/corpus (merge the useful ones
# into tests/fuzz/corpus/TARGET, with a regression- name for a fixed crash).
set -euo pipefail
cd "$(dirname "$0")/../.."

runs=${1:-10000000}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(text_ir onnx_import plan npy idx safetensors checkpoint)
build=${CLEAVE_FUZZ_BUILD:-build-fuzz}

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang-14 \
  -DCMAKE_CXX_COMPILER=clang++-14 -DCLEAVE_BUILD_FUZZERS=ON -DCLEAVE_WITH_CUDA=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]/#/cleave_fuzz_}"

# run_fuzzers.sh stops each target at -runs (or after a week), on the first finding.
CLEAVE_FUZZ_FLAGS="-runs=$runs ${CLEAVE_FUZZ_FLAGS:-}" exec bash tests/fuzz/run_fuzzers.sh "$build" 604800 "${targets[@]}"
