#!/usr/bin/env bash
# Fused kernels end to end: the GPT (with layer norms, and with Llama's RMSNorm as PyTorch exports
# it) and the convnet train fused (`cleave compile --fusion on`, the default) with the unfused
# plans' losses within 1e-5, alone and partitioned (dp, tp, pp and a mix against one unfused
# device); a PyTorch Llama's RMSNorms, and RMSNorm's other forms, run as rms_norm ops, and the
# GELUs of PyTorch's BERT and GPT-2 exports as gelu ops; weight
# gradients fold into their SGD updates (alone and tp); gradient clipping folds into SGD's and
# AdamW's updates (alone, dp and ZeRO); inspect lists the fused nodes
# and the bytes they save; bad --fusion values and bad fused bodies are errors naming what is wrong.
# Usage: bash fusion.sh PATH_TO_cleave SOURCE_DIR
set -euo pipefail

cleave=$1
source_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; exit 1; }

"$cleave" gen gpt --layers 2 --hidden 64 --heads 4 --seq 16 --vocab 128 --batch 8 -o "$tmp/gpt.cir" >/dev/null
"$cleave" gen gpt --layers 2 --hidden 64 --heads 4 --seq 16 --vocab 128 --batch 8 --rms-norm -o "$tmp/gpt_rms.cir" >/dev/null
cp "$source_dir/examples/fashion_cnn.cir" "$tmp/cnn.cir"

# train MODEL LABEL FLAGS...: 6 steps on synthetic data, losses in $tmp/MODEL-LABEL.jsonl ($optimizer:
# SGD with momentum unless set).
optimizer=sgd:lr=0.05,momentum=0.9
train() {
  local model=$1 label=$2
  shift 2
  "$cleave" compile "$tmp/$model.cir" --batch 8 --train --optimizer "$optimizer" "$@" \
    -o "$tmp/$model-$label.cplan" >/dev/null || fail "compile $model $*"
  "$cleave" run "$tmp/$model-$label.cplan" --data synthetic --steps 6 --progress never \
    --metrics "$tmp/$model-$label.jsonl" >/dev/null || fail "run $model $*"
}

# same_losses MODEL BASELINE RUN...: each run's 6 losses within 1e-5 of the baseline's.
same_losses() {
  local model=$1 baseline=$2
  shift 2
  for run in "$@"; do
    $python - "$tmp/$model-$baseline.jsonl" "$run" <<'PY' || fail "$(basename "$run") differs from the unfused plan"
import json, os, sys
unfused = [json.loads(line)["loss"] for line in open(sys.argv[1])]
fused = [json.loads(line)["loss"] for line in open(sys.argv[2])]
worst = max(abs(a - b) / abs(b) for a, b in zip(fused, unfused))
print(f"  {os.path.basename(sys.argv[2]):28} 6 steps: losses within {worst:.1e} of the unfused single device")
assert len(fused) == len(unfused) == 6 and worst <= 1e-5, worst
PY
  done
}

# 1. Fused plans follow the unfused single device's losses within 1e-5, alone and partitioned.
for model in gpt gpt_rms cnn; do
  train "$model" unfused --fusion off
  train "$model" fused
  for flags in "--dp 2" "--tp 2" "--pp 2 --microbatches 2" "--dp 2 --tp 2"; do
    [[ $model == cnn && $flags == *tp* ]] && continue  # the convnet's tensor split is covered by equivalence.sh
    train "$model" "p${flags// /}" $flags
  done
  same_losses "$model" unfused "$tmp/$model"-fused.jsonl "$tmp/$model"-p*.jsonl
done

# Weight gradients: each of the GPT's 13 weight matrices (q, k, v, proj, fc1, fc2 per layer, the LM
# head) takes its gradient's product as its SGD update (sgd_matmul_update: the gradient is never
# written), alone and over tp, with momentum (above) and plain SGD with a cosine schedule; the unfused
# plans' losses still hold. Over dp the gradients are all-reduced first, so nothing folds there.
optimizer=sgd:lr=0.05
train gpt plain-unfused --fusion off --lr-schedule cosine:warmup=2,total=6
for flags in "" "--tp 2"; do
  train gpt "plain${flags// /}" --lr-schedule cosine:warmup=2,total=6 $flags
  same_losses gpt plain-unfused "$tmp/gpt-plain${flags// /}.jsonl"
done
optimizer=sgd:lr=0.05,momentum=0.9
for plan in gpt-fused gpt-p--tp2 gpt-plain gpt-plain--tp2 gpt-p--dp2; do
  "$cleave" run "$tmp/$plan.cplan" --data synthetic --steps 1 --progress never --trace "$tmp/updates.json" >/dev/null ||
    fail "$plan does not run with --trace"
  expected=13
  [[ $plan == *dp2 ]] && expected=0
  $python - "$tmp/updates.json" "$expected" <<'PY' || fail "$plan: the weight gradients are not folded into their updates"
import json, sys
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
ops = [e["name"] for e in events if e.get("ph") == "X" and "instruction" in e.get("args", {}) and e["pid"] == 0]
assert ops.count("sgd_matmul_update") == int(sys.argv[2]), (ops.count("sgd_matmul_update"), ops.count("sgd_update"))
PY
done

# Clipped gradients: each gradient's sum of squares is one fused node (no squares written) and each
# update reads its gradient and the clipping coefficient (no scaled copy), with SGD and AdamW, alone,
# over dp and with ZeRO's sharded state (whose clipping differs).
for optimizer in sgd:lr=0.05,momentum=0.9 adamw:lr=0.001; do
  kind=${optimizer%%:*}
  train gpt "clip-$kind-unfused" --clip-grad-norm 0.5 --fusion off
  train gpt "clip-$kind-fused" --clip-grad-norm 0.5
  train gpt "clip-$kind-dp2" --clip-grad-norm 0.5 --dp 2
  train gpt "clip-$kind-zero-unfused" --clip-grad-norm 0.5 --dp 2 --zero 1 --fusion off
  train gpt "clip-$kind-zero" --clip-grad-norm 0.5 --dp 2 --zero 1
  same_losses gpt "clip-$kind-unfused" "$tmp/gpt-clip-$kind-fused.jsonl" "$tmp/gpt-clip-$kind-dp2.jsonl"
  same_losses gpt "clip-$kind-zero-unfused" "$tmp/gpt-clip-$kind-zero.jsonl"
  "$cleave" run "$tmp/gpt-clip-$kind-fused.cplan" --data synthetic --steps 1 --progress never --trace "$tmp/clip.json" >/dev/null ||
    fail "the clipped $kind plan does not run with --trace"
  $python - "$tmp/clip.json" <<'PY' || fail "the clipped $kind plan still writes squares or scaled gradients"
import json, sys
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
names = [e["args"]["instruction"] for e in events if e.get("ph") == "X" and "instruction" in e.get("args", {})]
updates = sum(n.endswith("_update)") for n in names)
# The clipping's nodes have no source line: a fused sum of squares per gradient (and one for the
# norm's scalars), no mul or reduce_sum.
def count(op): return sum(n.endswith(f"({op})") for n in names)
assert updates > 0 and count("fused") == updates + 1 and count("mul") == count("reduce_sum") == 0, \
    f"{updates} updates, {count('fused')} fused nodes, {count('mul')} muls, {count('reduce_sum')} reduce_sums"
PY
done
optimizer=sgd:lr=0.05,momentum=0.9

# RMSNorm's other forms: 1 / sqrt written as pow(mean + eps, -0.5) (ln1), x / sqrt(mean + eps)
# (ln2), and a final norm without a weight (torch.nn.RMSNorm(elementwise_affine=False)). All become
# rms_norm ops, alone and over tp, with the unfused plan's losses; no piece of a norm is left.
$python - "$tmp/gpt_rms.cir" "$tmp/gpt_forms.cir" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
text = re.sub(r"(%h\d+\.ln1)\.one = constant\(\) \{value = dense<f32\[\]: \[1\]>\}", r"\1.one = constant() {value = dense<f32[]: [-0.5]>}", text)
text = re.sub(r"(%h\d+\.ln1)\.rsqrt = div\(\1\.one, \1\.sqrt\)", r"\1.rsqrt = pow(\1.add, \1.one)", text)
text = re.sub(r"  (%h\d+\.ln1)\.sqrt = sqrt\(\1\.add\) : .*\n", "", text)
text = re.sub(r"(%h\d+\.ln2)\.normalized = mul\((%[\w.]+), \1\.rsqrt\)", r"\1.normalized = div(\2, \1.sqrt)", text)
text = re.sub(r"  (%h\d+\.ln2)\.one = .*\n  \1\.rsqrt = .*\n", "", text)
text = re.sub(r"  param %ln_f\.weight : .*\n", "", text)
text = re.sub(r"  %ln_f\.out = mul\(%ln_f\.weight, %ln_f\.normalized\) : .*\n", "", text)
text = text.replace("%ln_f.out", "%ln_f.normalized")
assert text.count(".rsqrt = pow(") == text.count(".normalized = div(") == 2 and "ln_f.weight" not in text, "the forms were not written"
open(sys.argv[2], "w").write(text)
PY
train gpt_forms unfused --fusion off
for flags in "" "--tp 2"; do
  train gpt_forms "fused${flags// /}" $flags
  same_losses gpt_forms unfused "$tmp/gpt_forms-fused${flags// /}.jsonl"
  "$cleave" run "$tmp/gpt_forms-fused${flags// /}.cplan" --data synthetic --steps 1 --progress never \
    --trace "$tmp/forms.json" >/dev/null || fail "gpt_forms $flags does not run with --trace"
  "$cleave" inspect "$tmp/gpt_forms-fused${flags// /}.cplan" --json >"$tmp/forms.inspect.json"
  $python - "$tmp/forms.json" "$tmp/forms.inspect.json" <<'PY' || fail "gpt_forms $flags: an RMSNorm form is not rms_norm"
import json, sys
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
runs = [e for e in events if e.get("ph") == "X" and "instruction" in e.get("args", {}) and e["pid"] == 0]
ops = [e["name"] for e in runs]
bodies = [n["body"] for n in json.load(open(sys.argv[2]))["ranks"][0]["fused_nodes"]]
norms = ops.count("rms_norm") + sum("= rms_norm(" in body for body in bodies)
gradients = ops.count("rms_norm_grad") + sum("= rms_norm_grad(" in body for body in bodies)
# The model's own ops (the tensor split's vocabulary-parallel loss adds divs of its own).
model_ops = [e["name"] for e in runs if " from gpt_forms.cir:" in e["args"]["instruction"]]
left = {op: model_ops.count(op) for op in ("reduce_mean", "pow", "sqrt", "div")}
assert norms == gradients == 5 and not any(left.values()), (norms, gradients, left)
PY
done

# A Llama exported by PyTorch: its decomposed RMSNorms become rms_norm ops (5 forward, 4 of them
# fused with the residual add before them; 5 rms_norm_grad backward, in fused nodes; no reduce_mean
# left), alone and over tp, with the unfused plan's losses.
# train_export EXPORT FLAGS...: tests/fixtures/modern/EXPORT trained 6 steps unfused and fused with
# FLAGS, the fused losses those of the unfused plan; $tmp/LABEL-on.json is the fused run's trace and
# $tmp/LABEL-on.inspect.json its plan's inspect --json (LABEL: EXPORT and FLAGS without spaces).
train_export() {
  local export=$1 fusion
  shift
  local flags="$*"
  local label=$export${flags// /} model=$source_dir/tests/fixtures/modern/$export/model.onnx
  for fusion in off on; do
    "$cleave" compile "$model" --train --loss softmax_cross_entropy --optimizer sgd:lr=0.05 "$@" --fusion $fusion \
      -o "$tmp/$label-$fusion.cplan" >/dev/null || fail "compile $export $* --fusion $fusion"
    "$cleave" run "$tmp/$label-$fusion.cplan" --data synthetic --steps 6 --progress never \
      --metrics "$tmp/$label-$fusion.jsonl" --trace "$tmp/$label-$fusion.json" >/dev/null ||
      fail "run $export $* --fusion $fusion"
  done
  same_losses "$label" off "$tmp/$label-on.jsonl"
  "$cleave" inspect "$tmp/$label-on.cplan" --json >"$tmp/$label-on.inspect.json"
}

for flags in "" "--tp 2"; do
  # shellcheck disable=SC2086
  train_export llama_dynamo18 $flags
  label=llama_dynamo18${flags// /}
  $python - "$tmp/$label-on.json" "$tmp/$label-on.inspect.json" <<'PY' || fail "llama $flags: the RMSNorms are not rms_norm"
import json, sys
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
steps = [e for e in events if e.get("ph") == "X" and "step" in e.get("args", {})]
first = min(e["args"]["step"] for e in steps)
ops = [e["name"] for e in steps if e["args"]["step"] == first and e["pid"] == 0]  # rank 0's
# The residual adds before 4 of the 5 norms fuse with them (`t0 = add(x0, x1); t1 = rms_norm(t0, x2)`);
# every rms_norm_grad is a fused node's last step (after the sum of its gradients where there is one).
bodies = [n["body"] for n in json.load(open(sys.argv[2]))["ranks"][0]["fused_nodes"]]
fused = sum("= rms_norm(" in body for body in bodies), sum("= rms_norm_grad(" in body for body in bodies)
counts = {op: ops.count(op) for op in ("rms_norm", "rms_norm_grad", "reduce_mean", "pow", "sqrt")}
assert fused == (4, 5) and counts == {"rms_norm": 1, "rms_norm_grad": 0, "reduce_mean": 0, "pow": 0, "sqrt": 0}, (fused, counts)
PY
done

# PyTorch exports whose GELU is written out op by op: BERT from the dynamo exporter at opset 18
# (erf, its scalars as val_<n> initializers), GPT-2's gelu_new from the TorchScript exporter
# (tanh, x·x·x) and BLOOM's from the dynamo exporter (FastGELU's (x·β)·(1 + κ·x·x) inside the
# tanh). Each GELU becomes a gelu (no exporter scalar is a trained weight), so the forward
# runs one fused node returning the GELU and its slope, and the backward no erf, tanh or their
# gradients; fused follows unfused, alone and over tp.
for export in bert_dynamo18 gpt2_legacy17 bloom_dynamo18; do
  for flags in "" "--tp 2"; do
    # shellcheck disable=SC2086
    train_export "$export" $flags
    label=$export${flags// /}
    $python - "$tmp/$label-on.json" "$tmp/$label-on.inspect.json" <<'PY' || fail "$export $flags: its GELUs are not gelu ops"
import json, sys
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
ops = [e["name"].split(" ")[0] for e in events if e.get("ph") == "X" and e.get("pid") == 0]
rank = json.load(open(sys.argv[2]))["ranks"][0]
gelus = [n["body"] for n in rank["fused_nodes"] if "= erf(" in n["body"] or "= tanh(" in n["body"]]
scalars = [w["name"] for w in rank["weights"] if w["name"].startswith("val_") and w["shape"] in ([], [1])]
left = {op: ops.count(op) for op in ("erf", "tanh", "tanh_grad", "gelu", "gelu_grad", "pow")}
assert len(gelus) == 2 and all(len(b.split("return ")[1].split(", ")) == 2 for b in gelus), gelus
assert not any(left.values()) and not scalars, (left, scalars)
PY
  done
done

# 2. inspect lists the fused nodes (text and JSON) and what they save; unfused plans have none.
"$cleave" inspect "$tmp/gpt-fused.cplan" >"$tmp/inspect.txt"
grep -q "^fused nodes of train on rank 0: " "$tmp/inspect.txt" || fail "inspect does not list the fused nodes"
grep -q "t0 = add(x0, x1); t1 = mul(t0, 0.7071067690849304); t2 = erf(t1); .* t8 = exp(t7); .*; return t11, t12" "$tmp/inspect.txt" ||
  fail "inspect does not show the bias-gelu body returning GELU's slope for the gradient"
grep -q "t0 = mul(x0, x1); t1 = reduce_sum(t0)\[axes=\[0 1\], keepdims=0\]; return t0, t1" "$tmp/inspect.txt" ||
  fail "inspect shows no gelu gradient (a multiply by the slope) fused with its bias gradient (a column sum)"
grep -q "t0 = add(x0, x1); t1 = add(t0, x2); t2, t3, t4 = layer_norm_grad(t1, x3, x4)" "$tmp/inspect.txt" ||
  fail "inspect shows no layer_norm_grad fused with the sum of its gradients"
"$cleave" inspect "$tmp/gpt-fused.cplan" --json >"$tmp/fused.json"
"$cleave" inspect "$tmp/gpt-unfused.cplan" --json >"$tmp/unfused.json"
$python - "$tmp/fused.json" "$tmp/unfused.json" <<'PY' || fail "inspect --json's fused nodes are wrong"
import json, sys
fused, unfused = (json.load(open(p))["ranks"][0] for p in sys.argv[1:3])
nodes = fused["fused_nodes"]
assert nodes and not unfused["fused_nodes"], (len(nodes), len(unfused["fused_nodes"]))
assert all(n["bytes"] > 0 and n["bytes_saved"] >= 0 for n in nodes)
assert all(n["body"].startswith(("t0 = ", "t0, ")) for n in nodes if n["op"] == "fused")
# The 13 weight gradients summed into their SGD updates, each saving the gradient's write and read.
updates = [n for n in nodes if n["op"] == "sgd_matmul_update"]
assert len(updates) == 13 and all(n["body"] == "" and n["bytes_saved"] > 0 for n in updates), len(updates)
saved = sum(n["bytes_saved"] for n in nodes)
assert saved > 0 and fused["kernel_bytes"] < unfused["kernel_bytes"], (saved, fused["kernel_bytes"], unfused["kernel_bytes"])
# What inspect says the fused nodes save is no more than the two plans' bytes differ by (it counted
# the GELU slope's 12 formula steps as 12 kernels, 2.4x the difference).
assert saved <= unfused["kernel_bytes"] - fused["kernel_bytes"], (saved, unfused["kernel_bytes"] - fused["kernel_bytes"])
print(f"  gpt: {len(nodes)} fused nodes save {saved / 1e6:.2f} MB of {unfused['kernel_bytes'] / 1e6:.2f} MB per step")
PY

# The head transposes fold into attention's products (fused_matmul): the fused plan runs none, and
# each of the 2 layers runs 9: q, k and v with their bias adds folded in, and attention's 2 forward
# and 4 backward products.
"$cleave" run "$tmp/gpt-fused.cplan" --data synthetic --steps 1 --progress never --trace "$tmp/trace.json" >/dev/null ||
  fail "the fused plan does not run with --trace"
$python - "$tmp/trace.json" <<'PY' || fail "the fused GPT still transposes attention's heads"
import json, sys
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
ops = [e["name"].split(" ")[0] for e in events if e.get("ph") == "X"]
assert "transpose" not in ops and ops.count("fused_matmul") == 2 * 9, (ops.count("transpose"), ops.count("fused_matmul"))
PY

# 3. Errors: a bad --fusion is a usage error (exit 2); a bad body names the file and line (exit 1).
set +e
"$cleave" compile "$tmp/gpt.cir" --fusion maybe -o "$tmp/x.cplan" 2>"$tmp/err.txt"
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "--fusion maybe: exit $rc, expected 2"
grep -q "fusion" "$tmp/err.txt" || fail "--fusion maybe: the error does not name the flag: $(cat "$tmp/err.txt")"
cat >"$tmp/bad.cir" <<'CIR'
graph @bad {
  input %x : f32[2,3]
  %y = fused(%x) {body = "t0 = matmul(x0, x0); return t0"}
  output %y
}
CIR
set +e
"$cleave" compile "$tmp/bad.cir" -o "$tmp/x.cplan" 2>"$tmp/err.txt"
rc=$?
set -e
[[ $rc -eq 1 ]] || fail "a bad fused body: exit $rc, expected 1"
grep -q "bad.cir:3:3: .*matmul is not fusable" "$tmp/err.txt" || fail "a bad fused body: $(cat "$tmp/err.txt")"
echo "fusion: ok"
