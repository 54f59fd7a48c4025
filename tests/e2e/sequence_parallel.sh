#!/usr/bin/env bash
# Sequence parallelism (`cleave compile --tp N --sequence-parallel`, Megatron's): the activations
# between tensor-parallel regions (layer norms, residual adds) are split along the sequence over
# the tp ranks; partial sums are reduce-scattered and weight ops' inputs all-gathered instead of
# all-reduced. The GPT trains with one device's losses under tp alone and mixed with dp, pp,
# microbatches, recomputation, ZeRO and without fusion; GPT-2 and LLaMA exported from PyTorch
# follow PyTorch's losses; the plan moves all-gathers and reduce-scatters in place of the
# all-reduces and holds fewer activation bytes; misuse is an error.
# Usage: bash sequence_parallel.sh PATH_TO_cleave SOURCE_DIR
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

"$cleave" gen gpt --layers 2 --hidden 64 --heads 4 --seq 16 --vocab 128 --batch 8 -o gpt.cir >/dev/null

# figures NAME: "all_reduce all_gather reduce_scatter activation_bytes" of rank 0's train program.
figures() {
  "$cleave" inspect "$1.cplan" --json | $python -c '
import json, sys
r = json.load(sys.stdin)["ranks"][0]
k = r["comm_bytes_by_kind"]
print(k["all_reduce"], k["all_gather"], k["reduce_scatter"], r["activation_bytes"])'
}

# 1. One device's losses, under every mix.
optimizer=(--optimizer adamw:lr=1e-3)
compile one gpt.cir "${optimizer[@]}"
train one synthetic
for flags in "--tp 2" "--tp 4" "--dp 2 --tp 2" "--tp 2 --pp 2 --microbatches 2" "--dp 2 --tp 2 --pp 2 --microbatches 4 --schedule 1f1b" \
  "--tp 2 --recompute selective" "--tp 2 --recompute full" "--dp 2 --tp 2 --zero 1" "--tp 2 --fusion off"; do
  name="sp${flags// /}"
  # shellcheck disable=SC2086
  compile "$name" gpt.cir "${optimizer[@]}" $flags --sequence-parallel
  train "$name" synthetic
  same_losses one "$name" 1e-5
done
grep -q "sequence parallel" <("$cleave" inspect sp--tp2.cplan) || fail "inspect does not say the plan is sequence-parallel"

# 1b. A layer norm's tokens gathered both for a column split (whose users each give part of the
#     gradient: summed by the gather) and for a softmax over the sequence (whole on every rank: not
#     summed). Summing both would count the softmax's gradient twice (1.9e-5 off here).
cat >mixed.cir <<'CIR'
graph @mixed {
  input %x : f32[4,4,8]
  param %w1 : f32[16,8] = kaiming_uniform {a = 2.23606797749979, seed = 1}
  param %w2 : f32[8,16] = kaiming_uniform {a = 2.23606797749979, seed = 2}
  param %g : f32[8] = ones
  param %b : f32[8] = zeros
  param %w3 : f32[8,8] = kaiming_uniform {a = 2.23606797749979, seed = 3}
  %h = matmul(%x, %w1) {transpose_b = 1}
  %a = relu(%h)
  %fc2 = matmul(%a, %w2) {transpose_b = 1}
  %res = add(%x, %fc2)
  %ln = layer_norm(%res, %g, %b)
  %o = matmul(%ln, %w3) {transpose_b = 1}
  %s = softmax(%ln) {axis = 1}
  %y = add(%o, %s)
  output %y
}
CIR
compile mixed-one mixed.cir
train mixed-one synthetic
compile mixed-sp mixed.cir --tp 2 --sequence-parallel
train mixed-sp synthetic
same_losses mixed-one mixed-sp 1e-6

# 2. What it moves and keeps: no activation all-reduce, the same bytes as gathers and scatters,
#    fewer activation bytes.
compile tp gpt.cir "${optimizer[@]}" --tp 2
read -r tp_ar tp_ag tp_rs tp_act < <(figures tp)
read -r sp_ar sp_ag sp_rs sp_act < <(figures sp--tp2)
echo "  gpt --tp 2: all-reduce $tp_ar bytes, activations $tp_act; with --sequence-parallel: all-reduce $sp_ar," \
  "all-gather $sp_ag, reduce-scatter $sp_rs, activations $sp_act"
(( sp_ar * 10 < tp_ar )) || fail "--sequence-parallel still all-reduces activations ($sp_ar of $tp_ar bytes)"
(( sp_ag == sp_rs && sp_ag + sp_rs + sp_ar <= tp_ar + tp_ar / 20 )) ||
  fail "--sequence-parallel moves $sp_ag + $sp_rs + $sp_ar bytes, not the all-reduce's $tp_ar"
(( sp_act < tp_act )) || fail "--sequence-parallel keeps as many activation bytes ($sp_act) as --tp alone ($tp_act)"

# 3. Exports from PyTorch, against PyTorch's losses.
for fixture in modern/llama_dynamo18 modern/gpt2_legacy17; do
  dir=$fixtures/$fixture
  name=${fixture#modern/}
  compile "$name-sp" "$dir/model.onnx" --batch "$(cat "$dir/train/batch.txt")" \
    --optimizer "$(cat "$dir/train/optimizer.txt")" --tp 2 --sequence-parallel
  train "$name-sp" "npy:$dir/train"
  same_losses "$dir/train/losses" "$name-sp" 2e-3
done

# 4. Misuse: without --tp 2, or on a model with no sequence to split (the MLP), is an error.
code=0
"$cleave" compile gpt.cir --train --sequence-parallel -o bad.cplan >bad.log 2>&1 || code=$?
(( code == 2 )) && grep -q "needs --tp 2 or more" bad.log || { cat bad.log >&2; fail "--sequence-parallel without --tp: exit $code"; }
code=0
"$cleave" compile "$source_dir/examples/mlp.cir" --train --tp 2 --sequence-parallel -o bad.cplan >bad.log 2>&1 || code=$?
(( code == 1 )) && grep -q "nothing would split along the sequence" bad.log ||
  { cat bad.log >&2; fail "--sequence-parallel on the MLP: exit $code"; }
# 5. The search weighs it, and the flags hold the search to one side: a GPT whose rejected
#    candidates include a sequence-parallel one, none with --no-sequence-parallel, and the two
#    flags together are a usage error.
"$cleave" gen gpt --layers 4 --hidden 8192 --heads 64 --seq 2048 --vocab 50304 --batch 32 -o large.cir >/dev/null
search() { "$cleave" compile large.cir --train "${optimizer[@]}" --strategy auto --devices 8 --cluster h100x8 "$@" -o auto.cplan; }
search >auto.log || { cat auto.log >&2; fail "--strategy auto on the large GPT"; }
grep -q "sequence parallel" auto.log || { cat auto.log >&2; fail "--strategy auto weighs no sequence-parallel strategy"; }
search --no-sequence-parallel >auto-no.log || { cat auto-no.log >&2; fail "--strategy auto --no-sequence-parallel"; }
grep -q "strategy auto on" auto-no.log && ! grep -q "sequence parallel" auto-no.log ||
  { cat auto-no.log >&2; fail "--no-sequence-parallel still weighs sequence-parallel strategies"; }
"$cleave" inspect auto.cplan --json | $python -c '
import json, sys
search = json.load(sys.stdin)["strategy"]["search"]
candidates = [search["chosen"]] + search["alternatives"]
assert len(candidates) > 1 and not any(c["sequence_parallel"] for c in candidates), candidates' ||
  fail "the plan of --strategy auto --no-sequence-parallel records a sequence-parallel candidate"
code=0
search --sequence-parallel --no-sequence-parallel >bad.log 2>&1 || code=$?
(( code == 2 )) && grep -q "excludes" bad.log || { cat bad.log >&2; fail "both sequence-parallel flags: exit $code"; }
echo "sequence_parallel: ok"
