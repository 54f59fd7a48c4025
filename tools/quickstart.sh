#!/usr/bin/env bash
# The main job: set up, build, then train the Fashion-MNIST convnet for one epoch on this CPU over
# two data-parallel devices and report test accuracy; also shows the plan and a GPT graph's summary.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
bash tools/build.sh

cleave=build/tools/cleave
out=build/quickstart
mkdir -p "$out"

echo
echo "== cleave compile examples/fashion_cnn.cir --train --dp 2 (AdamW, lr 1e-3, global batch 64)"
"$cleave" compile examples/fashion_cnn.cir --train --loss softmax_cross_entropy \
  --optimizer adamw:lr=1e-3 --dp 2 -o "$out/fashion_cnn.cplan"

echo
echo "== cleave inspect $out/fashion_cnn.cplan"
"$cleave" inspect "$out/fashion_cnn.cplan"

echo
echo "== cleave run: one epoch of Fashion-MNIST on 2 local devices, then test accuracy"
"$cleave" run "$out/fashion_cnn.cplan" --data fashion-mnist --epochs 1 --eval-data fashion-mnist \
  --metrics "$out/fashion_cnn.metrics.jsonl" --checkpoint-dir "$out/fashion_cnn.checkpoints"

echo
echo "== cleave export: the trained weights as one safetensors file"
"$cleave" export "$out/fashion_cnn.cplan" --checkpoint-dir "$out/fashion_cnn.checkpoints" -o "$out/fashion_cnn.safetensors"

echo
echo "== cleave gen gpt + inspect: a 4-layer GPT (hidden 256, 4 heads, seq 64, vocab 1024, batch 8)"
"$cleave" gen gpt --layers 4 --hidden 256 --heads 4 --seq 64 --vocab 1024 --batch 8 -o "$out/gpt.cir"
"$cleave" inspect "$out/gpt.cir"
