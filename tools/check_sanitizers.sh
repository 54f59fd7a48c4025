#!/usr/bin/env bash
# The sanitizer check (tools/check.sh runs it): builds cleave with clang, ASan and UBSan, and the
# libFuzzer targets, into build-sanitize/; runs the unit tests, the op harness, the bad-input, fault and equivalence
# end-to-end tests and every fuzz seed under them, and fuzzes each file reader for
# CLEAVE_FUZZ_SECONDS (default 15) seconds, CLEAVE_CHECK_JOBS (default: the CPU count) steps at once.
# Any sanitizer report, crash or test failure fails the check. CLEAVE_SANITIZE_BUILD sets the build folder.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${CLEAVE_SANITIZE_BUILD:-build-sanitize}
fuzz_seconds=${CLEAVE_FUZZ_SECONDS:-15}
fuzzers=(text_ir onnx_import plan npy idx safetensors checkpoint)
# Reports stop the program (UBSan's too) with a stack trace; leaks at exit count as errors.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

jobs=${CLEAVE_CHECK_JOBS:-$(nproc)}

# step LABEL COMMAND...: starts one step in the background (at most $jobs at once: the steps are
# single-threaded or wait on timeouts, so running them side by side halves the check's time), its
# output into a log printed whole when the step ends.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
labels=()
step() {
  local label=$1 index=${#labels[@]}
  shift
  labels+=("$label")
  while [[ $(jobs -rp | wc -l) -ge $jobs ]]; do wait -n || true; done
  (
    start=$SECONDS
    if "$@" >"$logs/$index.log" 2>&1; then
      echo "check_sanitizers: $label passed in $((SECONDS - start)) s" >"$logs/$index.status"
    else
      echo "check_sanitizers: $label FAILED after $((SECONDS - start)) s" >"$logs/$index.status"
    fi
    # One step's log at a time, whole, as soon as it ends.
    flock "$logs" cat "$logs/$index.log" "$logs/$index.status"
  ) &
}

# 1. Configure and build. Debug with -O1 and line tables only: quick to build (the kernels skip
#    their -O3), quick enough to run, assertions on, and reports name file:line. (-O0 outside the
#    runtime builds 12% quicker, but the unit tests then run more than twice as long.)
start=$SECONDS
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang-14 \
  -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_FLAGS_DEBUG="-O1 -gline-tables-only" \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" -DCLEAVE_SANITIZE=address,undefined \
  -DCLEAVE_BUILD_FUZZERS=ON -DCLEAVE_WITH_CUDA=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target cleave cleave_unit_tests cleave_op_tests "${fuzzers[@]/#/cleave_fuzz_}"
echo "check_sanitizers: build took $((SECONDS - start)) s"

# 2. The steps, longest first, $jobs at a time. Unit tests in one process (quicker than ctest's
#    process per test); tests that time themselves against limits meant for optimized builds are
#    left out. The op harness runs every op's cases through its CPU kernel and gradient check. The
#    end-to-end tests run through the instrumented cleave. Every committed fuzz seed (regressions
#    included) replays; then each reader is fuzzed for a bounded time.
step "e2e equivalence" bash tests/e2e/equivalence.sh "$build/tools/cleave" .
step "unit tests" "$build/tests/cleave_unit_tests" --gtest_brief=1 \
  --gtest_filter='-StrategySearch.AutoBeatsPureDpPureTpAndMegatronOnGpt3InUnderFiveSeconds'
step "e2e faults" bash tests/e2e/faults.sh "$build/tools/cleave" .
step "op harness" "$build/tests/ops/cleave_op_tests" --gtest_brief=1
step "e2e bad_input" bash tests/e2e/bad_input.sh "$build/tools/cleave" .
step "fuzz seeds" ctest --test-dir "$build" -L fuzz --output-on-failure
for fuzzer in "${fuzzers[@]}"; do
  step "fuzzing $fuzzer (${fuzz_seconds} s)" bash tests/fuzz/run_fuzzers.sh "$build" "$fuzz_seconds" "$fuzzer"
done
wait

failed=()
for index in "${!labels[@]}"; do
  grep -q FAILED "$logs/$index.status" && failed+=("${labels[$index]}")
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "check_sanitizers: failed: ${failed[*]}"
  exit 1
fi
echo "check_sanitizers: all passed in $((SECONDS)) s"
