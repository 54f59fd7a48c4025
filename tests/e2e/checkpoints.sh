#!/usr/bin/env bash
# Checkpoints across plans and out of cleave:
# 1. Resharding: checkpoints saved under dp2xtp2, dp2xpp2 and tp2xpp2 (local backend and mpirun)
#    resume under one device, dp4, tp4 and pp4 on the uninterrupted trajectory (1e-5 relative), for
#    an MLP, a convnet and GPT-2 exported from PyTorch; local checkpoints resume under mpirun too.
# 2. Using the result: an inference plan runs from a training checkpoint; `cleave export` writes
#    safetensors under PyTorch's state_dict names (what load_state_dict(strict=True) checks, from the
#    fixtures' state_dict.json) and an ONNX model that ONNX Runtime runs with cleave's outputs (1e-5).
# 3. Safety: pruning keeps the newest complete checkpoint and removes a crashed save's leftovers;
#    SIGTERM and SIGINT stop with a checkpoint (exit 143, 130) that resumes bitwise; NaN in the data
#    names the file and row.
# 4. Elastic restart: one rank of a 4-process dp run killed, the run restarted on 2 processes from
#    its last checkpoint, on the uninterrupted losses (1e-5).
# Usage: bash checkpoints.sh PATH_TO_cleave SOURCE_DIR
set -euo pipefail

cleave=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
source_dir=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
python=/usr/bin/python3
export PYTHONPATH=$source_dir/tests/e2e
mpi=(mpirun --allow-run-as-root --oversubscribe)
failed=0
fail() {
  echo "FAIL $*"
  failed=1
}

# close_losses LABEL REF.jsonl RUN.jsonl: every step's loss within 1e-5 relative; prints the worst.
close_losses() {
  $python - "$@" <<'PY'
import json, sys
label, ref_path, run_path = sys.argv[1:4]
load = lambda path: {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r}
ref, run = load(ref_path), load(run_path)
if sorted(ref) != sorted(run):
    sys.exit(f"{label}: steps {sorted(run)}, the reference has {sorted(ref)}")
worst = max(abs(run[s] - ref[s]) / max(abs(ref[s]), 1e-12) for s in ref)
print(f"{label}: {len(ref)} steps, worst relative loss difference {worst:.1e}")
sys.exit(0 if worst <= 1e-5 else 1)
PY
}

# 1. The resharding matrix. Each model: a straight one-device run of 6 steps; 3 steps under each
#    source layout (local, and under mpirun), resumed to 6 under each target layout.
"$cleave" gen mlp --input 784 --hidden 64,32 --classes 10 --batch 16 -o mlp.cir
"$cleave" gen cnn --batch 16 -o cnn.cir
gpt2=$source_dir/tests/fixtures/modern/gpt2_dynamo18
sources=("--dp 2 --tp 2" "--dp 2 --pp 2" "--tp 2 --pp 2")
targets=("" "--dp 4" "--tp 4" "--pp 4")
layout_name() { local name=${1//--/}; name=${name// /}; echo "${name:-one}"; }
resumes=0
for model in mlp cnn gpt2; do
  case $model in
    mlp | cnn) file=$model.cir batch=16 data=fashion-mnist optimizer=sgd:lr=0.05,momentum=0.9 ;;
    gpt2) file=$gpt2/model.onnx batch=4 data=npy:$gpt2/train optimizer=$(cat "$gpt2/train/optimizer.txt") ;;
  esac
  for layout in "${sources[@]}" "${targets[@]}"; do
    # shellcheck disable=SC2086
    "$cleave" compile "$file" --batch $batch --train --optimizer "$optimizer" $layout \
      -o "$model-$(layout_name "$layout").cplan" >/dev/null
  done
  run=(--data "$data" --threads 1 --progress never)
  "$cleave" run "$model-one.cplan" "${run[@]}" --steps 6 --metrics "$model-straight.jsonl" >/dev/null
  for source in "${sources[@]}"; do
    name=$(layout_name "$source")
    "$cleave" run "$model-$name.cplan" "${run[@]}" --steps 3 --metrics "$model-$name-local.jsonl" \
      --checkpoint-dir "$model-$name-local" >/dev/null
    "${mpi[@]}" -np 4 "$cleave" run "$model-$name.cplan" --backend mpi "${run[@]}" --steps 3 \
      --metrics "$model-$name-mpi.jsonl" --checkpoint-dir "$model-$name-mpi" >mpi.log 2>&1 ||
      fail "$model: saving under $source with mpirun: $(tail -3 mpi.log)"
    for where in local mpi; do
      for target in "${targets[@]}"; do
        resumed=$model-$name-$where-to-$(layout_name "$target")
        cp -r "$model-$name-$where" "$resumed"
        cp "$model-$name-$where.jsonl" "$resumed.jsonl"
        "$cleave" run "$model-$(layout_name "$target").cplan" "${run[@]}" --steps 6 --metrics "$resumed.jsonl" \
          --checkpoint-dir "$resumed" --resume >resume.log 2>&1 || fail "$resumed: $(cat resume.log)"
        close_losses "$resumed" "$model-straight.jsonl" "$resumed.jsonl" >>matrix.log || fail "$(tail -1 matrix.log)"
        resumes=$((resumes + 1))
      done
    done
  done
  # A local checkpoint resumed under mpirun, too.
  for target in "--dp 4" "--pp 4"; do
    resumed=$model-dp2tp2-local-to-$(layout_name "$target")-mpi
    cp -r "$model-dp2tp2-local" "$resumed"
    cp "$model-dp2tp2-local.jsonl" "$resumed.jsonl"
    "${mpi[@]}" -np 4 "$cleave" run "$model-$(layout_name "$target").cplan" --backend mpi "${run[@]}" --steps 6 \
      --metrics "$resumed.jsonl" --checkpoint-dir "$resumed" --resume >resume.log 2>&1 || fail "$resumed: $(tail -3 resume.log)"
    close_losses "$resumed" "$model-straight.jsonl" "$resumed.jsonl" >>matrix.log || fail "$(tail -1 matrix.log)"
    resumes=$((resumes + 1))
  done
done
worst=$($python -c "import re,sys; print(max(float(m) for m in re.findall(r'difference (\S+)', open('matrix.log').read())))")
echo "resharding: $resumes resumes (3 models: 3 layouts x local and mpirun into 4 layouts on the local backend, and local into dp4 and pp4 under mpirun), worst relative loss difference $worst"

# 2. Using the result. GPT-2 trained 3 steps under tp2xpp2: an inference plan (one device, and tp2)
#    runs from that checkpoint; the exported ONNX model gives the same outputs in ONNX Runtime.
"$cleave" compile "$gpt2/model.onnx" --batch 2 -o gpt2-infer.cplan >/dev/null
"$cleave" compile "$gpt2/model.onnx" --batch 2 --tp 2 -o gpt2-infer-tp2.cplan >/dev/null
"$cleave" run gpt2-infer.cplan --inputs "$gpt2/inputs" --outputs infer-one --checkpoint-dir gpt2-tp2pp2-local >/dev/null
"$cleave" run gpt2-infer-tp2.cplan --inputs "$gpt2/inputs" --outputs infer-tp2 --checkpoint-dir gpt2-tp2pp2-mpi >/dev/null
"$cleave" export gpt2-tp2pp2.cplan --checkpoint-dir gpt2-tp2pp2-local -o gpt2.onnx >/dev/null
"$cleave" export gpt2-tp2pp2.cplan --checkpoint-dir gpt2-tp2pp2-local -o gpt2.safetensors >/dev/null
$python - "$gpt2" <<'PY' || fail "inference from a training checkpoint"
import sys, numpy as np
one, tp2 = np.load("infer-one/output.npy"), np.load("infer-tp2/output.npy")
untrained = np.load(sys.argv[1] + "/expected/output.npy")
assert np.abs(one - tp2).max() <= 1e-5 * np.abs(one).max(), "tp2 inference differs from one device"
assert np.abs(one - untrained).max() > 1e-3, "the inference did not use the trained weights"
print(f"inference from a training checkpoint: one device and tp2 agree within {np.abs(one - tp2).max():.1e}")
PY
ort_python=${XDG_CACHE_HOME:-$HOME/.cache}/cleave/onnxruntime-1.32.0-venv/bin/python
if [[ -x $ort_python ]] && "$ort_python" -c "import onnxruntime" 2>/dev/null; then
  "$ort_python" - "$gpt2" <<'PY' || fail "ONNX Runtime on the exported model"
import sys, numpy as np, onnxruntime
session = onnxruntime.InferenceSession("gpt2.onnx", providers=["CPUExecutionProvider"])
x = np.load(sys.argv[1] + "/inputs/input.npy")
got = session.run(None, {session.get_inputs()[0].name: x})[0]
want = np.load("infer-one/output.npy")
worst = float(np.abs(got - want).max() / np.abs(want).max())
print(f"export: ONNX Runtime runs the exported GPT-2 with cleave's outputs within {worst:.1e} (relative to the largest)")
sys.exit(0 if worst <= 1e-5 else 1)
PY
else
  echo "SKIP ONNX Runtime check: $ort_python is missing (tools/setup.sh installs it from PyPI)"
fi

# The exported safetensors hold the weights under PyTorch's names: every state_dict entry (for
# GPT-2 all but the embedding its head is tied to, which safetensors.torch.load_model resolves),
# same shapes and the checkpoint's values; BatchNorm's num_batches_tracked included.
check_names() {  # LABEL FILE.safetensors STATE_DICT.json CKPT_DIR [TIED...]
  $python - "$@" <<'PY'
import json, sys
import numpy as np
from checkpoint_files import read_safetensors, read_checkpoint
label, path, state_dict_path, ckpt = sys.argv[1:5]
tied = set(sys.argv[5:])
exported, _ = read_safetensors(path)
state_dict = json.load(open(state_dict_path))
missing = sorted(set(state_dict) - set(exported) - tied)
unexpected = sorted(set(exported) - set(state_dict))
wrong = [n for n in exported if n in state_dict and list(exported[n].shape) != state_dict[n]["shape"]]
trained = read_checkpoint(ckpt)
mismatched = [n for n in trained if n in exported and not np.array_equal(trained[n], exported[n])]
if missing or unexpected or wrong or mismatched:
    sys.exit(f"{label}: missing {missing}, unexpected {unexpected}, shapes {wrong}, values {mismatched}")
print(f"export {label}: {len(exported)} tensors under the state_dict's names")
PY
}
check_names gpt2 gpt2.safetensors "$gpt2/state_dict.json" gpt2-tp2pp2-local model.transformer.wte.weight ||
  fail "exported GPT-2 names"
for fixture in mlp train_cnn modern/resnet_bn_train_legacy17; do
  dir=$source_dir/tests/fixtures/$fixture
  label=$(basename "$fixture")
  "$cleave" compile "$dir/model.onnx" --batch 16 --train --optimizer sgd:lr=0.01 --dp 2 -o "$label.cplan" >/dev/null
  "$cleave" run "$label.cplan" --data fashion-mnist --steps 2 --checkpoint-dir "$label-ckpt" --progress never >/dev/null
  "$cleave" export "$label.cplan" --checkpoint-dir "$label-ckpt" -o "$label.safetensors" >/dev/null
  check_names "$label" "$label.safetensors" "$dir/state_dict.json" "$label-ckpt" || fail "exported $label names"
done
# Export's errors: another extension or .onnx from a .cir model (exit 2), a checkpoint of another model (exit 1).
export_error() {  # WANT_STATUS PATTERN ARGS...
  local want=$1 pattern=$2 status=0
  shift 2
  "$cleave" export "$@" >/dev/null 2>export.err || status=$?
  [[ $status -eq $want ]] && grep -q "^cleave: error: .*$pattern" export.err ||
    fail "cleave export $*: exit $status (want $want): $(cat export.err)"
}
export_error 2 "export writes FILE.safetensors or FILE.onnx" gpt2-tp2pp2.cplan --checkpoint-dir gpt2-tp2pp2-local -o w.txt
export_error 2 "was compiled from 'mlp.cir'" mlp-one.cplan --checkpoint-dir mlp-dp2tp2-local -o w.onnx
export_error 1 "has weight 'model.lm_head.weight' that mlp-one.cplan does not" mlp-one.cplan \
  --checkpoint-dir gpt2-tp2pp2-local -o w.safetensors
export_error 1 "no checkpoint in 'nowhere'" mlp-one.cplan --checkpoint-dir nowhere -o w.safetensors

torch_python=${CLEAVE_TORCH_PYTHON:-}
if [[ -n $torch_python ]]; then  # a venv of tests/fixtures/requirements-modern.txt
  "$torch_python" - "$source_dir/tests/fixtures" <<'PY' || fail "PyTorch loading the exported weights"
import sys, numpy as np, torch, safetensors.torch
sys.path.insert(0, sys.argv[1])
import make_onnx, make_modern_onnx
for label, model in [("mlp", make_onnx.Mlp()), ("train_cnn", make_onnx.TrainCnn()),
                     ("resnet_bn_train_legacy17", make_modern_onnx.build("resnet_bn_train")[0])]:
    model.load_state_dict(safetensors.torch.load_file(f"{label}.safetensors"), strict=True)
gpt2 = make_modern_onnx.build("gpt2")[0]
safetensors.torch.load_model(gpt2, "gpt2.safetensors", strict=True)
got = gpt2(torch.from_numpy(np.load(make_modern_onnx.HERE + "/gpt2_dynamo18/inputs/input.npy"))).detach().numpy()
want = np.load("infer-one/output.npy")
worst = float(np.abs(got - want).max() / np.abs(want).max())
print(f"export: PyTorch loads all four strictly; GPT-2 gives cleave's outputs within {worst:.1e}")
sys.exit(0 if worst <= 1e-5 else 1)
PY
else
  echo "SKIP PyTorch load: set CLEAVE_TORCH_PYTHON to a python with torch, transformers, safetensors"
fi

# 3. Safety. Pruning after a crashed save: checkpoint-6 complete, checkpoint-7 without its manifest
#    and a temporary file; a resume from 6 that saves at 9 keeps 9 and 6 and removes the rest.
"$cleave" run mlp-one.cplan --data fashion-mnist --progress never --steps 6 --checkpoint-dir crashed >/dev/null
cp -r crashed/checkpoint-6 crashed/checkpoint-7
rm crashed/checkpoint-7/manifest.json
touch crashed/checkpoint-7/.tmp-rank-0.safetensors-123-0 crashed/.tmp-latest-123-1
"$cleave" run mlp-one.cplan --data fashion-mnist --progress never --steps 9 --checkpoint-every 9 \
  --checkpoint-dir crashed --resume >/dev/null
kept=$(cd crashed && echo $(ls -a | grep -v '^\.\.\?$'))
[[ $kept == "checkpoint-6 checkpoint-9 latest" ]] || fail "pruning after a crashed save kept: $kept"

# SIGTERM and SIGINT: the run stops after its step with a checkpoint, says so, exits 143 / 130;
# resumed, it ends bitwise where a straight run ends.
"$cleave" compile mlp.cir --batch 16 --train -o stop.cplan >/dev/null
stop_run=(run stop.cplan --data synthetic --seed 3 --threads 1 --progress never)
for signal in TERM INT; do
  rm -rf "stop-$signal"
  "$cleave" "${stop_run[@]}" --steps 1000000 --checkpoint-dir "stop-$signal" --metrics "stop-$signal.jsonl" \
    2>"stop-$signal.err" >/dev/null &
  pid=$!
  for ((wait = 0; wait < 600; wait++)); do
    [[ -s stop-$signal.jsonl ]] && break
    sleep 0.05
  done
  kill -s "$signal" "$pid"
  status=0
  wait "$pid" || status=$?
  want=$([[ $signal == TERM ]] && echo 143 || echo 130)
  step=$(sed -E 's|^checkpoint-([0-9]+)/manifest\.json$|\1|' "stop-$signal/latest" 2>/dev/null || echo none)
  [[ $status -eq $want ]] && grep -q "stopped by SIG$signal after step $step; checkpoint: stop-$signal/checkpoint-$step" \
    "stop-$signal.err" || fail "SIG$signal: exit $status (want $want), checkpoint step $step: $(cat "stop-$signal.err")"
  "$cleave" "${stop_run[@]}" --steps $((step + 2)) --checkpoint-dir "stop-$signal" --resume >/dev/null
  "$cleave" "${stop_run[@]}" --steps $((step + 2)) --checkpoint-dir "straight-$signal" >/dev/null
  cmp -s "stop-$signal/checkpoint-$((step + 2))/rank-0.safetensors" \
    "straight-$signal/checkpoint-$((step + 2))/rank-0.safetensors" ||
    fail "SIG$signal: the resumed run does not end where a straight run ends"
  echo "SIG$signal: stopped after step $step with exit $status and a checkpoint; resumed bitwise"
done
# Stops at random points of a step, 12 in a row: each exits 128 + the signal. A handler that ran on
# the thread running the kernels corrupted the heap in about 1 stop in 10 (a crash at exit, 139);
# the signals now go to a thread of their own (runtime/train/stop_signals.h).
bad_stops=()
for round in $(seq 12); do
  signal=$( ((round % 2)) && echo TERM || echo INT)
  rm -f stops.jsonl
  "$cleave" "${stop_run[@]}" --steps 1000000 --metrics stops.jsonl 2>stops.err >/dev/null &
  pid=$!
  for ((wait = 0; wait < 600; wait++)); do
    [[ -s stops.jsonl ]] && break
    sleep 0.05
  done
  sleep "0.$((RANDOM % 10))"
  kill -s "$signal" "$pid"
  status=0
  wait "$pid" || status=$?
  [[ $status -eq $([[ $signal == TERM ]] && echo 143 || echo 130) ]] || bad_stops+=("SIG$signal: exit $status")
done
((${#bad_stops[@]} == 0)) || fail "stops at random points: ${bad_stops[*]}"
echo "12 stops at random points of a step: each exited 128 + the signal"

# NaN in the training data: the file and the row.
mkdir -p nan-data
$python -c "
import numpy as np
x = np.random.default_rng(0).random((32, 784), dtype=np.float32); x[21, 5] = np.nan
np.save('nan-data/x.npy', x); np.save('nan-data/labels.npy', np.zeros(32, dtype=np.int64))"
status=0
"$cleave" run stop.cplan --data npy:nan-data --steps 1 2>nan.err >/dev/null || status=$?
[[ $status -eq 1 ]] && grep -q "nan-data/x.npy': row 21 holds NaN (element 5 of the row)" nan.err ||
  fail "NaN in the data: exit $status: $(cat nan.err)"

# 4. Elastic restart: a 4-process dp run that checkpoints every step loses rank 2 (kill -9); every
#    rank ends; the run restarts on 2 processes under a dp2 plan from the last checkpoint and
#    reaches the losses of an uninterrupted run.
"$cleave" compile mlp.cir --batch 16 --train --optimizer sgd:lr=0.05,momentum=0.9 --dp 4 -o elastic-dp4.cplan >/dev/null
"$cleave" compile mlp.cir --batch 16 --train --optimizer sgd:lr=0.05,momentum=0.9 --dp 2 -o elastic-dp2.cplan >/dev/null
elastic_run=(--backend mpi --data fashion-mnist --threads 1 --progress never --timeout 10)
"${mpi[@]}" -np 4 "$cleave" run elastic-dp4.cplan "${elastic_run[@]}" --steps 100000 --checkpoint-every 1 \
  --checkpoint-dir elastic --metrics elastic.jsonl >elastic.log 2>&1 &
launcher=$!
for ((wait = 0; wait < 600; wait++)); do
  [[ -f elastic.jsonl && $(wc -l <elastic.jsonl) -ge 20 ]] && break
  sleep 0.05
done
victim=
for pid in $(pgrep -f "elastic-dp4.cplan" || true); do
  if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=2'; then victim=$pid; fi
done
if [[ -z $victim ]]; then
  fail "elastic: no process of rank 2 found"
  kill "$launcher" 2>/dev/null || true
else
  kill -9 "$victim"
  status=0
  timeout 60 tail --pid="$launcher" -f /dev/null || fail "elastic: the job did not end within 60 s of the kill"
  wait "$launcher" || status=$?
  [[ $status -ne 0 ]] || fail "elastic: the job exited 0 after a rank was killed"
  grep -q "rank 2" elastic.log || fail "elastic: no rank names rank 2: $(tail -5 elastic.log)"
  last=$(sed -E 's|^checkpoint-([0-9]+)/manifest\.json$|\1|' elastic/latest)
  total=$((last + 10))
  "${mpi[@]}" -np 2 "$cleave" run elastic-dp2.cplan "${elastic_run[@]}" --steps "$total" --checkpoint-dir elastic \
    --metrics elastic.jsonl --resume >restart.log 2>&1 || fail "elastic: the restart on 2 processes failed: $(tail -3 restart.log)"
  "$cleave" run elastic-dp4.cplan --data fashion-mnist --threads 1 --progress never --steps "$total" \
    --metrics uninterrupted.jsonl >/dev/null
  close_losses "elastic: 4 processes to step $last, rank 2 killed (exit $status), restarted on 2 to step $total" \
    uninterrupted.jsonl elastic.jsonl || fail "elastic: the restarted run leaves the uninterrupted losses"
fi

[[ $failed -eq 0 ]] && echo "checkpoints.sh: all checks passed"
exit $failed
