#!/usr/bin/env bash
# Predicted against measured step time on this machine: `cleave calibrate` measures it, then for
# mlp, the convnet and a small gpt under dp 2, tp 2 and pp 2 (4 microbatches, 1f1b) it prints
# `cleave simulate`'s step time beside the steps of `cleave run --metrics` (one core per rank):
# the fastest step (the machine undisturbed, as calibrate measures it; the error is taken on it)
# and the median one (what other jobs on a shared machine leave).
# The machine is calibrated again just before each case (10 s), and each row shows the GEMM speed
# that calibration found: on a shared machine that speed moves by a third within a minute (the two
# cores' neighbours), so a prediction is only compared with steps run in the same conditions.
# Usage: bench/predicted_vs_measured.sh [STEPS]   (env: CLEAVE=path to cleave, CLUSTER=a spec file
#        to use instead of calibrating, MODELS="mlp cnn gpt", PLANS="dp tp pp")
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-100}
cleave=${CLEAVE:-build/tools/cleave}
models=${MODELS:-"mlp cnn gpt"}
plans=${PLANS:-"dp tp pp"}
python=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

[ -x "$cleave" ] || { echo "build cleave first (tools/build.sh)" >&2; exit 2; }

# The machine's figures: calibrated before each case (so that its prediction sees the machine as it
# is then), or given.
cluster=${CLUSTER:-$work/cpu-local.json}
calibrate() {
  if [ -z "${CLUSTER:-}" ]; then
    "$cleave" calibrate -o "$cluster" >/dev/null
  fi
}

gen_model() {
  case "$1" in
    mlp) "$cleave" gen mlp --batch 128 -o "$work/mlp.cir" ;;
    cnn) "$cleave" gen cnn --batch 64 -o "$work/cnn.cir" ;;
    gpt) "$cleave" gen gpt --layers 4 --hidden 256 --heads 4 --seq 64 --vocab 1024 --batch 8 -o "$work/gpt.cir" ;;
  esac
}
strategy_flags() {
  case "$1" in
    dp) echo "--dp 2" ;;
    tp) echo "--tp 2" ;;
    pp) echo "--pp 2 --microbatches 4 --schedule 1f1b" ;;
  esac
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %-4s %9s %13s %13s %13s %10s %8s\n' model plan gemm_GF/s predicted_ms best_ms median_ms pred/best error
within=0 within10=0 total=0
for model in $models; do
  gen_model "$model"
  for plan in $plans; do
    # shellcheck disable=SC2046
    "$cleave" compile "$work/$model.cir" --train --optimizer sgd:lr=0.01,momentum=0.9 $(strategy_flags "$plan") \
      -o "$work/$model-$plan.cplan" >/dev/null
    calibrate
    gemm=$($python -c "import json, sys; print(json.load(open(sys.argv[1]))['device']['peak_flops']['f32'] / 1e9)" "$cluster")
    predicted=$("$cleave" simulate "$work/$model-$plan.cplan" --cluster "$cluster" --json |
      $python -c "import json, sys; print(json.load(sys.stdin)['step_time_s'])")
    "$cleave" run "$work/$model-$plan.cplan" --data synthetic --steps $((steps + 3)) --threads 2 \
      --metrics "$work/$model-$plan.jsonl" >/dev/null
    row=$($python - "$work/$model-$plan.jsonl" "$predicted" "$model" "$plan" "$gemm" <<'PY'
import json, statistics, sys
path, predicted, model, plan, gemm = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5])
batch = {"mlp": 128, "cnn": 64, "gpt": 8}[model]
steps = [batch / json.loads(line)["samples_per_s"] for line in open(path)][3:]  # after 3 warm-up steps
best, median = min(steps), statistics.median(steps)
error = predicted / best - 1
print(f"{model:<5} {plan:<4} {gemm:9.1f} {predicted * 1e3:13.2f} {best * 1e3:13.2f} {median * 1e3:13.2f} {predicted / best:10.2f}"
      f" {error:+8.0%} {'within 10%' if abs(error) <= 0.10 else 'within 25%' if abs(error) <= 0.25 else 'over 25%'}")
PY
)
    echo "$row"
    total=$((total + 1))
    [[ $row == *" within 10%" ]] && within10=$((within10 + 1))
    [[ $row == *" within 10%" || $row == *" within 25%" ]] && within=$((within + 1))
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$within10 of $total within 10%, $within within 25%"
