#!/usr/bin/env bash
# End-to-end ONNX import: each PyTorch-exported fixture (MLP, CNNs, ResNet, MobileNetV2 and V3, GPT-style
# decoders at opsets 14 and 17, op mixes at opsets 11 and 13) imports, compiles for one device, runs,
# and matches PyTorch's output within 1e-4 (the CNNs with --channels-last on and off); import,
# inspect and --batch work on .onnx files.
# Usage: bash onnx_import.sh PATH_TO_cleave SOURCE_DIR
set -euo pipefail

cleave=$1
source_dir=$2
fixtures=$source_dir/tests/fixtures
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; exit 1; }

# compare ACTUAL.npy EXPECTED.npy: same shape, max abs difference at most 1e-4, and at most 1e-3 of
# the expected values' scale (some fixtures' outputs are small: MobileNetV3's are about 1e-3).
compare() {
  $python - "$1" "$2" <<'PY' || fail "$1 differs from $2"
import sys
import numpy as np
actual, expected = np.load(sys.argv[1]), np.load(sys.argv[2])
assert actual.shape == expected.shape, (actual.shape, expected.shape)
error = float(np.abs(actual.astype(np.float64) - expected).max()) if expected.size else 0.0
scale = max(float(np.abs(expected.astype(np.float64)).max()) if expected.size else 0.0, 1e-3)
print(f"  max abs error {error:.3g} (outputs up to {scale:.3g})")
assert error <= 1e-4 and error <= 1e-3 * scale, error
PY
}

# check_switched_off FLAG MARK: $name's default plan (at $batch, in $tmp) holds MARK; compiled with
# FLAG off it holds none, and its outputs still match PyTorch's.
check_switched_off() {
  local flag=$1 mark=$2 plan="$tmp/$name${1}-off.cplan"
  grep -aq "$mark" "$tmp/$name.cplan" || fail "$name's plan has no $mark"
  "$cleave" compile "$fixtures/$name/model.onnx" --batch "$batch" "$flag" off -o "$plan" >/dev/null ||
    fail "compile of $name with $flag off failed"
  ! grep -aq "$mark" "$plan" || fail "$name's plan with $flag off has $mark"
  "$cleave" run "$plan" --inputs "$fixtures/$name/inputs" --outputs "$plan.out" >/dev/null ||
    fail "run of $name with $flag off failed"
  echo "  $flag off:"
  compare "$plan.out/output.npy" "$fixtures/$name/expected/output.npy"
}

# 1. Every fixture: compile (inference, one device) and run, against PyTorch's output.
for name in mlp cnn ops11 ops13 gpt14 gpt17 resnet mobilenet mobilenet_v3 train_cnn train_composites; do
  dir=$fixtures/$name
  batch=$($python -c "import numpy as np, sys; print(np.load(sys.argv[1]).shape[0])" "$dir/inputs/input.npy")
  echo "$name (batch $batch):"
  "$cleave" compile "$dir/model.onnx" --batch "$batch" -o "$tmp/$name.cplan" >/dev/null ||
    fail "compile of $name failed"
  "$cleave" run "$tmp/$name.cplan" --inputs "$dir/inputs" --outputs "$tmp/$name.out" >/dev/null ||
    fail "run of $name failed"
  compare "$tmp/$name.out/output.npy" "$dir/expected/output.npy"
  # The CNNs' convolutions run NHWC by default (--channels-last on); off keeps NCHW. Their 3x3
  # stride-1 convolutions may run as Winograd (--winograd on, the default; on AVX-512, cnn's first
  # one, of a 16x16 plane, does); off keeps every one direct. Same outputs either way.
  case $name in cnn | resnet | mobilenet | mobilenet_v3 | train_cnn) check_switched_off --channels-last NHWC ;; esac
  case $name in cnn | resnet) check_switched_off --winograd allow_winograd ;; esac
done

# 2. import writes text IR that compiles like the .onnx itself; the shape subgraph folded away.
"$cleave" import "$fixtures/cnn/model.onnx" --batch 2 -o "$tmp/cnn.cir"
grep -q 'reshape(%GlobalAveragePool) {shape = \[2, -1\]}' "$tmp/cnn.cir" || fail "cnn's Reshape shape did not fold"
grep -q 'param %fc.weight : f32\[10,8\] = dense<' "$tmp/cnn.cir" || fail "cnn's weights are not parameters with data"
"$cleave" compile "$tmp/cnn.cir" -o "$tmp/cnn_cir.cplan" >/dev/null
"$cleave" run "$tmp/cnn_cir.cplan" --inputs "$fixtures/cnn/inputs" --outputs "$tmp/cnn_cir.out" >/dev/null
compare "$tmp/cnn_cir.out/output.npy" "$fixtures/cnn/expected/output.npy"

# 3. Initializers stored as external data (cnn_external/weights.bin) import like inline ones.
"$cleave" compile "$fixtures/cnn_external/model.onnx" --batch 2 -o "$tmp/cnn_external.cplan" >/dev/null
"$cleave" run "$tmp/cnn_external.cplan" --inputs "$fixtures/cnn/inputs" --outputs "$tmp/cnn_external.out" >/dev/null
compare "$tmp/cnn_external.out/output.npy" "$fixtures/cnn/expected/output.npy"

# 4. ONNX forms PyTorch rarely emits (default pooling strides, auto_pad, LayerNormalization's
#    statistics, Dropout's mask, ReduceSum's noop, Pow's integer exponent): every output matches.
echo "forms:"
"$cleave" compile "$fixtures/forms/model.onnx" -o "$tmp/forms.cplan" >/dev/null || fail "compile of forms failed"
"$cleave" run "$tmp/forms.cplan" --inputs "$fixtures/forms/inputs" --outputs "$tmp/forms.out" >/dev/null ||
  fail "run of forms failed"
for expected in "$fixtures"/forms/expected/*.npy; do
  compare "$tmp/forms.out/$(basename "$expected")" "$expected"
done

# 5. The symbolic batch dim is 1 unless --batch says otherwise; inspect reads .onnx.
"$cleave" inspect "$fixtures/gpt14/model.onnx" >"$tmp/inspect.txt"
grep -q 'inputs: *%input : i64\[1,16\]' "$tmp/inspect.txt" || fail "inspect of gpt14: $(cat "$tmp/inspect.txt")"
grep -q 'nodes: .*softmax 2' "$tmp/inspect.txt" || fail "inspect of gpt14 lacks its two softmaxes"

echo "onnx_import.sh: all checks passed"
