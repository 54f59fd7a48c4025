#!/usr/bin/env bash
# SPMD plans: the ranks of a pipeline stage share one program in the plan file
# (RankPlan.same_program_as), so a 64-rank plan of a small GPT (dp 16 x tp 2 x pp 2) holds 2 rank
# programs, is about the size of its 4-rank dp 1 plan, and trains on the local backend with one device's
# losses (with --zero 1 too); under mpirun each process derives its own rank's program. GPT-2
# imported from ONNX keeps its tp ranks apart (their weights' blocks are data).
# Usage: bash spmd.sh PATH_TO_cleave SOURCE_DIR
set -euo pipefail

cleave=$1
source_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
python=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; exit 1; }

"$cleave" gen gpt --layers 2 --hidden 32 --heads 2 --seq 8 --vocab 64 --batch 32 -o gpt.cir >/dev/null

compile() {
  local name=$1
  shift
  "$cleave" compile gpt.cir --train --optimizer sgd:lr=0.05,momentum=0.9 "$@" -o "$name.cplan" >"$name.log" 2>&1 ||
    { cat "$name.log" >&2; fail "compile $name: $*"; }
}
train() {
  local name=$1
  shift
  "$cleave" run "$name.cplan" --data synthetic --steps 4 --progress never --metrics "$name.jsonl" "$@" >"$name.run" 2>&1 ||
    { cat "$name.run" >&2; fail "run $name"; }
}
# same_losses REFERENCE RUN TOLERANCE: RUN.jsonl's losses against REFERENCE.jsonl (a run) or
# REFERENCE.json (a fixture's PyTorch losses).
same_losses() {
  local reference=$1.jsonl
  [[ -f $reference ]] || reference=$1.json
  $python "$source_dir/tests/e2e/same_losses.py" "$2" "$reference" "$2.jsonl" "$3" || fail "$2's losses differ from $1's"
}

# 1. 64 ranks: 4 programs in the file, each replica's derived when the plan is read.
compile one
compile dp1 --tp 2 --pp 2 --microbatches 2
compile dp16 --dp 16 --tp 2 --pp 2 --microbatches 2
"$cleave" inspect dp16.cplan --json >dp16.json
"$cleave" inspect dp16.cplan >dp16.txt
grep -q "SPMD: the file holds 2 distinct rank programs for 64 ranks" dp16.txt || { cat dp16.txt >&2; fail "inspect does not say the plan is shared"; }
$python - dp16.json dp16.cplan dp1.cplan <<'PY' || fail "the 64-rank plan does not share its programs"
import json, os, sys
plan = json.load(open(sys.argv[1]))
ranks = plan["ranks"]
assert plan["distinct_programs"] == 2 and len(ranks) == 64, (plan["distinct_programs"], len(ranks))
holders = {r["rank"]: r for r in ranks if r["same_program_as"] is None}
assert all(r["dp_index"] == 0 and r["tp_index"] == 0 for r in holders.values()), holders.keys()
for r in ranks:
    if r["same_program_as"] is None:
        continue
    held = holders[r["same_program_as"]]
    assert held["stage"] == r["stage"], r
    assert held["instructions"] == r["instructions"] and held["comm_bytes"] == r["comm_bytes"], r
size64, size4 = os.path.getsize(sys.argv[2]), os.path.getsize(sys.argv[3])
print(f"  64-rank plan: {size64} bytes, 2 distinct programs; its dp 1 plan (4 ranks, 2 programs): {size4} bytes")
assert size64 < 1.2 * size4, (size64, size4)
PY

# 2. The 64 ranks train with one device's losses on the local backend, with ZeRO's blocks too.
train one
train dp16 --threads 64
same_losses one dp16 1e-5
compile zero --dp 8 --tp 2 --pp 2 --microbatches 2 --zero 1
grep -q "SPMD: the file holds 2 distinct rank programs for 32 ranks" <("$cleave" inspect zero.cplan) ||
  fail "the --zero 1 plan does not share its programs"
train zero --threads 32
same_losses one zero 1e-5

# 3. GPT-2 exported from PyTorch: its weights' blocks are data of their own, so tp ranks keep their
#    programs and dp replicas share them; it trains with the same losses shared or not.
dir=$source_dir/tests/fixtures/modern/gpt2_legacy17
compile_onnx() {
  local name=$1
  shift
  "$cleave" compile "$dir/model.onnx" --train --batch "$(cat "$dir/train/batch.txt")" \
    --optimizer "$(cat "$dir/train/optimizer.txt")" "$@" -o "$name.cplan" >"$name.log" 2>&1 ||
    { cat "$name.log" >&2; fail "compile $name: $*"; }
}
compile_onnx gpt2-dp2tp2 --dp 2 --tp 2
grep -q "SPMD: the file holds 2 distinct rank programs for 4 ranks" <("$cleave" inspect gpt2-dp2tp2.cplan) ||
  fail "GPT-2 under --dp 2 --tp 2 does not hold one program per tp rank"
"$cleave" run gpt2-dp2tp2.cplan --data "npy:$dir/train" --steps 3 --progress never --metrics gpt2-dp2tp2.jsonl >gpt2.run 2>&1 ||
  { cat gpt2.run >&2; fail "run gpt2-dp2tp2"; }
same_losses "$dir/train/losses" gpt2-dp2tp2 2e-3

# 4. Under mpirun, each process derives its own rank's program from the shared one.
if command -v mpirun >/dev/null; then
  compile dp4 --dp 4
  mpirun --allow-run-as-root --oversubscribe -np 4 "$cleave" run dp4.cplan --backend mpi --threads 1 \
    --data synthetic --steps 4 --progress never --metrics dp4-mpi.jsonl >mpi.log 2>&1 ||
    { cat mpi.log >&2; fail "mpirun of the shared plan"; }
  same_losses one dp4-mpi 1e-5
fi
echo "spmd: ok"
