#!/usr/bin/env bash
# Mixed precision: training throughput with --precision bf16 against f32, cleave and PyTorch 2.x
# (torch.autocast on the CPU) side by side in one run, in alternating rounds (f32, bf16, f32, ...),
# medians; the load average beside the table. The ratios (bf16 / f32) are what to read.
# Usage: bench/mixed_precision.sh [STEPS] [ROUNDS]   (env: CLEAVE=path to cleave, PY=a python with
#        torch 2.x (default /tmp/peers-venv/bin/python; without it the peer columns say n/a),
#        THREADS="1 2", MODELS="cnn gpt")
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-20}
rounds=${2:-3}
cleave=${CLEAVE:-build/tools/cleave}
py=${PY:-/tmp/peers-venv/bin/python}
threads_list=${THREADS:-"1 2"}
models=${MODELS:-"cnn gpt"}
python=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

[ -x "$cleave" ] || { echo "build cleave first (tools/build.sh)" >&2; exit 2; }
have_torch=1
"$py" -c "import torch; assert int(torch.__version__.split('.')[0]) >= 2" 2>/dev/null || have_torch=0

batch_of() { case "$1" in cnn) echo 64 ;; gpt) echo 8 ;; esac; }
gen_model() {
  case "$1" in
    cnn) "$cleave" gen cnn --batch 64 -o "$work/cnn.cir" ;;
    gpt) "$cleave" gen gpt --layers 4 --hidden 256 --heads 4 --seq 64 --vocab 1024 --batch 8 -o "$work/gpt.cir" ;;
  esac
}

# Mean samples/s over the steps after the first 3 (warm-up), from cleave's metrics file.
cleave_rate() {
  local plan=$1 threads=$2
  "$cleave" run "$plan" --data synthetic --steps $((steps + 3)) --threads "$threads" --metrics "$work/m.jsonl" \
    --progress never >/dev/null
  $python -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])][3:]; print(sum(x['samples_per_s'] for x in r)/len(r))" "$work/m.jsonl"
}
torch_rate() {
  [ "$have_torch" = 1 ] || { echo nan; return; }
  "$py" bench/torch_autocast_train.py "$1" "$(batch_of "$1")" "$steps" "$2" "$3" | $python -c "import json,sys; print(json.load(sys.stdin)['samples_per_s'])"
}
median() { $python -c "import statistics,sys; v=[float(x) for x in sys.argv[1:] if x != 'nan']; print(statistics.median(v) if v else float('nan'))" "$@"; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; torch: $([ "$have_torch" = 1 ] && "$py" -c 'import torch; print(torch.__version__)' || echo none)"
printf '| %-5s | %-7s | %-12s | %-12s | %-10s | %-12s | %-12s | %-10s |\n' model threads "cleave f32" "cleave bf16" "bf16/f32" "torch f32" "torch bf16" "bf16/f32"
printf '| --- | --- | --- | --- | --- | --- | --- | --- |\n'
for model in $models; do
  gen_model "$model"
  for precision in f32 bf16; do
    "$cleave" compile "$work/$model.cir" --train --optimizer sgd:lr=0.01,momentum=0.9 --precision $precision \
      -o "$work/$model-$precision.cplan" >/dev/null
  done
  for threads in $threads_list; do
    declare -A samples=()
    for ((round = 0; round < rounds; ++round)); do
      for precision in f32 bf16; do
        samples[cleave_$precision]+=" $(cleave_rate "$work/$model-$precision.cplan" "$threads")"
        samples[torch_$precision]+=" $(torch_rate "$model" "$threads" "$precision")"
      done
    done
    # shellcheck disable=SC2086
    {
      cf=$(median ${samples[cleave_f32]}); cb=$(median ${samples[cleave_bf16]})
      tf=$(median ${samples[torch_f32]}); tb=$(median ${samples[torch_bf16]})
    }
    $python - "$model" "$threads" "$cf" "$cb" "$tf" "$tb" <<'PY'
import math, sys
model, threads = sys.argv[1:3]
cf, cb, tf, tb = map(float, sys.argv[3:])
fmt = lambda v: "n/a" if math.isnan(v) else f"{v:,.1f}"
ratio = lambda a, b: "n/a" if math.isnan(a) or math.isnan(b) else f"{a / b:.2f}"
print(f"| {model:<5} | {threads:<7} | {fmt(cf):<12} | {fmt(cb):<12} | {ratio(cb, cf):<10} | {fmt(tf):<12} | {fmt(tb):<12} | {ratio(tb, tf):<10} |")
PY
    unset samples
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
