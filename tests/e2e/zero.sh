#!/usr/bin/env bash
# ZeRO's stages over data-parallel replicas (`cleave compile --dp D --zero 1|2|3`): 1 shards the
# optimizer state, 2 also sums the gradients over microbatches in blocks, 3 also holds the
# parameters in blocks gathered per step. The GPT, the convnet and GPT-2 exported from PyTorch
# train with one device's losses (SGD with momentum and AdamW; with tp, pp, microbatches and
# recomputation too; under mpirun), each rank holds 1/D of what its stage shards, each stage's
# saving shows in the arena, evaluation scores as one device's, checkpoints of a sharded run resume
# on one device and the other way round, clipping keeps the gradients reduce-scattered, and --zero
# without --dp 2 is a usage error.
# Usage: bash zero.sh PATH_TO_cleave SOURCE_DIR
set -euo pipefail

cleave=$1
source_dir=$2
fixtures=$source_dir/tests/fixtures
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
python=/usr/bin/python3
steps=5  # per run of train()
# shellcheck source=helpers/training.sh
source "$source_dir/tests/e2e/helpers/training.sh"

"$cleave" gen gpt --layers 2 --hidden 64 --heads 4 --seq 16 --vocab 128 --batch 8 -o gpt.cir >/dev/null
cp "$source_dir/examples/fashion_cnn.cir" cnn.cir

# state_bytes NAME: the optimizer state bytes of each rank, as inspect --json counts them.
state_bytes() {
  "$cleave" inspect "$1.cplan" --json | $python -c 'import json, sys; print(*[r["optimizer_state_bytes"] for r in json.load(sys.stdin)["ranks"]])'
}

# 1. One device's losses, with 1/D of the optimizer state per rank.
for optimizer in sgd:lr=0.05,momentum=0.9 adamw:lr=1e-3; do
  kind=${optimizer%%:*}
  for model in gpt cnn; do
    batch=8
    compile "$model-$kind-one" "$model.cir" --batch $batch --optimizer "$optimizer"
    train "$model-$kind-one" synthetic
    for flags in "--dp 2" "--dp 4" "--dp 2 --tp 2" "--dp 2 --pp 2 --microbatches 2" "--dp 2 --recompute selective" \
      "--dp 2 --clip-grad-norm 0.5"; do
      [[ $model == cnn && $flags == *tp* ]] && continue  # the convnet's tensor split is covered by equivalence.sh
      name="$model-$kind-zero${flags// /}"
      # shellcheck disable=SC2086
      compile "$name" "$model.cir" --batch $batch --optimizer "$optimizer" $flags --zero 1
      train "$name" synthetic
      if [[ $flags == *clip* ]]; then
        compile "$model-$kind-one-clip" "$model.cir" --batch $batch --optimizer "$optimizer" --clip-grad-norm 0.5
        train "$model-$kind-one-clip" synthetic
        same_losses "$model-$kind-one-clip" "$name" 1e-5
      else
        same_losses "$model-$kind-one" "$name" 1e-5
      fi
    done
    # shellcheck disable=SC2207
    whole=($(state_bytes "$model-$kind-one")) sharded=($(state_bytes "$model-$kind-zero--dp4"))
    for bytes in "${sharded[@]}"; do
      # A quarter (the convnet's 10-class weight splits along its columns), the step counter and its
      # 10-class bias (no dim divides by 4) on every rank.
      (( bytes * 4 <= whole[0] + 4096 )) || fail "$model $kind: a --dp 4 --zero 1 rank holds $bytes bytes of state, not about ${whole[0]} / 4"
    done
    echo "  $model $kind: optimizer state ${whole[0]} bytes on one device, ${sharded[*]} per rank with --dp 4 --zero 1"
  done
done

# Stages 2 and 3: one device's losses under every split (AdamW; SGD for the plain dp case).
for model in gpt cnn; do
  for zero in 2 3; do
    for flags in "--dp 2" "--dp 4 --microbatches 2" "--dp 2 --tp 2" "--dp 2 --pp 2 --microbatches 4" \
      "--dp 2 --tp 2 --pp 2 --microbatches 2 --schedule gpipe" "--dp 2 --recompute selective --microbatches 2"; do
      [[ $model == cnn && $flags == *tp* ]] && continue
      name="$model-adamw-zero$zero${flags// /}"
      # shellcheck disable=SC2086
      compile "$name" "$model.cir" --batch 8 --optimizer adamw:lr=1e-3 $flags --zero $zero
      train "$name" synthetic
      same_losses "$model-adamw-one" "$name" 1e-5
    done
    compile "$model-sgd-zero$zero--dp2" "$model.cir" --batch 8 --optimizer sgd:lr=0.05,momentum=0.9 --dp 2 --zero $zero
    train "$model-sgd-zero$zero--dp2" synthetic
    same_losses "$model-sgd-one" "$model-sgd-zero$zero--dp2" 1e-5
    # Clipping by the norm of the sharded gradients (the reference clips on one device).
    name="$model-adamw-zero$zero-clip"
    compile "$name" "$model.cir" --batch 8 --optimizer adamw:lr=1e-3 --dp 2 --pp 2 --microbatches 4 --clip-grad-norm 0.5 \
      --zero $zero
    train "$name" synthetic
    same_losses "$model-adamw-one-clip" "$name" 1e-5
  done
done

# Under --precision bf16, stage 3 casts each block and gathers it in bf16: bitwise the losses of the
# same split without ZeRO. Both unfused: stage 3 gathers a layer norm's scale and bias just before
# it, which keeps the norm out of the residual add's fused chain, and a fused layer norm agrees with
# the unfused kernel to rounding (1e-7), not bit for bit.
for flags in "--dp 2" "--dp 2 --tp 2"; do
  name="gpt-bf16${flags// /}"
  # shellcheck disable=SC2086
  compile "$name" gpt.cir --batch 8 --precision bf16 --fusion off $flags
  train "$name" synthetic
  # shellcheck disable=SC2086
  compile "$name-zero3" gpt.cir --batch 8 --precision bf16 --fusion off $flags --zero 3
  train "$name-zero3" synthetic
  same_losses "$name" "$name-zero3" 0
done

# What each stage keeps per rank (inspect --json): the GPT at --dp 4 with 4 microbatches. Stage 1
# quarters the optimizer state, 2 shrinks the arena further (gradients summed in blocks), 3 quarters
# the parameters too; stage 2 reduce-scatters each microbatch's gradients (4 times stage 1's bytes),
# stage 3 gathers the parameters in every forward and backward step.
for zero in 0 1 2 3; do
  flags=(--dp 4 --microbatches 4)
  [[ $zero != 0 ]] && flags+=(--zero "$zero")
  compile "gpt-memory-zero$zero" gpt.cir --batch 16 --optimizer adamw:lr=1e-3 "${flags[@]}"
  "$cleave" inspect "gpt-memory-zero$zero.cplan" --json >"memory-zero$zero.json"
done
$python - memory-zero{0,1,2,3}.json <<'PY' || fail "the ZeRO stages do not save what they should"
import json, sys
ranks = [json.load(open(p))["ranks"][0] for p in sys.argv[1:]]
arena = [r["peak_memory_bytes"] for r in ranks]
params = [r["param_bytes"] for r in ranks]
state = [r["optimizer_state_bytes"] for r in ranks]
moved = [r["comm_bytes_by_kind"] for r in ranks]
print(f"  gpt --dp 4 --microbatches 4, zero 0-3: arena {arena}, parameters {params}, optimizer state {state}")
print(f"    reduce-scattered {[m['reduce_scatter'] for m in moved]}, all-gathered {[m['all_gather'] for m in moved]}")
assert arena[0] > arena[1] > arena[2] > arena[3], arena
assert params[0] == params[1] == params[2] and params[3] * 4 <= params[0] + 4096, params
assert state[1] * 4 <= state[0] + 4096 and state[1] == state[2] == state[3], state
assert moved[2]["reduce_scatter"] == 4 * moved[1]["reduce_scatter"] == moved[3]["reduce_scatter"], moved
assert moved[3]["all_gather"] > 4 * moved[1]["all_gather"], moved
PY

# inspect --weights says which axis splits a weight: dp under stage 3, tp and dp under both.
"$cleave" inspect gpt-adamw-zero3--dp2--tp2.cplan --weights >weights.txt
grep -q "wte.weight \[128,64\]: split dim 0 over tp and dp, holds \[32,64\]" weights.txt ||
  fail "inspect --weights does not show the stage-3 blocks: $(grep wte weights.txt)"
grep -q "wpe.weight \[16,64\]: split dim 0 over dp, holds \[8,64\]" weights.txt ||
  fail "inspect --weights does not show the stage-3 blocks: $(grep wpe weights.txt)"

# Gradients the update alone reads are reduce-scattered, not all-reduced; with clipping too (the
# norm sums each replica's blocks, one scalar all-reduced).
"$cleave" inspect gpt-adamw-zero--dp2.cplan --json >zero.json
"$cleave" inspect gpt-adamw-zero--dp2--clip-grad-norm0.5.cplan --json >clip.json
$python - zero.json clip.json <<'PY' || fail "the sharded plans move the wrong collectives"
import json, sys
zero, clip = (json.load(open(p))["ranks"][0]["comm_bytes_by_kind"] for p in sys.argv[1:3])
print(f"  gpt adamw --dp 2 --zero 1: bytes moved per step by kind {zero}; with clipping {clip}")
assert zero["reduce_scatter"] > 0 and zero["all_gather"] > 0 and zero["all_reduce"] < zero["reduce_scatter"], zero
assert clip["reduce_scatter"] == zero["reduce_scatter"] and clip["all_reduce"] <= 16 and clip["all_gather"] > 0, clip
PY

# 2. GPT-2 (legacy exporter) and LLaMA (torch.export) exported from PyTorch, their weights imported
#    with their data, against PyTorch's losses.
for case in "gpt2_legacy17:--dp 2 --zero 1" "gpt2_legacy17:--dp 2 --zero 3" "gpt2_legacy17:--dp 2 --tp 2 --zero 3" \
  "gpt2_legacy17:--dp 2 --pp 2 --microbatches 2 --zero 2" "llama_dynamo21:--dp 2 --zero 3 --clip-grad-norm 100"; do
  fixture=${case%%:*} flags=${case#*:}
  dir=$fixtures/modern/$fixture
  name="$fixture${flags// /}"
  # shellcheck disable=SC2086
  compile "$name" "$dir/model.onnx" --batch "$(cat "$dir/train/batch.txt")" --optimizer "$(cat "$dir/train/optimizer.txt")" $flags
  train "$name" "npy:$dir/train"
  $python - "$name.jsonl" "$dir/train/losses.json" "$fixture $flags" <<'PY' || fail "$fixture under $flags differs from PyTorch"
import json, sys
actual = [json.loads(line)["loss"] for line in open(sys.argv[1])]
expected = json.load(open(sys.argv[2]))[:5]
worst = max(abs(a - e) / abs(e) for a, e in zip(actual, expected))
print(f"  {sys.argv[3]:<50} losses within {worst:.1e} of PyTorch's")
assert len(actual) == 5 and worst <= 2e-3, worst
PY
done

# 3. Under mpirun, one process per rank.
if command -v mpirun >/dev/null; then
  mpirun --allow-run-as-root --oversubscribe -np 2 "$cleave" run gpt-adamw-zero--dp2.cplan --backend mpi --threads 1 \
    --data synthetic --steps 5 --progress never --metrics gpt-adamw-zero-mpi.jsonl >mpi.log 2>&1 ||
    { cat mpi.log >&2; fail "mpirun of the sharded plan"; }
  same_losses gpt-adamw-one gpt-adamw-zero-mpi 1e-5
  mpirun --allow-run-as-root --oversubscribe -np 4 "$cleave" run "gpt-adamw-zero3--dp2--pp2--microbatches4.cplan" --backend mpi \
    --threads 1 --data synthetic --steps 5 --progress never --metrics gpt-adamw-zero3-mpi.jsonl >mpi.log 2>&1 ||
    { cat mpi.log >&2; fail "mpirun of the stage 3 plan"; }
  same_losses gpt-adamw-one gpt-adamw-zero3-mpi 1e-5
fi

# 4. Checkpoints hold whole tensors: 3 sharded steps resume on one device, 3 one-device steps
#    resume sharded, both on the 5-step trajectory.
train_steps() { "$cleave" run "$1.cplan" --data synthetic --progress never "${@:2}" >resume.log 2>&1 || { cat resume.log >&2; fail "$1 ${*:2}"; }; }
train_steps gpt-adamw-zero--dp2 --steps 3 --metrics from-zero.jsonl --checkpoint-dir from-zero
train_steps gpt-adamw-one --steps 5 --metrics from-zero.jsonl --checkpoint-dir from-zero --resume
same_losses gpt-adamw-one from-zero 1e-5
train_steps gpt-adamw-one --steps 3 --metrics to-zero.jsonl --checkpoint-dir to-zero
train_steps gpt-adamw-zero--dp2 --steps 5 --metrics to-zero.jsonl --checkpoint-dir to-zero --resume
same_losses gpt-adamw-one to-zero 1e-5
# The same with parameters in blocks (stage 3, with pipeline stages).
train_steps gpt-adamw-zero3--dp2--pp2--microbatches4 --steps 3 --metrics from-zero3.jsonl --checkpoint-dir from-zero3
train_steps gpt-adamw-one --steps 5 --metrics from-zero3.jsonl --checkpoint-dir from-zero3 --resume
same_losses gpt-adamw-one from-zero3 1e-5
train_steps gpt-adamw-one --steps 3 --metrics to-zero3.jsonl --checkpoint-dir to-zero3
train_steps gpt-adamw-zero3--dp2--pp2--microbatches4 --steps 5 --metrics to-zero3.jsonl --checkpoint-dir to-zero3 --resume
same_losses gpt-adamw-one to-zero3 1e-5

# Evaluation reads the parameters gathered too: GPT-2 scores as on one device.
dir=$fixtures/modern/gpt2_legacy17
compile gpt2-one "$dir/model.onnx" --batch "$(cat "$dir/train/batch.txt")" --optimizer "$(cat "$dir/train/optimizer.txt")"
for name in gpt2-one gpt2_legacy17--dp2--zero3; do
  "$cleave" run "$name.cplan" --data "npy:$dir/train" --eval-data "npy:$dir/train" --steps 2 --progress never \
    >"$name.eval" 2>&1 || { cat "$name.eval" >&2; fail "evaluating $name"; }
done
grep -i "accuracy" gpt2-one.eval >one.scores || fail "no accuracy in $(cat gpt2-one.eval)"
grep -i "accuracy" gpt2_legacy17--dp2--zero3.eval >zero3.scores || true
cmp -s one.scores zero3.scores || fail "evaluation under --zero 3 differs: $(cat zero3.scores) vs $(cat one.scores)"
echo "  evaluation under --dp 2 --zero 3 as on one device: $(head -1 one.scores)"

# 5. --strategy auto with --zero 1 chooses among sharded strategies (dp 2 or more).
"$cleave" compile gpt.cir --train --optimizer adamw --strategy auto --devices 4 --zero 1 -o auto.cplan >auto.log 2>&1 ||
  { cat auto.log >&2; fail "--strategy auto --zero 1"; }
grep -q "^strategy auto on cpu-local: dp [24] x .*zero 1" auto.log || fail "auto did not choose a sharded strategy: $(head -1 auto.log)"
# (Through a file: with pipefail, grep -q leaving early would fail the pipeline by SIGPIPE.)
"$cleave" inspect auto.cplan >auto.inspect || fail "inspect auto.cplan"
grep -q "zero 1" auto.inspect || fail "inspect does not show the chosen strategy's zero 1"

# 6. Usage errors (exit 2).
expect_usage() {
  local pattern=$1
  shift
  set +e
  "$cleave" compile gpt.cir "$@" -o x.cplan >err.txt 2>&1
  local code=$?
  set -e
  [[ $code == 2 ]] && grep -q -- "$pattern" err.txt || fail "compile $* exited $code: $(cat err.txt)"
}
expect_usage "needs --train and --dp 2 or more" --train --zero 1
expect_usage "needs --train and --dp 2 or more" --dp 2 --zero 1
expect_usage "needs --train and --dp 2 or more" --train --zero 3
echo "zero: ok"
