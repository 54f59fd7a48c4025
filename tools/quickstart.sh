#!/usr/bin/env bash
# The main job, as far as cleave goes today: set up, build, generate a GPT, verify it, summarize models.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
bash tools/build.sh

cleave=build/tools/cleave
cleave_opt=build/tools/cleave-opt
mkdir -p build/quickstart
gpt=build/quickstart/gpt.cir

echo
echo "== cleave gen gpt: a 4-layer GPT (hidden 256, 4 heads, seq 64, vocab 1024, batch 8) -> $gpt"
"$cleave" gen gpt --layers 4 --hidden 256 --heads 4 --seq 64 --vocab 1024 --batch 8 -o "$gpt"

echo "== cleave-opt --passes=verify: parse, verify and print it again"
"$cleave_opt" "$gpt" --passes=verify >build/quickstart/gpt.verified.cir
echo "verified: $gpt ($(wc -l <"$gpt") lines)"

echo
echo "== cleave inspect $gpt"
"$cleave" inspect "$gpt"

echo
echo "== cleave inspect examples/fashion_cnn.cir"
"$cleave" inspect examples/fashion_cnn.cir
