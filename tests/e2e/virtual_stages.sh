#!/usr/bin/env bash
# Interleaved 1F1B (`cleave compile --pp P --virtual-stages V`, Megatron-LM's schedule): each rank
# holds V pipeline stages of P x V. The GPT trains with one device's losses alone and mixed with
# dp, tp, recomputation, ZeRO 1 to 3 and without fusion; GPT-2 exported from PyTorch (both exporters)
# follows PyTorch's losses; mpirun runs it; checkpoints resume across the interleaved and the one-device
# plan; the simulated step has a smaller bubble than plain 1F1B's; misuse is an error.
# Usage: bash virtual_stages.sh PATH_TO_cleave SOURCE_DIR
set -euo pipefail

cleave=$1
source_dir=$2
fixtures=$source_dir/tests/fixtures
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
python=/usr/bin/python3
# shellcheck source=helpers/training.sh
source "$source_dir/tests/e2e/helpers/training.sh"

"$cleave" gen gpt --layers 4 --hidden 64 --heads 4 --seq 16 --vocab 128 --batch 8 -o gpt.cir >/dev/null

step_ms() { "$cleave" simulate "$1.cplan" --cluster cpu-local --json | $python -c 'import json, sys; print(json.load(sys.stdin)["step_time_s"] * 1e3)'; }

# 1. One device's losses, under every mix (AdamW: its step counter is kept per virtual stage).
optimizer=(--optimizer adamw:lr=1e-3)
compile one gpt.cir "${optimizer[@]}"
train one synthetic
for flags in "--pp 2 --virtual-stages 2 --microbatches 4" "--pp 2 --virtual-stages 4 --microbatches 2" \
  "--pp 4 --virtual-stages 2 --microbatches 8" "--dp 2 --pp 2 --virtual-stages 2 --microbatches 2" \
  "--tp 2 --pp 2 --virtual-stages 2 --microbatches 4" "--pp 2 --virtual-stages 2 --microbatches 4 --recompute full" \
  "--dp 2 --pp 2 --virtual-stages 2 --microbatches 2 --zero 1" "--dp 2 --pp 2 --virtual-stages 2 --microbatches 4 --zero 2" \
  "--dp 2 --pp 2 --virtual-stages 2 --microbatches 4 --zero 3" "--pp 2 --virtual-stages 2 --microbatches 4 --fusion off"; do
  name="v${flags// /}"
  # shellcheck disable=SC2086
  compile "$name" gpt.cir "${optimizer[@]}" $flags
  train "$name" synthetic
  same_losses one "$name" 1e-5
done
grep -q "interleaved: 2 virtual stages per rank" <("$cleave" inspect v--pp2--virtual-stages2--microbatches4.cplan) ||
  fail "inspect does not say the plan is interleaved"
# Gradient clipping: the norm sums every virtual stage's part once (each rank's stages are summed
# before the all-reduce over the pipeline).
compile one-clip gpt.cir "${optimizer[@]}" --clip-grad-norm 0.5
train one-clip synthetic
for flags in "--pp 2 --virtual-stages 2 --microbatches 4" "--dp 2 --pp 2 --virtual-stages 2 --microbatches 2 --zero 1"; do
  name="clip${flags// /}"
  # shellcheck disable=SC2086
  compile "$name" gpt.cir "${optimizer[@]}" --clip-grad-norm 0.5 $flags
  train "$name" synthetic
  same_losses one-clip "$name" 1e-5
done
# The ranks of a stage share its program (SPMD) as without virtual stages.
compile spmd gpt.cir "${optimizer[@]}" --dp 2 --tp 2 --pp 2 --virtual-stages 2 --microbatches 2
train spmd synthetic
same_losses one spmd 1e-5
shared=$("$cleave" inspect spmd.cplan --json | $python -c '
import json, sys
print(sum(r["same_program_as"] is not None for r in json.load(sys.stdin)["ranks"]))')
(( shared == 6 )) || fail "dp 2 x tp 2 x pp 2 with virtual stages: $shared of 8 ranks share a program, not 6"

# 2. The schedule: no deadlock in the simulation, and a smaller bubble than 1F1B over the same
#    ranks (4 stages, 8 microbatches: Megatron's bubble shrinks by V).
compile plain gpt.cir "${optimizer[@]}" --pp 4 --microbatches 8
plain=$(step_ms plain)
interleaved=$(step_ms v--pp4--virtual-stages2--microbatches8)
echo "  simulated step (cpu-local), pp 4 x 8 microbatches: 1F1B $plain ms, interleaved (2 virtual stages) $interleaved ms"
$python -c "import sys; sys.exit(0 if $interleaved < $plain else 1)" || fail "interleaving does not shorten the simulated step"

# 3. Exports from PyTorch, against PyTorch's losses.
for fixture in modern/gpt2_legacy17 modern/gpt2_dynamo18; do
  dir=$fixtures/$fixture
  name=${fixture#modern/}
  compile "$name-v" "$dir/model.onnx" --batch "$(cat "$dir/train/batch.txt")" \
    --optimizer "$(cat "$dir/train/optimizer.txt")" --pp 2 --virtual-stages 2 --microbatches 2
  train "$name-v" "npy:$dir/train"
  same_losses "$dir/train/losses" "$name-v" 2e-3
done

# 4. Under mpirun, one process per rank.
if command -v mpirun >/dev/null; then
  mpirun --allow-run-as-root --oversubscribe -np 4 "$cleave" run v--dp2--pp2--virtual-stages2--microbatches2.cplan \
    --backend mpi --threads 1 --data synthetic --steps 4 --progress never --metrics mpi.jsonl >mpi.log 2>&1 ||
    { cat mpi.log >&2; fail "mpirun of the interleaved plan"; }
  same_losses one mpi 1e-5
fi

# 5. Checkpoints: 2 interleaved steps resume on one device, 2 one-device steps resume interleaved,
#    both on the 4-step trajectory (the step counter, AdamW's bias correction, carries over).
resume() { "$cleave" run "$1.cplan" --data synthetic --progress never "${@:2}" >resume.log 2>&1 || { cat resume.log >&2; fail "$1 ${*:2}"; }; }
resume v--pp2--virtual-stages2--microbatches4 --steps 2 --metrics from-v.jsonl --checkpoint-dir from-v
resume one --steps 4 --metrics from-v.jsonl --checkpoint-dir from-v --resume
same_losses one from-v 1e-5
resume one --steps 2 --metrics to-v.jsonl --checkpoint-dir to-v
resume v--pp2--virtual-stages2--microbatches4 --steps 4 --metrics to-v.jsonl --checkpoint-dir to-v --resume
same_losses one to-v 1e-5

# 6. Misuse is an error naming the flag (2), or the value that cannot be interleaved (1).
expect_error() {
  local code=$1 message=$2
  shift 2
  local got=0
  "$cleave" compile "$@" -o bad.cplan >bad.log 2>&1 || got=$?
  (( got == code )) && grep -q -- "$message" bad.log || { cat bad.log >&2; fail "compile $*: exit $got, not $code with '$message'"; }
}
expect_error 2 "needs --pp 2 or more" gpt.cir --train --virtual-stages 2
expect_error 2 "must be a multiple of it" gpt.cir --train --pp 2 --virtual-stages 2 --microbatches 3
expect_error 2 "takes --schedule 1f1b" gpt.cir --train --pp 2 --virtual-stages 2 --microbatches 2 --schedule gpipe
# The search weighs the virtual stages it is given.
"$cleave" compile gpt.cir --train --strategy auto --devices 4 --virtual-stages 2 -o auto.cplan >auto.log 2>&1 ||
  { cat auto.log >&2; fail "--strategy auto --virtual-stages 2"; }
# The split keeps every value within the next stage where it can: a 1-layer GPT over 6 virtual
# stages interleaves (each residual reaches the next stage only) with one device's losses. Over 8,
# no split can: a residual skips a stage, read by the rank's next virtual stage, an error.
"$cleave" gen gpt --layers 1 --hidden 64 --heads 4 --seq 16 --vocab 128 --batch 8 -o small.cir >/dev/null
compile small-one small.cir "${optimizer[@]}"
train small-one synthetic
compile small-v3 small.cir "${optimizer[@]}" --pp 2 --virtual-stages 3 --microbatches 2
train small-v3 synthetic
same_losses small-one small-v3 1e-5
expect_error 1 "between two virtual stages of this rank" small.cir --train --pp 2 --virtual-stages 4 --microbatches 2
# LLaMA's exported rotary frequencies are a parameter every layer reads: two virtual stages of a
# rank would each hold and update it.
dir=$fixtures/modern/llama_dynamo18
expect_error 1 "is used by two virtual stages of this rank" "$dir/model.onnx" --batch "$(cat "$dir/train/batch.txt")" \
  --train --pp 2 --virtual-stages 2 --microbatches 2
echo "virtual_stages.sh: all checks passed"
