#!/usr/bin/env bash
# Activation recomputation end to end (`cleave compile --recompute selective|full`): the GPT, the
# convnet and Hugging Face exports (GPT-2, LLaMA, the train()-mode ResNet with BatchNorm) train with
# the same losses (and PyTorch's, for the exports) as without it, alone and under dp, tp, pp and a mix; each mode needs less arena
# than the one before (selective < none for the GPT, full < selective); bad values and
# --recompute without --train are usage errors.
# Usage: bash recompute.sh PATH_TO_cleave SOURCE_DIR
set -euo pipefail

cleave=$1
source_dir=$2
fixtures=$source_dir/tests/fixtures
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; exit 1; }

"$cleave" gen gpt --layers 4 --hidden 64 --heads 4 --seq 32 --vocab 128 --batch 8 -o "$tmp/gpt.cir" >/dev/null
cp "$source_dir/examples/fashion_cnn.cir" "$tmp/cnn.cir"

# compile NAME MODEL FLAGS...: the plan $tmp/NAME.cplan; its arena in bytes in $tmp/NAME.arena.
compile() {
  local name=$1 model=$2
  shift 2
  "$cleave" compile "$model" --train "$@" -o "$tmp/$name.cplan" >"$tmp/$name.log" 2>&1 ||
    { cat "$tmp/$name.log" >&2; fail "compile $name: $*"; }
  "$cleave" inspect "$tmp/$name.cplan" --json >"$tmp/$name.json"
  $python -c 'import json, sys; print(max(r["peak_memory_bytes"] for r in json.load(open(sys.argv[1]))["ranks"]))' \
    "$tmp/$name.json" >"$tmp/$name.arena"
}

# train NAME DATA: 5 steps of $tmp/NAME.cplan, losses in $tmp/NAME.jsonl.
train() {
  "$cleave" run "$tmp/$1.cplan" --data "$2" --steps 5 --progress never --metrics "$tmp/$1.jsonl" >"$tmp/$1.log" 2>&1 ||
    { cat "$tmp/$1.log" >&2; fail "run $1"; }
}

# same_losses EXPECTED ACTUAL TOLERANCE: the runs' losses (0: bitwise the same).
same_losses() { $python "$source_dir/tests/e2e/same_losses.py" "$2" "$tmp/$1.jsonl" "$tmp/$2.jsonl" "$3" || fail "$2's losses differ from $1's"; }

# arena NAME: its arena in MiB, for the log.
mib() { $python -c 'import sys; print(f"{int(open(sys.argv[1]).read()) / 2**20:.2f} MiB")' "$tmp/$1.arena"; }

# 1. One device: the same losses, bit for bit (the same kernels on the same numbers), and less memory.
gpt_flags=(--batch 8 --optimizer sgd:lr=0.05,momentum=0.9)
cnn_flags=(--batch 16 --optimizer sgd:lr=0.05,momentum=0.9)
for model in gpt cnn; do
  flags_name="${model}_flags[@]"
  for mode in none selective full; do
    compile "$model-$mode" "$tmp/$model.cir" "${!flags_name}" --recompute "$mode"
    train "$model-$mode" synthetic
    echo "  $model --recompute $mode: arena $(mib "$model-$mode")"
  done
  same_losses "$model-none" "$model-selective" 0
  same_losses "$model-none" "$model-full" 0
  (( $(cat "$tmp/$model-full.arena") < $(cat "$tmp/$model-none.arena") )) ||
    fail "$model: --recompute full does not shrink the arena"
done
(( $(cat "$tmp/gpt-selective.arena") < $(cat "$tmp/gpt-none.arena") )) || fail "gpt: --recompute selective saves nothing"
(( $(cat "$tmp/gpt-full.arena") < $(cat "$tmp/gpt-selective.arena") )) || fail "gpt: full keeps as much as selective"

# 2. Partitioned, with and without fusion: the single device's losses without recomputation, and
#    less memory than the same split without it (under dp or tp alone too, where the stage's one
#    step keeps program order, so the copies run just before the backward nodes that need them).
for flags in "--dp 2" "--tp 2" "--pp 2 --microbatches 2" "--dp 2 --tp 2 --fusion off" "--tp 2 --pp 2 --microbatches 4 --schedule 1f1b"; do
  # shellcheck disable=SC2086
  compile "gpt-none${flags// /}" "$tmp/gpt.cir" "${gpt_flags[@]}" $flags
  for mode in selective full; do
    name="gpt-$mode${flags// /}"
    compile "$name" "$tmp/gpt.cir" "${gpt_flags[@]}" $flags --recompute "$mode"
    train "$name" synthetic
    same_losses gpt-none "$name" 1e-5
  done
  echo "  gpt $flags: arena $(mib "gpt-none${flags// /}") -> $(mib "gpt-selective${flags// /}") -> $(mib "gpt-full${flags// /}")"
  (( $(cat "$tmp/gpt-full${flags// /}.arena") < $(cat "$tmp/gpt-none${flags// /}.arena") )) ||
    fail "gpt $flags: --recompute full does not shrink the arena"
done

# 3. Hugging Face and torchvision exports: recomputation changes no loss (BatchNorm's statistics included).
for fixture in modern/gpt2_legacy17 modern/llama_dynamo18 modern/resnet_bn_train_legacy17; do
  dir=$fixtures/$fixture
  [[ -d $dir ]] || fail "missing fixture $fixture"
  name=${fixture#modern/}
  for mode in none full; do
    compile "$name-$mode" "$dir/model.onnx" --batch "$(cat "$dir/train/batch.txt")" \
      --optimizer "$(cat "$dir/train/optimizer.txt")" --recompute "$mode"
    train "$name-$mode" "npy:$dir/train"
  done
  pipeline=(--pp 2 --microbatches 2)
  [[ $name == resnet* ]] && pipeline=(--pp 2)  # BatchNorm's running statistics take one microbatch
  compile "$name-full-pp" "$dir/model.onnx" --batch "$(cat "$dir/train/batch.txt")" \
    --optimizer "$(cat "$dir/train/optimizer.txt")" --recompute full "${pipeline[@]}"
  train "$name-full-pp" "npy:$dir/train"
  same_losses "$name-none" "$name-full" 0
  same_losses "$name-none" "$name-full-pp" 2e-5
  $python - "$tmp/$name-full-pp.jsonl" "$dir/train/losses.json" <<'PY' || fail "$name: --recompute full --pp 2 differs from PyTorch"
import json, sys
actual = [json.loads(line)["loss"] for line in open(sys.argv[1])]
expected = json.load(open(sys.argv[2]))[:5]
worst = max(abs(a - e) / abs(e) for a, e in zip(actual, expected))
print(f"  {'':34} and within {worst:.1e} of PyTorch's")
assert len(actual) == 5 and worst <= 2e-3, worst
PY
  echo "  $name: arena $(mib "$name-none") -> $(mib "$name-full") with --recompute full"
  (( $(cat "$tmp/$name-full.arena") < $(cat "$tmp/$name-none.arena") )) || fail "$name: --recompute full saves nothing"
done

# 4. Usage errors (exit 2) name the flag.
set +e
"$cleave" compile "$tmp/gpt.cir" --train --recompute some -o "$tmp/x.cplan" >"$tmp/err.txt" 2>&1
[[ $? == 2 ]] && grep -q "recompute" "$tmp/err.txt" || fail "--recompute some is not a usage error"
"$cleave" compile "$tmp/gpt.cir" --recompute full -o "$tmp/x.cplan" >"$tmp/err.txt" 2>&1
[[ $? == 2 ]] && grep -q "need --train" "$tmp/err.txt" || fail "--recompute without --train is not a usage error"
set -e
echo "recompute: ok"
