#!/usr/bin/env bash
# Training features against PyTorch (tests/fixtures/training_features, made by
# make_training_features.py with torch 2.x): learning-rate schedules (the rate of every step equal
# to torch.optim.lr_scheduler's and transformers' schedules), gradient clipping (losses and norms as
# clip_grad_norm_'s, on one device and under dp, tp and pp), gradient accumulation (the losses of the
# whole batch in a quarter of the activation memory), bf16 mixed precision (PyTorch autocast's
# losses), evaluation scores (top-5, per-class accuracy,
# perplexity, against numpy), and the flags' errors.
# Usage: bash training_features.sh PATH_TO_cleave SOURCE_DIR
set -euo pipefail

cleave=$1
source_dir=$2
fixtures=$source_dir/tests/fixtures
features=$fixtures/training_features
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; exit 1; }

# 1. Schedules: every case's learning rate per step, from the metrics, equal to PyTorch's.
echo "learning-rate schedules:"
count=$($python -c "import json,sys; print(len(json.load(open(sys.argv[1]))['cases']))" "$features/lr_schedules.json")
"$cleave" compile "$fixtures/mlp/model.onnx" --batch 4 -o "$tmp/infer.cplan" >/dev/null
for ((i = 0; i < count; ++i)); do
  read -r schedule optimizer < <($python -c "import json,sys; c=json.load(open(sys.argv[1]))['cases'][int(sys.argv[2])]; print(c['schedule'], c['optimizer'])" "$features/lr_schedules.json" "$i")
  "$cleave" compile "$fixtures/mlp/model.onnx" --batch 4 --train --optimizer "$optimizer" --lr-schedule "$schedule" \
    -o "$tmp/schedule.cplan" >/dev/null || fail "compile with --lr-schedule $schedule failed"
  "$cleave" run "$tmp/schedule.cplan" --data synthetic --steps 40 --metrics "$tmp/schedule.jsonl" --progress never \
    >/dev/null || fail "run with --lr-schedule $schedule failed"
  $python - "$tmp/schedule.jsonl" "$features/lr_schedules.json" "$i" <<'PY' || fail "--lr-schedule $schedule: rates differ from PyTorch's"
import json, sys
actual = [json.loads(line)["lr"] for line in open(sys.argv[1])]
case = json.load(open(sys.argv[2]))["cases"][int(sys.argv[3])]
expected = case["lrs"]
assert len(actual) == len(expected) == 40, (len(actual), len(expected))
worst = max(abs(a - e) for a, e in zip(actual, expected)) / max(expected)
print(f"  {case['schedule']:<55} as {case['pytorch']}: 40 steps, max difference {worst:.1e} of the peak")
assert worst <= 1e-12, worst
PY
done

# The schedule resumes from a checkpoint: steps 11-40 after a restart at step 10 follow the same rates.
"$cleave" run "$tmp/schedule.cplan" --data synthetic --steps 10 --checkpoint-dir "$tmp/ckpt" --metrics "$tmp/resumed.jsonl" \
  --progress never >/dev/null
"$cleave" run "$tmp/schedule.cplan" --data synthetic --steps 40 --checkpoint-dir "$tmp/ckpt" --resume --metrics "$tmp/resumed.jsonl" \
  --progress never >/dev/null
$python - "$tmp/schedule.jsonl" "$tmp/resumed.jsonl" <<'PY' || fail "a resumed run's schedule differs"
import json, sys
straight = [json.loads(line) for line in open(sys.argv[1])]
resumed = [json.loads(line) for line in open(sys.argv[2])]
assert [s["step"] for s in resumed] == list(range(1, 41)), [s["step"] for s in resumed]
assert [s["lr"] for s in resumed] == [s["lr"] for s in straight]
worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(resumed, straight))
assert worst <= 1e-6, worst
print(f"  resumed at step 10: the same rates, losses within {worst:.1e}")
PY

# 2. Clipping (and schedules with AdamW) against PyTorch, on one device and partitioned.
# run_case CASE MODEL DATA LABEL [FLAGS...]: trains with the case's flags and compares losses, norms,
# rates; under "${launch[@]}" (empty, or mpirun) with "${backend[@]}".
launch=()
backend=()
run_case() {
  local case=$1 model=$2 data=$3 label=$4
  shift 4
  local flags
  mapfile -t flags < <($python -c "import json,sys; print('\n'.join(json.load(open(sys.argv[1]))['flags']))" "$features/$case.json")
  "$cleave" compile "$model" --train "${flags[@]}" "$@" -o "$tmp/$case.cplan" >/dev/null || fail "compile of $case ($label) failed"
  local steps
  steps=$($python -c "import json,sys; print(json.load(open(sys.argv[1]))['steps'])" "$features/$case.json")
  "${launch[@]}" "$cleave" run "$tmp/$case.cplan" "${backend[@]}" --data "npy:$data" --steps "$steps" \
    --metrics "$tmp/$case.jsonl" --progress never >"$tmp/run.log" 2>&1 ||
    fail "training run of $case ($label) failed: $(tail -3 "$tmp/run.log")"
  $python - "$tmp/$case.jsonl" "$features/$case.json" "$case" "$label" <<'PY' || fail "$case ($label) differs from PyTorch"
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
expected = json.load(open(sys.argv[2]))
assert len(steps) == expected["steps"], len(steps)
rel = lambda a, e: abs(a - e) / abs(e)
loss = max(rel(s["loss"], e) for s, e in zip(steps, expected["losses"]))
lr = max(rel(s["lr"], e) if e else abs(s["lr"]) for s, e in zip(steps, expected["lrs"]))
norm = max(rel(s["grad_norm"], e) for s, e in zip(steps, expected["grad_norms"]))
print(f"  {sys.argv[3]:<16} {sys.argv[4]:<22} {len(steps)} steps ({expected['clipped_steps']} clipped): "
      f"losses within {loss:.1e}, norms {norm:.1e}, rates {lr:.1e}")
assert loss <= 1e-6 and norm <= 1e-5 and lr <= 1e-12, (loss, norm, lr)
PY
}
echo "clipping and schedules against PyTorch $($python -c "import json,sys; print(json.load(open(sys.argv[1]))['torch'])" "$features/mlp_clip.json"):"
mlp=$fixtures/mlp/model.onnx
run_case mlp_clip "$mlp" "$fixtures/fashion_batches" "one device"
run_case mlp_clip "$mlp" "$fixtures/fashion_batches" "dp2" --dp 2
run_case mlp_clip "$mlp" "$fixtures/fashion_batches" "tp2" --tp 2 --allow-replicated
run_case mlp_clip "$mlp" "$fixtures/fashion_batches" "pp2 (2 microbatches)" --pp 2 --microbatches 2
run_case mlp_clip_cosine "$mlp" "$fixtures/fashion_batches" "one device"
run_case mlp_clip_cosine "$mlp" "$fixtures/fashion_batches" "dp2 x tp2" --dp 2 --tp 2 --allow-replicated
gpt=$fixtures/gpt17/model.onnx
run_case gpt_adamw_clip "$gpt" "$fixtures/gpt17/train" "one device"
run_case gpt_adamw_clip "$gpt" "$fixtures/gpt17/train" "tp2" --tp 2
run_case gpt_adamw_clip "$gpt" "$fixtures/gpt17/train" "pp2 x tp2" --pp 2 --tp 2 --microbatches 2
run_case gpt_adamw_clip "$gpt" "$fixtures/gpt17/train" "dp2 x pp2" --dp 2 --pp 2 --microbatches 2
if command -v mpirun >/dev/null; then
  launch=(mpirun --allow-run-as-root --oversubscribe -np 4)
  backend=(--backend mpi)
  run_case gpt_adamw_clip "$gpt" "$fixtures/gpt17/train" "pp2 x tp2 (mpirun)" --pp 2 --tp 2 --microbatches 2
  launch=()
  backend=()
fi

# 3. Gradient accumulation: K microbatches per step give PyTorch's whole-batch losses (the
#    fixtures' train/losses.json, 10 SGD steps at batch 16), alone and under dp, tp and pp.
echo "gradient accumulation against PyTorch's whole batch:"
accumulate() {
  local name=$1 data=$2 label=$3
  shift 3
  "$cleave" compile "$fixtures/$name/model.onnx" --batch 16 --train --optimizer "$(cat "$fixtures/$name/train/optimizer.txt")" \
    "$@" -o "$tmp/accumulate.cplan" >/dev/null || fail "compile of $name with $label failed"
  "$cleave" run "$tmp/accumulate.cplan" --data "npy:$data" --steps 10 --metrics "$tmp/accumulate.jsonl" --progress never \
    >/dev/null || fail "training run of $name with $label failed"
  $python - "$tmp/accumulate.jsonl" "$fixtures/$name/train/losses.json" "$name" "$label" <<'PY' || fail "$name with $label differs from PyTorch's whole batch"
import json, sys
actual = [json.loads(line)["loss"] for line in open(sys.argv[1])]
expected = json.load(open(sys.argv[2]))
worst = max(abs(a - e) / abs(e) for a, e in zip(actual, expected))
print(f"  {sys.argv[3]:<6} {sys.argv[4]:<34} 10 steps: losses within {worst:.1e}")
assert len(actual) == 10 and worst <= 1e-6, worst
PY
}
accumulate mlp "$fixtures/fashion_batches" "--grad-accum 4" --grad-accum 4
accumulate mlp "$fixtures/fashion_batches" "--grad-accum 4 --dp 2" --grad-accum 4 --dp 2
accumulate mlp "$fixtures/fashion_batches" "--grad-accum 4 --tp 2" --grad-accum 4 --tp 2 --allow-replicated
accumulate mlp "$fixtures/fashion_batches" "--grad-accum 4 --pp 2" --grad-accum 4 --pp 2
accumulate gpt17 "$fixtures/gpt17/train" "--grad-accum 4" --grad-accum 4
accumulate gpt17 "$fixtures/gpt17/train" "--grad-accum 2 --dp 2 --tp 2" --grad-accum 2 --dp 2 --tp 2

# The memory: the convnet at batch 256 with K = 4 needs at most 0.6x the whole batch's arena.
arena() {
  "$cleave" compile "$source_dir/examples/fashion_cnn.cir" --batch 256 --train "$@" -o "$tmp/arena.cplan" |
    sed -n 's/.*arena \([0-9.]*\) MiB.*/\1/p'
}
whole=$(arena)
quarter=$(arena --grad-accum 4)
$python - "$whole" "$quarter" <<'PY' || fail "--grad-accum 4 does not save activation memory"
import sys
whole, quarter = map(float, sys.argv[1:])
print(f"  convnet, batch 256: arena {whole:.2f} MiB whole, {quarter:.2f} MiB with --grad-accum 4 ({quarter / whole:.2f}x)")
assert quarter <= 0.6 * whole
PY
"$cleave" compile "$fixtures/mlp/model.onnx" --batch 16 --train --grad-accum 4 --microbatches 2 -o "$tmp/x.cplan" 2>"$tmp/err" &&
  fail "--grad-accum 4 with --microbatches 2 was accepted"
grep -q "disagree" "$tmp/err" || fail "--grad-accum with --microbatches: $(cat "$tmp/err")"

# 4. Mixed precision: the GPT under --precision bf16 follows PyTorch's torch.autocast(bf16) losses
#    (gpt_bf16.json, 10 SGD steps) alone and partitioned, and differs from cleave's own f32 run.
echo "mixed precision (bf16) against PyTorch autocast:"
bf16_case() {
  local label=$1
  shift
  "$cleave" compile "$gpt" --train --batch 16 --optimizer sgd:lr=0.3,momentum=0.9 "$@" -o "$tmp/bf16.cplan" >/dev/null ||
    fail "compile of the GPT with $* failed"
  "$cleave" run "$tmp/bf16.cplan" --data "npy:$fixtures/gpt17/train" --steps 10 --metrics "$tmp/$label.jsonl" \
    --progress never >/dev/null || fail "training the GPT with $* failed"
}
bf16_case f32
for layout in "" "--tp 2" "--dp 2 --pp 2 --microbatches 2" "--grad-accum 4"; do
  # shellcheck disable=SC2086
  bf16_case bf16 --precision bf16 $layout
  $python - "$tmp/bf16.jsonl" "$tmp/f32.jsonl" "$features/gpt_bf16.json" "${layout:-one device}" <<'PY' || fail "--precision bf16 $layout: losses off PyTorch autocast's"
import json, sys
bf16 = [json.loads(line)["loss"] for line in open(sys.argv[1])]
f32 = [json.loads(line)["loss"] for line in open(sys.argv[2])]
expected = json.load(open(sys.argv[3]))
worst = max(abs(a - e) / e for a, e in zip(bf16, expected["losses"]))
from_f32 = max(abs(a - b) / b for a, b in zip(bf16, f32))
print(f"  gpt17 {sys.argv[4]:<30} 10 steps: within {worst:.1e} of autocast's losses (cleave f32 differs by {from_f32:.1e})")
assert len(bf16) == 10 and worst <= 2e-2 and from_f32 > 1e-6, (worst, from_f32)
PY
done
# (Through a file: `inspect | head -1` under pipefail fails when head exits before inspect has
# written all of its output, which is longer than one pipe write since fused nodes are listed.)
"$cleave" inspect "$tmp/bf16.cplan" >"$tmp/bf16.inspect"
head -1 "$tmp/bf16.inspect" | grep -q "training (softmax_cross_entropy, sgd, bf16)" ||
  fail "inspect does not name the plan's precision"
report_arenas() {
  local f32_bytes bf16_bytes
  f32_bytes=$("$cleave" compile "$gpt" --train --batch 16 -o "$tmp/a.cplan" | sed -n 's/.*arena \([0-9.]*\) MiB.*/\1/p')
  bf16_bytes=$("$cleave" compile "$gpt" --train --batch 16 --precision bf16 -o "$tmp/b.cplan" | sed -n 's/.*arena \([0-9.]*\) MiB.*/\1/p')
  echo "  gpt17 at batch 16: arena $f32_bytes MiB in f32, $bf16_bytes MiB in bf16 (bf16 copies of weights and GEMM inputs)"
}
report_arenas

# 5. Evaluation scores beyond accuracy, on logits known in advance (the model multiplies its input by
#    weights of ones that lr=0 keeps), recomputed with numpy: top-5 and per-class accuracy of a
#    classifier (labels [B]), perplexity of a language model (labels [B, T]).
echo "evaluation scores:"
cat >"$tmp/classifier.cir" <<'CIR'
graph @fixed_logits {
  input %x : f32[16,12]
  param %w : f32[12] = ones
  %logits = mul(%x, %w)
  output %logits
}
CIR
sed -e 's/fixed_logits/fixed_sequence_logits/' -e 's/f32\[16,12\]/f32[16,5,12]/' "$tmp/classifier.cir" >"$tmp/sequences.cir"
mkdir -p "$tmp/classifier" "$tmp/sequences"
$python - "$tmp" <<'PY'
import numpy as np, sys
rng = np.random.default_rng(3)
for name, shape in (("classifier", (64, 12)), ("sequences", (64, 5, 12))):
    np.save(f"{sys.argv[1]}/{name}/x.npy", rng.standard_normal(shape).astype(np.float32))
    np.save(f"{sys.argv[1]}/{name}/labels.npy", rng.integers(0, 12, shape[:-1]).astype(np.int64))
PY
for name in classifier sequences; do
  for layout in "" "--dp 2" "--dp 2 (mpirun)"; do
    launch=()
    backend=()
    [[ $layout == *mpirun* ]] && { launch=(mpirun --allow-run-as-root --oversubscribe -np 2); backend=(--backend mpi); }
    [[ $layout == *mpirun* ]] && ! command -v mpirun >/dev/null && continue
    # shellcheck disable=SC2086
    "$cleave" compile "$tmp/$name.cir" --train --optimizer sgd:lr=0 ${layout% (mpirun)} -o "$tmp/$name.cplan" >/dev/null
    "${launch[@]}" "$cleave" run "$tmp/$name.cplan" "${backend[@]}" --data "npy:$tmp/$name" --eval-data "npy:$tmp/$name" \
      --steps 4 --metrics "$tmp/$name.jsonl" --progress never >"$tmp/$name.out" 2>&1 || fail "evaluation of $name ($layout) failed"
    $python - "$tmp/$name" "$tmp/$name.jsonl" "$tmp/$name.out" "$name ${layout:-one device}" <<'PY' || fail "$name ($layout): evaluation scores differ from numpy's"
import json, sys
import numpy as np
x = np.load(sys.argv[1] + "/x.npy").astype(np.float64)
labels = np.load(sys.argv[1] + "/labels.npy")
logits, flat = x.reshape(-1, 12), labels.reshape(-1)
picked = logits[np.arange(len(flat)), flat]
above = (logits > picked[:, None]).sum(1) + ((logits == picked[:, None]) & (np.arange(12) < flat[:, None])).sum(1)
accuracy, top5 = float((above == 0).mean()), float((above < 5).mean())
shifted = logits - logits.max(1, keepdims=True)
loss = float((np.log(np.exp(shifted).sum(1)) - shifted[np.arange(len(flat)), flat]).mean())
last = [json.loads(line) for line in open(sys.argv[2])][-1]
assert abs(last["eval_accuracy"] - accuracy) < 1e-12 and abs(last["eval_top5_accuracy"] - top5) < 1e-12, last
assert abs(last["eval_loss"] - loss) < 1e-6 * loss, (last["eval_loss"], loss)
text = open(sys.argv[3]).read()
assert f"eval top-5 accuracy: {top5:.4f}" in text, text
if labels.ndim == 1:
    expected = [float((above[flat == c] == 0).mean()) for c in range(12)]
    assert np.allclose(last["eval_class_accuracy"], expected, atol=1e-12), (last["eval_class_accuracy"], expected)
    assert "eval_perplexity" not in last
    extra = f"{len(expected)} per-class accuracies"
else:
    assert abs(last["eval_perplexity"] - np.exp(loss)) < 1e-6 * np.exp(loss), (last["eval_perplexity"], np.exp(loss))
    assert "eval_class_accuracy" not in last and f"eval perplexity: {np.exp(loss):.4f}" in text
    extra = f"perplexity {np.exp(loss):.3f}"
print(f"  {sys.argv[4]:<34} accuracy {accuracy:.4f}, top-5 {top5:.4f}, {extra}: as numpy's")
PY
  done
done

# 6. The flags' errors: usage errors (exit 2) that say what is wrong.
expect_usage() {
  local says=$1
  shift
  set +e
  "$cleave" compile "$fixtures/mlp/model.onnx" --batch 16 "$@" -o "$tmp/x.cplan" >/dev/null 2>"$tmp/err"
  local code=$?
  set -e
  [[ $code == 2 ]] || fail "compile $* exited $code, not 2: $(cat "$tmp/err")"
  grep -qF -- "$says" "$tmp/err" || fail "compile $*: expected '$says' in: $(cat "$tmp/err")"
}
expect_usage "unknown schedule 'exponential'" --train --lr-schedule exponential
expect_usage "linear needs total=T" --train --lr-schedule linear:warmup=10
expect_usage "unknown key 'gamma' for cosine" --train --lr-schedule cosine:total=10,gamma=2
expect_usage "need --train" --lr-schedule cosine:total=10
expect_usage "need --train" --clip-grad-norm 1
expect_usage "--clip-grad-norm must be a finite number > 0, got 0" --train --clip-grad-norm 0
expect_usage "--grad-accum: Value 0 not in range 1 to" --train --grad-accum 0
expect_usage "need --train" --grad-accum 2
expect_usage "need --train" --precision bf16
expect_usage "--precision: bf16x not in {f32,bf16}" --train --precision bf16x
echo "  bad --lr-schedule, --clip-grad-norm and --grad-accum: usage errors naming the problem"

echo "training_features.sh: all checks passed"
