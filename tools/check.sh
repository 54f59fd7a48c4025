#!/usr/bin/env bash
# The test command: set up, build, run every test through ctest, then the sanitizer and fuzzing
# check (tools/check_sanitizers.sh). CLEAVE_CHECK_ALL=1 adds slow tests; CLEAVE_CHECK_SANITIZERS=0
# leaves the sanitizer check out.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
bash tools/build.sh

# Slow tests only with CLEAVE_CHECK_ALL=1. GPU tests (label gpu) always run: without a CUDA device
# they skip, each saying so.
labels=(-LE slow)
[[ "${CLEAVE_CHECK_ALL:-0}" == 1 ]] && labels=()
status=0
ctest --test-dir build --output-on-failure -j2 "${labels[@]}" || status=1
if [[ "${CLEAVE_CHECK_SANITIZERS:-1}" == 1 ]]; then
  bash tools/check_sanitizers.sh || status=1
fi
exit $status
