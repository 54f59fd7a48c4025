#!/usr/bin/env bash
# End-to-end import of what current PyTorch (2.15) exports: Hugging Face LLaMA, Qwen2 (grouped-query
# attention), BLOOM (ALiBi, FastGELU's formula), GPT-2, BERT (and with its masked-LM head), T5 and Whisper encoders, torchvision ViT, ConvNeXt, EfficientNet and a ResNet
# with batch-statistics BatchNorm, each by the legacy exporter (opsets 14 and 17) and by torch.export's
# (opsets 18 and 21; tests/fixtures/make_modern_onnx.py), and a hand-built model of opset 21's forms. Each imports, compiles, runs and matches
# PyTorch's output within 1e-4 of its scale; the trainable ones (LLaMA, Qwen2, BLOOM, GPT-2, BERT-MLM, the ResNet)
# train 8 SGD steps to PyTorch's losses within 1e-5 relative (the ResNet's BatchNorm running
# statistics to PyTorch's too), and two of them train alike under data and tensor parallelism.
# Usage: bash onnx_modern.sh PATH_TO_cleave SOURCE_DIR
set -euo pipefail

cleave=$1
source_dir=$2
fixtures=$source_dir/tests/fixtures/modern
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python=/usr/bin/python3
failures=()

# compare ACTUAL.npy EXPECTED.npy: same shape; max abs difference at most 1e-4 of the expected
# values' scale (their largest magnitude, at least 1e-3).
compare() {
  $python - "$1" "$2" <<'PY'
import sys
import numpy as np
actual, expected = np.load(sys.argv[1]), np.load(sys.argv[2])
assert actual.shape == expected.shape, (actual.shape, expected.shape)
error = float(np.abs(actual.astype(np.float64) - expected).max())
scale = max(float(np.abs(expected.astype(np.float64)).max()), 1e-3)
print(f"  max abs error {error:.3g} (outputs up to {scale:.3g}; relative {error / scale:.2e})")
assert error <= 1e-4 * scale, error / scale
PY
}

# train DIR NAME [FLAGS...]: 8 SGD steps on DIR/train's batches (of train/batch.txt) with the plan
# FLAGS make (--dp 2, ...) and the fixture's own (train/flags.txt: the --padding-idx a TorchScript
# export lost), against PyTorch's losses.
train() {
  local dir=$1 name=$2 optimizer batch fixture_flags=()
  shift 2
  optimizer=$(cat "$dir/train/optimizer.txt")
  batch=$(cat "$dir/train/batch.txt")
  [[ -f $dir/train/flags.txt ]] && read -ra fixture_flags <"$dir/train/flags.txt"
  "$cleave" compile "$dir/model.onnx" --batch "$batch" --train --loss softmax_cross_entropy --optimizer "$optimizer" \
    "${fixture_flags[@]}" "$@" -o "$tmp/$name.train.cplan" >"$tmp/$name.train.log" 2>&1 ||
    { cat "$tmp/$name.train.log"; return 1; }
  rm -rf "$tmp/$name.run"
  "$cleave" run "$tmp/$name.train.cplan" --data "npy:$dir/train" --steps 8 --metrics "$tmp/$name.jsonl" \
    --checkpoint-dir "$tmp/$name.run/ckpt" --progress never >"$tmp/$name.train.log" 2>&1 ||
    { cat "$tmp/$name.train.log"; return 1; }
  if [[ -d $dir/train/running ]]; then  # BatchNorm's running statistics after the 8 steps, as PyTorch's
    $python - "$source_dir/tests/e2e" "$tmp/$name.run" "$dir/train/running" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from compare_runs import running_statistics_difference
worst, count = running_statistics_difference(sys.argv[2], sys.argv[3])
print(f"         running statistics: {count} tensors, max abs difference {worst:.2e}")
assert worst <= 1e-5, worst
PY
  fi || return 1
  $python - "$tmp/$name.jsonl" "$dir/train/losses.json" <<'PY'
import json, sys
actual = [json.loads(line)["loss"] for line in open(sys.argv[1])]
expected = json.load(open(sys.argv[2]))
assert len(actual) == len(expected) == 8, (len(actual), len(expected))
worst = max(abs(a - e) / abs(e) for a, e in zip(actual, expected))
print("  train: cleave  " + " ".join(f"{a:.4f}" for a in actual))
print("         pytorch " + " ".join(f"{e:.4f}" for e in expected))
print(f"         max relative difference {worst:.2e}")
assert worst <= 1e-5, worst
PY
}

for dir in "$fixtures"/*/; do
  dir=${dir%/}
  name=$(basename "$dir")
  batch=$($python -c "import numpy as np, sys; print(np.load(sys.argv[1]).shape[0])" "$dir/inputs/input.npy")
  echo "$name:"
  if ! "$cleave" compile "$dir/model.onnx" --batch "$batch" -o "$tmp/$name.cplan" >"$tmp/$name.log" 2>&1; then
    sed 's/^/  /' "$tmp/$name.log"
    failures+=("$name (compile)")
    continue
  fi
  if ! "$cleave" run "$tmp/$name.cplan" --inputs "$dir/inputs" --outputs "$tmp/$name.out" >"$tmp/$name.log" 2>&1; then
    sed 's/^/  /' "$tmp/$name.log"
    failures+=("$name (run)")
    continue
  fi
  compare "$tmp/$name.out/output.npy" "$dir/expected/output.npy" || failures+=("$name (output)")
  if [[ -d $dir/train ]]; then
    train "$dir" "$name" || failures+=("$name (training)")
  fi
done

# Data parallelism of imported models: a torch.export LLaMA and the train()-mode ResNet (whose
# BatchNorm statistics are then the global batch's, as one device's) train as on one device.
for name in llama_dynamo18 resnet_bn_train_legacy17; do
  echo "$name --dp 2:"
  train "$fixtures/$name" "$name.dp2" --dp 2 || failures+=("$name --dp 2 (training)")
done

# The forms of opsets 18 to 21 that the exports above may not use (tests/fixtures/forms21, outputs from
# onnx's reference evaluator): every output matches.
echo "forms21:"
forms=$source_dir/tests/fixtures/forms21
if "$cleave" compile "$forms/model.onnx" -o "$tmp/forms21.cplan" >"$tmp/forms21.log" 2>&1 &&
   "$cleave" run "$tmp/forms21.cplan" --inputs "$forms/inputs" --outputs "$tmp/forms21.out" >"$tmp/forms21.log" 2>&1; then
  for expected in "$forms"/expected/*.npy; do
    echo " $(basename "$expected" .npy)"
    compare "$tmp/forms21.out/$(basename "$expected")" "$expected" || failures+=("forms21 $(basename "$expected" .npy)")
  done
else
  sed 's/^/  /' "$tmp/forms21.log"
  failures+=("forms21")
fi

if [[ ${#failures[@]} -gt 0 ]]; then
  echo "FAIL: ${failures[*]}" >&2
  exit 1
fi
echo "onnx_modern.sh: all checks passed"
