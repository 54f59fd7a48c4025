#!/usr/bin/env bash
# End-to-end training of imported ONNX models: an MLP, a CNN and a CNN of composed ops (ConvTranspose,
# reflection Pad, InstanceNormalization, HardSwish) on fixed Fashion-MNIST batches, and a
# GPT-style decoder (whose layer norms PyTorch's exporter merged into one initializer) on token
# batches, each 10 SGD steps, match PyTorch's losses (tests/fixtures/*/train/losses.json) within 2e-3
# relative.
# Usage: bash onnx_train.sh PATH_TO_cleave SOURCE_DIR
set -euo pipefail

cleave=$1
source_dir=$2
fixtures=$source_dir/tests/fixtures
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; exit 1; }

# train NAME DATA_DIR: compile NAME's model for training with its recorded optimizer, run 10 steps on
# DATA_DIR's batches of 16, and compare the losses with PyTorch's.
train() {
  local name=$1 data=$2
  local optimizer
  optimizer=$(cat "$fixtures/$name/train/optimizer.txt")
  echo "$name ($optimizer):"
  "$cleave" compile "$fixtures/$name/model.onnx" --batch 16 --train --loss softmax_cross_entropy \
    --optimizer "$optimizer" -o "$tmp/$name.cplan" >/dev/null || fail "compile of $name for training failed"
  "$cleave" run "$tmp/$name.cplan" --data "npy:$data" --steps 10 --metrics "$tmp/$name.jsonl" \
    --progress never >/dev/null || fail "training run of $name failed"
  $python - "$tmp/$name.jsonl" "$fixtures/$name/train/losses.json" <<'PY' || fail "$name's losses differ from PyTorch's"
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
actual = [step["loss"] for step in steps]
expected = json.load(open(sys.argv[2]))
assert len(actual) == len(expected) == 10, (len(actual), len(expected))
worst = max(abs(a - e) / abs(e) for a, e in zip(actual, expected))
print("  cleave  " + " ".join(f"{a:.4f}" for a in actual))
print("  pytorch " + " ".join(f"{e:.4f}" for e in expected))
print(f"  max relative difference {worst:.2e}")
assert worst <= 2e-3, worst
PY
}

train mlp "$fixtures/fashion_batches"
train train_cnn "$fixtures/fashion_batches"
train train_composites "$fixtures/fashion_batches"
train gpt17 "$fixtures/gpt17/train"

echo "onnx_train.sh: all checks passed"
