#!/usr/bin/env bash
# End-to-end test: the Fashion-MNIST convnet reaches at least 90% test accuracy after 2 epochs.
# Usage: bash train_cnn.sh PATH_TO_cleave SOURCE_DIR   (about 80 s on 2 cores)
set -euo pipefail
cleave=$1
source_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$cleave" compile "$source_dir/examples/fashion_cnn.cir" --train --optimizer adamw:lr=1e-3 \
  -o "$tmp/cnn.cplan"
"$cleave" run "$tmp/cnn.cplan" --data fashion-mnist --epochs 2 --eval-data fashion-mnist --progress never \
  >"$tmp/out"
cat "$tmp/out"
accuracy=$(sed -nE 's/^eval accuracy: ([0-9.]+).*/\1/p' "$tmp/out")
/usr/bin/python3 -c "import sys; sys.exit(0 if $accuracy >= 0.90 else 1)" ||
  { echo "FAIL: fashion_cnn accuracy $accuracy < 0.90 after 2 epochs" >&2; exit 1; }
