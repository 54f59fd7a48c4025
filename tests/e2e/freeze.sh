#!/usr/bin/env bash
# Frozen parameters end to end, on the torch.export LLaMA (tests/fixtures/modern/llama_dynamo18):
#  1. its rotary inv_freq, which torch.export marks as a buffer, is frozen at import: it leaves 8 SGD
#     steps bit for bit as exported (it used to drift: 0.001 -> 0.00104), while the losses follow
#     PyTorch's, which never trains it;
#  2. --freeze 'model.model.embed_tokens.weight,*norm*' keeps those 7 tensors bit for bit, trains the
#     other 15, and gives one device's losses under --dp 2 and --tp 2;
#  3. a glob that matches no parameter, and --freeze without --train, are usage errors (exit 2).
# Usage: bash freeze.sh PATH_TO_cleave SOURCE_DIR
set -euo pipefail

cleave=$1
source_dir=$2
model_dir=$source_dir/tests/fixtures/modern/llama_dynamo18
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python=/usr/bin/python3
optimizer=$(cat "$model_dir/train/optimizer.txt")
batch=$(cat "$model_dir/train/batch.txt")

"$cleave" import "$model_dir/model.onnx" -o "$tmp/llama.cir" >/dev/null

# train NAME [FLAGS...]: 8 steps on the fixture's batches; the compile output in NAME.compile.
train() {
  local name=$1
  shift
  "$cleave" compile "$model_dir/model.onnx" --batch "$batch" --train --optimizer "$optimizer" "$@" \
    -o "$tmp/$name.cplan" >"$tmp/$name.compile" 2>&1 || { cat "$tmp/$name.compile"; return 1; }
  mkdir -p "$tmp/$name"
  "$cleave" run "$tmp/$name.cplan" --data "npy:$model_dir/train" --steps 8 --metrics "$tmp/$name/metrics.jsonl" \
    --checkpoint-dir "$tmp/$name/ckpt" --progress never >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; return 1; }
}

# check_weights RUN FROZEN_COUNT: the parameters frozen must leave training bit for bit as imported
# (their values from the text IR's dense<...>), the others must have moved; FROZEN_COUNT of them frozen.
check_weights() {
  $python - "$source_dir/tests/e2e" "$tmp/llama.cir" "$tmp/$1" "$tmp/$1.compile" "$2" <<'PY'
import re, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from compare_runs import tensors
ir, trained, compiled, expected_count = open(sys.argv[2]).read(), tensors(sys.argv[3]), open(sys.argv[4]).read(), int(sys.argv[5])
frozen_line = re.search(r"^frozen \(no gradient, no optimizer state\): (\d+) parameters? .*$", compiled, re.M)
assert frozen_line, "compile did not report the frozen parameters:\n" + compiled
frozen_count = int(frozen_line.group(1))
assert frozen_count == expected_count, (frozen_count, expected_count, frozen_line.group(0))
kept = moved = 0
for name, values in re.findall(r"param %(\S+) : f32\[[\d,]*\] = dense<f32\[[\d,]*\]: (\[[^\]]*\]|0x[0-9a-f]+)>", ir):
    if values.startswith("0x"):  # the little-endian bytes
        initial = np.frombuffer(bytes.fromhex(values[2:]), dtype="<f4")
    else:
        initial = np.array([float(v) for v in values[1:-1].split(",")], dtype=np.float32)
    after = trained[name].ravel()
    same = after.shape == initial.shape and np.array_equal(after, initial)
    if same:
        kept += 1
    else:
        moved += 1
assert kept == expected_count and moved > 0, f"{kept} parameters left training unchanged, {moved} moved, {expected_count} frozen"
print(f"ok   {sys.argv[3].rsplit('/', 1)[-1]}: {frozen_count} frozen parameters bit for bit as imported, {moved} trained")
PY
}

echo "1. torch.export's buffer (rotary inv_freq) is frozen; losses follow PyTorch's"
train buffers
grep -q "1 parameter (4 elements): model.model.rotary_emb.inv_freq" "$tmp/buffers.compile" ||
  { echo "FAIL: inv_freq is not reported frozen"; cat "$tmp/buffers.compile"; exit 1; }
check_weights buffers 1
$python "$source_dir/tests/e2e/same_losses.py" "llama_dynamo18 against PyTorch" "$model_dir/train/losses.json" \
  "$tmp/buffers/metrics.jsonl" 2e-3

echo "2. --freeze: the embedding and the norms stay as loaded, alone and under --dp 2 and --tp 2"
freeze=(--freeze 'model.model.embed_tokens.weight,*norm*')
train frozen "${freeze[@]}"
check_weights frozen 7
train frozen_dp2 "${freeze[@]}" --dp 2
check_weights frozen_dp2 7
$python "$source_dir/tests/e2e/same_losses.py" "--freeze --dp 2" "$tmp/frozen/metrics.jsonl" "$tmp/frozen_dp2/metrics.jsonl" 1e-5
train frozen_tp2 "${freeze[@]}" --tp 2
check_weights frozen_tp2 7
$python "$source_dir/tests/e2e/same_losses.py" "--freeze --tp 2" "$tmp/frozen/metrics.jsonl" "$tmp/frozen_tp2/metrics.jsonl" 1e-5
if $python "$source_dir/tests/e2e/same_losses.py" "frozen against unfrozen" "$tmp/buffers/metrics.jsonl" \
     "$tmp/frozen/metrics.jsonl" 1e-6 >/dev/null 2>&1; then
  echo "FAIL: --freeze did not change the losses"; exit 1
fi

echo "3. errors"
set +e
"$cleave" compile "$model_dir/model.onnx" --batch "$batch" --train --freeze 'decoder.*' -o "$tmp/x.cplan" 2>"$tmp/err"
rc=$?
set -e
[[ $rc == 2 ]] && grep -q "freeze: 'decoder.\*' matches no parameter of the model (it has model.model.embed_tokens.weight" "$tmp/err" ||
  { echo "FAIL: a glob matching nothing gave exit $rc:"; cat "$tmp/err"; exit 1; }
echo "ok   a glob that matches nothing: exit 2, $(head -1 "$tmp/err" | cut -c1-110)..."
set +e
"$cleave" compile "$model_dir/model.onnx" --batch "$batch" --freeze '*norm*' -o "$tmp/x.cplan" 2>"$tmp/err"
rc=$?
set -e
[[ $rc == 2 ]] && grep -q -- "--freeze needs --train" "$tmp/err" || { echo "FAIL: --freeze without --train gave exit $rc"; cat "$tmp/err"; exit 1; }
echo "ok   --freeze without --train: exit 2"
echo "freeze.sh: all checks passed"
