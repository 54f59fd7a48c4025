#!/usr/bin/env bash
# How compile time and memory grow with the model: a text-IR GPT of about 100,000 nodes (2,180
# layers of width 64) compiled with --train on one device, under --dp 2 and under --dp 2 --tp 2,
# and how much each --recompute mode saves on a GPT of GPT-2 small's shape (12 x 768, seq 1024,
# batch 8, AdamW) with the predicted step on an H100 (`simulate --cluster h100x8`), and GPT-3 175B
# (batch 1536, seq 2048) on 1024 devices: `--strategy auto` and `simulate` of its SPMD plan. Wall
# seconds and peak resident memory from /usr/bin/time.
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

echo
"$cleave" gen gpt --layers 96 --hidden 12288 --heads 96 --seq 2048 --vocab 50257 --batch 1536 -o "$work/gpt3.cir" >/dev/null
echo "| GPT-3 175B, batch 1536, h100x8x128 | wall s | peak memory | plan file | distinct programs |"
echo "| --- | --- | --- | --- | --- |"
/usr/bin/time -f "%e %M" -o "$work/time.txt" "$cleave" compile "$work/gpt3.cir" --train --optimizer adamw:lr=1e-4 \
  --strategy auto --devices 1024 --cluster h100x8x128 -o "$work/gpt3.cplan" >"$work/out.txt"
read -r seconds kib <"$work/time.txt"
programs=$("$cleave" inspect "$work/gpt3.cplan" --json | $python -c 'import json, sys; print(json.load(sys.stdin)["distinct_programs"])')
printf "| compile --strategy auto --devices 1024 | %.1f | %.2f GiB | %.1f MB | %s |\n" "$seconds" \
  "$($python -c "print($kib / 2**20)")" "$($python -c "import os; print(os.path.getsize('$work/gpt3.cplan') / 1e6)")" "$programs"
/usr/bin/time -f "%e %M" -o "$work/time.txt" "$cleave" simulate "$work/gpt3.cplan" --cluster h100x8x128 >"$work/sim.txt"
read -r seconds kib <"$work/time.txt"
printf "| simulate | %.1f | %.2f GiB | | |\n" "$seconds" "$($python -c "print($kib / 2**20)")"
grep -E "^(strategy auto|predicted step|model FLOPs|memory per device)" "$work/out.txt" "$work/sim.txt" | sed 's/^[^:]*://'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
