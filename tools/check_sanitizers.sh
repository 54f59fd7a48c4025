#!/usr/bin/env bash
# The sanitizer check (tools/check.sh runs it): builds cleave with clang, ASan and UBSan, and the
# libFuzzer targets, into build-sanitize/; runs the unit tests, the op harness, the bad-input, fault and equivalence
# end-to-end tests and every fuzz seed under them; then fuzzes each file reader for
# CLEAVE_FUZZ_SECONDS (default 15) seconds.
# Any sanitizer report, crash or test failure fails the check. CLEAVE_SANITIZE_BUILD sets the build folder.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${CLEAVE_SANITIZE_BUILD:-build-sanitize}
fuzz_seconds=${CLEAVE_FUZZ_SECONDS:-15}
fuzzers=(text_ir onnx_import plan npy idx safetensors checkpoint)
# Reports stop the program (UBSan's too) with a stack trace; leaks at exit count as errors.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=()
# step LABEL COMMAND...: runs one step, prints its time, and remembers a failure without stopping.
step() {
  local label=$1 start=$SECONDS
  shift
  if "$@"; then
    echo "check_sanitizers: $label passed in $((SECONDS - start)) s"
  else
    echo "check_sanitizers: $label FAILED after $((SECONDS - start)) s"
    failed+=("$label")
  fi
}

# 1. Configure and build. Debug with -O1 and line tables only: quick to build (the kernels skip
#    their -O3), quick enough to run, assertions on, and reports name file:line.
start=$SECONDS
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang-14 \
  -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_FLAGS_DEBUG="-O1 -gline-tables-only" \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" -DCLEAVE_SANITIZE=address,undefined \
  -DCLEAVE_BUILD_FUZZERS=ON -DCLEAVE_WITH_CUDA=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target cleave cleave_unit_tests cleave_op_tests "${fuzzers[@]/#/cleave_fuzz_}"
echo "check_sanitizers: build took $((SECONDS - start)) s"

# 2. Unit tests, in one process (quicker than ctest's process per test). Tests that time
#    themselves against limits meant for optimized builds are left out.
step "unit tests" "$build/tests/cleave_unit_tests" --gtest_brief=1 \
  --gtest_filter='-StrategySearch.AutoBeatsPureDpPureTpAndMegatronOnGpt3InUnderFiveSeconds'
# The op harness: every op's cases through its CPU kernel and gradient check (about 30 s instrumented).
step "op harness" "$build/tests/ops/cleave_op_tests" --gtest_brief=1

# 3. End-to-end tests through the instrumented cleave.
for script in bad_input faults equivalence; do
  step "e2e $script" bash "tests/e2e/$script.sh" "$build/tools/cleave" .
done

# 4. Every committed seed (regressions included), then a bounded fuzzing session per reader.
step "fuzz seeds" ctest --test-dir "$build" -L fuzz --output-on-failure
step "fuzzing (${fuzz_seconds} s each)" bash tests/fuzz/run_fuzzers.sh "$build" "$fuzz_seconds"

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "check_sanitizers: failed: ${failed[*]}"
  exit 1
fi
echo "check_sanitizers: all passed in $((SECONDS)) s"
