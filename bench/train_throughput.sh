#!/usr/bin/env bash
# Training throughput: cleave against PyTorch on the same models, batch sizes and thread counts,
# both measured in this run; prints samples/s and the ratio cleave/PyTorch per case.
# Usage: bench/train_throughput.sh [STEPS]   (env: CLEAVE=path to cleave, PEERS=folder of peer scripts,
#        THREADS="1 2", MODELS="mlp cnn gpt")
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-30}
cleave=${CLEAVE:-build/tools/cleave}
peers=${PEERS:-../shared/peers}
threads_list=${THREADS:-"1 2"}
models=${MODELS:-"mlp cnn gpt"}
python=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

[ -x "$cleave" ] || { echo "build cleave first (tools/build.sh)" >&2; exit 2; }
have_torch=1
$python -c "import torch" 2>/dev/null || have_torch=0

# The peer's models and settings: SGD lr 0.01 momentum 0.9, cross entropy, synthetic data.
gen_model() {
  case "$1" in
    mlp) "$cleave" gen mlp --batch 128 -o "$work/mlp.cir" ;;
    cnn) "$cleave" gen cnn --batch 64 -o "$work/cnn.cir" ;;
    gpt) "$cleave" gen gpt --layers 4 --hidden 256 --heads 4 --seq 64 --vocab 1024 --batch 8 -o "$work/gpt.cir" ;;
  esac
}
batch_of() { case "$1" in mlp) echo 128 ;; cnn) echo 64 ;; gpt) echo 8 ;; esac; }

# Mean samples/s over the steps after the first 3 (warm-up), from cleave's metrics file.
cleave_rate() {
  local model=$1 threads=$2
  "$cleave" run "$work/$model.cplan" --data synthetic --steps $((steps + 3)) --threads "$threads" \
    --metrics "$work/$model-$threads.jsonl" >/dev/null 2>"$work/$model-$threads.err" ||
    { cat "$work/$model-$threads.err" >&2; echo 0; return; }
  $python - "$work/$model-$threads.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][3:]
print(f"{sum(r['samples_per_s'] for r in rows) / len(rows):.1f}")
PY
}

printf '%-5s %-7s %-6s %14s %14s %8s\n' model threads batch cleave_samp/s torch_samp/s ratio
for model in $models; do
  gen_model "$model"
  "$cleave" compile "$work/$model.cir" --train --loss softmax_cross_entropy \
    --optimizer sgd:lr=0.01,momentum=0.9 -o "$work/$model.cplan" >/dev/null
  for threads in $threads_list; do
    ours=$(cleave_rate "$model" "$threads")
    theirs=n/a ratio=n/a
    if [ "$have_torch" = 1 ]; then
      theirs=$(OPENBLAS_NUM_THREADS=$threads $python "$peers/torch_train_bench.py" "$model" "$(batch_of "$model")" "$steps" "$threads" |
        sed -E 's/.*: ([0-9.]+) samples\/s.*/\1/')
      ratio=$($python -c "print(f'{$ours / $theirs:.2f}')")
    fi
    printf '%-5s %-7s %-6s %14s %14s %8s\n' "$model" "$threads" "$(batch_of "$model")" "$ours" "$theirs" "$ratio"
  done
done
