#!/usr/bin/env bash
# Data parallelism over 2 processes x 1 thread: cleave (a --dp 2 plan under mpirun, --backend mpi)
# against PyTorch DistributedDataParallel over gloo (peers/torch_ddp_bench.py) on the same models,
# global batch and number of steps, both measured in this run; prints global samples/s and the ratio
# cleave/PyTorch per model.
# Usage: bench/ddp_vs_mpi.sh [STEPS]   (env: CLEAVE=path to cleave, PEERS=folder of peer scripts,
#        MODELS="mlp cnn", ROUNDS=2: each side is measured ROUNDS times, alternating; the best counts)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-40}
cleave=${CLEAVE:-build/tools/cleave}
peers=${PEERS:-../shared/peers}
models=${MODELS:-"mlp cnn"}
rounds=${ROUNDS:-2}
python=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

[ -x "$cleave" ] || { echo "build cleave first (tools/build.sh)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "mpirun not found (tools/setup.sh installs openmpi-bin)" >&2; exit 2; }
$python -c "import torch" 2>/dev/null || { echo "PyTorch not found for $python (python3-torch)" >&2; exit 2; }
mpi=(mpirun --oversubscribe -np 2)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)

# The peer's models (mlp: 784-512-512-10; cnn: the Fashion-MNIST convnet), SGD lr 0.01 momentum 0.9,
# cross entropy. The global batch splits over the 2 processes as in the peer (gbatch / world each).
global_batch() { case "$1" in mlp) echo 256 ;; cnn) echo 128 ;; esac; }
gen_model() {
  case "$1" in
    mlp) "$cleave" gen mlp --batch "$2" -o "$work/mlp.cir" ;;
    cnn) "$cleave" gen cnn --batch "$2" -o "$work/cnn.cir" ;;
  esac
}
# Random inputs and labels for every step, read from memory as the peer reuses its tensors.
make_data() {  # MODEL GLOBAL_BATCH
  mkdir -p "$work/$1-data"
  $python - "$work/$1-data" "$1" "$2" "$((steps + 3))" <<'PY'
import sys, numpy as np
out, model, batch, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)
shape = (batch * steps, 784) if model == "mlp" else (batch * steps, 1, 28, 28)
np.save(f"{out}/x.npy", rng.standard_normal(shape, dtype=np.float32))
np.save(f"{out}/labels.npy", rng.integers(0, 10, size=batch * steps, dtype=np.int64))
PY
}

# Global samples/s over the steps after the first 3 (warm-up), from rank 0's metrics file: the time
# from the end of step 3 to the end of the last step, as the peer times its steps between barriers.
cleave_rate() {  # MODEL GLOBAL_BATCH
  "${mpi[@]}" "$cleave" run "$work/$1.cplan" --backend mpi --data "npy:$work/$1-data" --steps $((steps + 3)) \
    --threads 1 --progress never --metrics "$work/$1.jsonl" >/dev/null 2>"$work/$1.err" ||
    { cat "$work/$1.err" >&2; echo 0; return; }
  $python - "$work/$1.jsonl" "$2" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
batch = int(sys.argv[2])
print(f"{(len(rows) - 3) * batch / (rows[-1]['elapsed_s'] - rows[2]['elapsed_s']):.1f}")
PY
}
# The peer sets 1 torch thread per process; OpenBLAS gets 1 too (Debian's torch does not pass
# set_num_threads on to it, and two pools per process would spin against each other).
torch_rate() {  # MODEL GLOBAL_BATCH
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $python "$peers/torch_ddp_bench.py" "$1" "$2" "$steps" 2 2>/dev/null |
    sed -E 's/.*: ([0-9.]+) samples\/s.*/\1/'
}
best() { $python -c "import sys; print(max(float(v) for v in sys.argv[1:]))" "$@"; }

printf '%-5s %-9s %-6s %14s %14s %8s\n' model processes batch cleave_samp/s torch_samp/s ratio
for model in $models; do
  batch=$(global_batch "$model")
  gen_model "$model" "$batch" >/dev/null
  "$cleave" compile "$work/$model.cir" --train --loss softmax_cross_entropy --optimizer sgd:lr=0.01,momentum=0.9 \
    --dp 2 -o "$work/$model.cplan" >/dev/null
  make_data "$model" "$batch"
  ours=() theirs=()
  for _ in $(seq "$rounds"); do
    ours+=("$(cleave_rate "$model" "$batch")")
    theirs+=("$(torch_rate "$model" "$batch")")
  done
  ours=$(best "${ours[@]}")
  theirs=$(best "${theirs[@]}")
  printf '%-5s %-9s %-6s %14s %14s %8s\n' "$model" "2 x 1thr" "$batch" "$ours" "$theirs" \
    "$($python -c "print(f'{$ours / $theirs:.2f}')")"
done
