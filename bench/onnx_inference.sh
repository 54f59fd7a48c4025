#!/usr/bin/env bash
# Inference latency: cleave against ONNX Runtime on the same ONNX files (the fixtures' ResNet-style CNN
# and GPT-style decoder), batch sizes and thread counts, both measured in this run; prints the median
# milliseconds per batch and the ratio ONNX Runtime time / cleave time (above 1: cleave is faster).
# Usage: bench/onnx_inference.sh [ITERATIONS]   (env: BENCH=path to onnx_inference_bench, built with
#        -DCLEAVE_BUILD_BENCH=ON; PYTHON=a python with onnxruntime and numpy; THREADS="1 2")
set -euo pipefail
cd "$(dirname "$0")/.."
iterations=${1:-100}
warmup=10
bench=${BENCH:-build/bench/onnx_inference_bench}
python=${PYTHON:-python3}
threads_list=${THREADS:-"1 2"}

[ -x "$bench" ] || { echo "build onnx_inference_bench first (cmake -DCLEAVE_BUILD_BENCH=ON)" >&2; exit 2; }
$python -c "import onnxruntime, numpy" 2>/dev/null ||
  { echo "$python lacks onnxruntime (pip install onnxruntime numpy, or set PYTHON)" >&2; exit 2; }

# name, model file, batch
cases=(
  "resnet tests/fixtures/resnet/model.onnx 32"
  "gpt17 tests/fixtures/gpt17/model.onnx 16"
)
median() { sed -E 's/.*median ([0-9.]+) ms.*/\1/'; }

printf '%-7s %-7s %-6s %12s %12s %10s\n' model threads batch cleave_ms ort_ms ort/cleave
for entry in "${cases[@]}"; do
  read -r name model batch <<<"$entry"
  for threads in $threads_list; do
    ours=$(OMP_NUM_THREADS=$threads "$bench" "$model" --batch "$batch" --threads "$threads" \
      --iterations "$iterations" --warmup "$warmup" | median)
    theirs=$(OMP_NUM_THREADS=$threads $python bench/onnx_inference_ort.py "$model" "$batch" "$threads" \
      "$iterations" "$warmup" | median)
    ratio=$($python -c "print(f'{$theirs / $ours:.2f}')")
    printf '%-7s %-7s %-6s %12s %12s %10s\n' "$name" "$threads" "$batch" "$ours" "$theirs" "$ratio"
  done
done
