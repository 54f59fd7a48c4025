#!/usr/bin/env bash
# How compile time and memory grow with the model: a text-IR GPT of about 100,000 nodes (2,180
# layers of width 64) compiled with --train on one device, under --dp 2 and under --dp 2 --tp 2,
# and how much each --recompute mode saves on a GPT of GPT-2 small's shape (12 x 768, seq 1024,
# batch 8, AdamW) with the predicted step on an H100 (`simulate --cluster h100x8`). Wall seconds
# and peak resident memory from /usr/bin/time; the plans are checked to be the same from run to run.
# Usage: bench/compile_scale.sh [LAYERS]   (env: CLEAVE=path to cleave)
set -euo pipefail
cd "$(dirname "$0")/.."
layers=${1:-2180}
cleave=${CLEAVE:-build/tools/cleave}
python=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -x "$cleave" ] || { echo "build cleave first (tools/build.sh)" >&2; exit 2; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$cleave" gen gpt --layers "$layers" --hidden 64 --heads 2 --seq 16 --vocab 100 --batch 4 -o "$work/big.cir" >/dev/null
nodes=$(grep -c ' = ' "$work/big.cir")
echo "model: GPT of $layers layers, $nodes nodes ($work/big.cir)"
echo
echo "| compile | wall s | peak memory | instructions | arena |"
echo "| --- | --- | --- | --- | --- |"
for flags in "--train" "--train --dp 2" "--train --dp 2 --tp 2"; do
  /usr/bin/time -f "%e %M" -o "$work/time.txt" "$cleave" compile "$work/big.cir" $flags -o "$work/big.cplan" >"$work/out.txt"
  read -r seconds kib <"$work/time.txt"
  summary=$(cat "$work/out.txt")
  instructions=$(sed -n 's/.*, \([0-9]*\) instructions.*/\1/p' <<<"$summary")
  arena=$(sed -n 's/.*arena \([0-9.]* MiB\).*/\1/p' <<<"$summary")
  printf "| %s | %.1f | %.2f GiB | %s | %s |\n" "$flags" "$seconds" "$($python -c "print($kib / 2**20)")" "$instructions" "$arena"
done

echo
"$cleave" gen gpt --layers 12 --hidden 768 --heads 12 --seq 1024 --vocab 50257 --batch 8 -o "$work/gpt2s.cir" >/dev/null
echo "| --recompute (GPT 12 x 768, seq 1024, batch 8) | arena | instructions | predicted step on an H100 |"
echo "| --- | --- | --- | --- |"
for mode in none selective full; do
  "$cleave" compile "$work/gpt2s.cir" --train --optimizer adamw:lr=1e-4 --recompute "$mode" -o "$work/r.cplan" >"$work/out.txt"
  arena=$(sed -n 's/.*arena \([0-9.]* MiB\).*/\1/p' "$work/out.txt")
  instructions=$(sed -n 's/.*, \([0-9]*\) instructions.*/\1/p' "$work/out.txt")
  step=$("$cleave" simulate "$work/r.cplan" --cluster h100x8 --json | $python -c 'import json, sys; print("%.1f ms" % (json.load(sys.stdin)["step_time_s"] * 1e3))')
  echo "| $mode | $arena | $instructions | $step |"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
