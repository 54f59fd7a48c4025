#!/usr/bin/env bash
# The test command: set up, build, run every test through ctest. CLEAVE_CHECK_ALL=1 adds slow tests.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
bash tools/build.sh

excluded='gpu|slow'
[[ "${CLEAVE_CHECK_ALL:-0}" == 1 ]] && excluded='gpu'
ctest --test-dir build --output-on-failure -j2 -LE "$excluded"
