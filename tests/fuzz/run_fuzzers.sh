#!/usr/bin/env bash
# Fuzzes every libFuzzer target for a bounded time and fails on the first crash, naming its reproducer.
# Usage: bash tests/fuzz/run_fuzzers.sh BUILD_DIR SECONDS_EACH [TARGET...]   (targets: text_ir
# onnx_import plan npy idx safetensors checkpoint; default all). Extra libFuzzer flags: CLEAVE_FUZZ_FLAGS.
# Each target starts from its committed seeds (tests/fuzz/corpus/TARGET) plus the inputs earlier
# runs found, kept in BUILD_DIR/fuzz/corpus/TARGET; a crash is saved in BUILD_DIR/fuzz/crashes and
# replays with `BUILD_DIR/tests/fuzz/cleave_fuzz_TARGET FILE`.
set -euo pipefail

build=$(cd "$1" && pwd)
seconds=$2
shift 2
fuzz_dir=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(text_ir onnx_import plan npy idx safetensors checkpoint)
mkdir -p "$build/fuzz/crashes" "$build/fuzz/logs"

# Summary figures of one run from libFuzzer's final stats.
stat() { grep -m1 "^stat::$1:" "$2" | awk '{print $2}'; }

failed=0
for target in "${targets[@]}"; do
  binary=$build/tests/fuzz/cleave_fuzz_$target
  [[ -x $binary ]] || { echo "run_fuzzers: $binary is not built (configure with -DCLEAVE_BUILD_FUZZERS=ON)"; exit 2; }
  work=$build/fuzz/corpus/$target
  log=$build/fuzz/logs/$target.log
  mkdir -p "$work"
  dict=()
  [[ -f $fuzz_dir/$target.dict ]] && dict=(-dict="$fuzz_dir/$target.dict")
  # A slow input counts as a hang (-timeout); an input may not make the reader allocate more
  # than 2 GiB (-rss_limit_mb, -malloc_limit_mb).
  status=0
  start=$SECONDS
  # shellcheck disable=SC2086
  "$binary" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/fuzz/crashes/$target-" "${dict[@]}" ${CLEAVE_FUZZ_FLAGS:-} \
    "$work" "$fuzz_dir/corpus/$target" >"$log" 2>&1 || status=$?
  runs=$(stat number_of_executed_units "$log")
  speed=$(stat average_exec_per_sec "$log")
  corpus=$(find "$work" -type f | wc -l)
  if [[ $status -eq 0 ]]; then
    echo "fuzz $target: ${runs:-?} inputs in $((SECONDS - start)) s (${speed:-?}/s), work corpus $corpus files, no crash"
  else
    failed=1
    echo "FAIL fuzz $target (exit $status): $(grep -m1 -E 'ERROR: |runtime error|deadly signal|Test unit written' "$log" || true)"
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|    #[0-9]+ )' "$log" | head -n 30 || true
    grep -m1 'Test unit written to' "$log" || true
  fi
done
exit $failed
