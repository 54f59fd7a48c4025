#!/usr/bin/env bash
# End-to-end training and inference through the CLI: compile, run on Fashion-MNIST, accuracy,
# checkpoint/resume giving bitwise the weights of a straight run, and .npy inference.
# Usage: bash train.sh PATH_TO_cleave SOURCE_DIR
set -euo pipefail

cleave=$1
source_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; exit 1; }

# 1. The MLP reaches at least 85% test accuracy after one epoch (batch 64, AdamW defaults).
"$cleave" compile "$source_dir/examples/mlp.cir" --batch 64 --train --optimizer adamw:lr=1e-3 -o "$tmp/mlp.cplan"
"$cleave" run "$tmp/mlp.cplan" --data fashion-mnist --epochs 1 --eval-data fashion-mnist --threads 2 \
  --progress never --metrics "$tmp/mlp.jsonl" >"$tmp/mlp.out"
cat "$tmp/mlp.out"
accuracy=$(sed -nE 's/^eval accuracy: ([0-9.]+).*/\1/p' "$tmp/mlp.out")
$python -c "import sys; sys.exit(0 if $accuracy >= 0.85 else 1)" || fail "mlp accuracy $accuracy < 0.85"
[[ $(wc -l <"$tmp/mlp.jsonl") -eq 937 ]] || fail "expected one metrics line per step (937)"
grep -q '"samples_per_s"' "$tmp/mlp.jsonl" || fail "metrics lack samples_per_s"

# 1b. Over four data-parallel devices (local backend) it reaches the same accuracy.
"$cleave" compile "$source_dir/examples/mlp.cir" --batch 64 --train --optimizer adamw:lr=1e-3 --dp 4 -o "$tmp/mlp-dp4.cplan"
"$cleave" run "$tmp/mlp-dp4.cplan" --data fashion-mnist --epochs 1 --eval-data fashion-mnist --threads 2 \
  --progress never >"$tmp/mlp-dp4.out"
cat "$tmp/mlp-dp4.out"
accuracy=$(sed -nE 's/^eval accuracy: ([0-9.]+).*/\1/p' "$tmp/mlp-dp4.out")
$python -c "import sys; sys.exit(0 if $accuracy >= 0.85 else 1)" || fail "mlp --dp 4 accuracy $accuracy < 0.85"

# 1c. --trace: a Chrome trace of every rank's instructions in steps 2-4, both streams.
"$cleave" compile "$source_dir/examples/mlp.cir" --batch 32 --train --dp 2 --tp 2 -o "$tmp/trace.cplan" >/dev/null
"$cleave" run "$tmp/trace.cplan" --data synthetic --steps 5 --trace "$tmp/trace.json" --progress never >/dev/null
$python - "$tmp/trace.json" <<'PY' || fail "the trace is wrong"
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
assert {e["pid"] for e in events} == {0, 1, 2, 3}, "one process per rank"
assert {e["tid"] for e in events} == {0, 1}, "compute and communication streams"
assert {e["args"]["step"] for e in events} == {2, 3, 4}, "steps 2-4"
assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events)
assert any(e["name"] == "all_reduce" for e in events) and any(e["name"] == "matmul" for e in events)
PY

# 2. N steps, save, resume for N more == 2N straight, bitwise (the checkpoint files are identical).
"$cleave" compile "$source_dir/examples/mlp.cir" --batch 32 --train --optimizer sgd:lr=0.05,momentum=0.9 \
  -o "$tmp/resume.cplan" >/dev/null
"$cleave" run "$tmp/resume.cplan" --data fashion-mnist --steps 40 --checkpoint-dir "$tmp/straight" \
  --progress never >/dev/null
"$cleave" run "$tmp/resume.cplan" --data fashion-mnist --steps 20 --checkpoint-dir "$tmp/resumed" \
  --progress never >/dev/null
"$cleave" run "$tmp/resume.cplan" --data fashion-mnist --steps 40 --checkpoint-dir "$tmp/resumed" --resume \
  --progress never >/dev/null
cmp "$tmp/straight/checkpoint-40/rank-0.safetensors" "$tmp/resumed/checkpoint-40/rank-0.safetensors" ||
  fail "resumed weights differ from the straight run"

# 3. Inference: .npy in, .npy out, matching the eval program's logits for the same weights.
"$cleave" compile "$source_dir/examples/mlp.cir" --batch 4 -o "$tmp/infer.cplan" >/dev/null
mkdir -p "$tmp/in"
$python -c "import numpy as np; np.save('$tmp/in/x.npy', np.random.default_rng(0).random((4, 784), dtype=np.float32))"
"$cleave" run "$tmp/infer.cplan" --inputs "$tmp/in" --outputs "$tmp/out" >/dev/null
$python - "$tmp/out/logits.npy" <<'PY'
import sys, numpy as np
logits = np.load(sys.argv[1])
assert logits.shape == (4, 10) and logits.dtype == np.float32, (logits.shape, logits.dtype)
assert np.isfinite(logits).all()
PY

# 4. Bad input: a mis-shaped .npy names the file and exits 1.
$python -c "import numpy as np; np.save('$tmp/in/x.npy', np.zeros((3, 784), dtype=np.float32))"
code=0
"$cleave" run "$tmp/infer.cplan" --inputs "$tmp/in" --outputs "$tmp/out" 2>"$tmp/err" >/dev/null || code=$?
[[ $code -eq 1 ]] || fail "mis-shaped input exited $code, expected 1"
grep -q "x.npy" "$tmp/err" || fail "the error does not name x.npy: $(cat "$tmp/err")"
echo "train.sh: all checks passed"
