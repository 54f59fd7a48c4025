#!/usr/bin/env bash
# Every peer benchmark in order, then the tables: the models exported from PyTorch, the machine's
# sgemm limit, training (mlp, convnet, gpt: torch eager and torch.compile), data parallel over two
# processes (DDP over gloo), inference (ONNX Runtime and torch eager). Needs bench/setup_peers.sh.
# Usage: bench/peers/run_all.sh [REPS]   (env: OUT, default /tmp/perf; PEERS_VENV; GATE=0: no idle wait)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
reps=${1:-5}
py=${PY:-${PEERS_VENV:-/tmp/peers-venv}/bin/python}
export OUT=${OUT:-/tmp/perf}
"$py" "$here/export_models.py"
"$py" "$here/gemm_limit.py"
"$py" "$here/train_throughput.py" --reps "$reps"
"$py" "$here/ddp_vs_mpi.py" --reps "$reps"
"$py" "$here/inference.py" --reps "$reps"
"$py" "$here/summarize.py" | tee "$OUT/tables.md"
