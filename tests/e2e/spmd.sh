#!/usr/bin/env bash
# SPMD plans: data-parallel replicas share one program in the plan file (RankPlan.same_program_as),
# so a 64-rank plan of a small GPT (dp 16 x tp 2 x pp 2) holds 4 rank programs, is about the size
# of its dp 1 plan, and trains on the local backend with one device's losses; under mpirun each
# process derives its own rank's program.
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
same_losses() { $python "$source_dir/tests/e2e/same_losses.py" "$2" "$1.jsonl" "$2.jsonl" "$3" || fail "$2's losses differ from $1's"; }

# 1. 64 ranks: 4 programs in the file, each replica's derived when the plan is read.
compile one
compile dp1 --tp 2 --pp 2 --microbatches 2
compile dp16 --dp 16 --tp 2 --pp 2 --microbatches 2
"$cleave" inspect dp16.cplan --json >dp16.json
"$cleave" inspect dp16.cplan >dp16.txt
grep -q "SPMD: the file holds 4 distinct rank programs for 64 ranks" dp16.txt || { cat dp16.txt >&2; fail "inspect does not say the plan is shared"; }
$python - dp16.json dp16.cplan dp1.cplan <<'PY' || fail "the 64-rank plan does not share its programs"
import json, os, sys
plan = json.load(open(sys.argv[1]))
ranks = plan["ranks"]
assert plan["distinct_programs"] == 4 and len(ranks) == 64, (plan["distinct_programs"], len(ranks))
holders = {r["rank"]: r for r in ranks if r["same_program_as"] is None}
assert all(r["dp_index"] == 0 for r in holders.values()), holders.keys()
for r in ranks:
    if r["same_program_as"] is None:
        continue
    held = holders[r["same_program_as"]]
    assert (held["stage"], held["tp_index"]) == (r["stage"], r["tp_index"]), r
    assert held["instructions"] == r["instructions"] and held["comm_bytes"] == r["comm_bytes"], r
size64, size4 = os.path.getsize(sys.argv[2]), os.path.getsize(sys.argv[3])
print(f"  64-rank plan: {size64} bytes, 4 distinct programs; its dp 1 plan (4 ranks): {size4} bytes")
assert size64 < 1.2 * size4, (size64, size4)
PY

# 2. The 64 ranks train with one device's losses on the local backend.
train one
train dp16 --threads 64
same_losses one dp16 1e-5

# 3. Under mpirun, each process derives its own rank's program from the shared one.
if command -v mpirun >/dev/null; then
  compile dp4 --dp 4
  mpirun --allow-run-as-root --oversubscribe -np 4 "$cleave" run dp4.cplan --backend mpi --threads 1 \
    --data synthetic --steps 4 --progress never --metrics dp4-mpi.jsonl >mpi.log 2>&1 ||
    { cat mpi.log >&2; fail "mpirun of the shared plan"; }
  same_losses one dp4-mpi 1e-5
fi
echo "spmd: ok"
