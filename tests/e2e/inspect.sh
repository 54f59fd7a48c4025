#!/usr/bin/env bash
# End-to-end test of `cleave inspect PLAN`: tables, JSON keys and hand counts, --rank, --dot, --timeline.
# Usage: bash inspect.sh PATH_TO_cleave SOURCE_DIR
set -euo pipefail

cleave=$1
source_dir=$2
python=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL: $*" >&2
  echo "--- stdout (first 30 lines):" >&2
  head -n 30 "$tmp/out" >&2 || true
  echo "--- stderr:" >&2
  cat "$tmp/err" >&2 || true
  exit 1
}

# expect CODE COMMAND...: runs COMMAND with stdout in $tmp/out and stderr in $tmp/err; fails unless it exits CODE.
expect() {
  local want=$1
  shift
  local got=0
  "$@" >"$tmp/out" 2>"$tmp/err" || got=$?
  [[ $got -eq $want ]] || fail "'$*' exited $got, expected $want"
}

contains() {
  grep -Eq -e "$2" "$tmp/$1" || fail "std$1 lacks /$2/"
}

# check_files PLAN: --dot-detail full has one cluster per rank and balanced braces; the summary
# (the default) one cluster per stage and at most a few nodes per microbatch; --timeline is a Chrome trace
# with one complete event per instruction of the main program on every rank.
check_files() {
  local plan=$1
  expect 0 "$cleave" inspect "$plan" --json --dot "$tmp/plan.dot" --dot-detail full --timeline "$tmp/trace.json"
  cp "$tmp/out" "$tmp/inspect.json"
  expect 0 "$cleave" inspect "$plan" --dot "$tmp/summary.dot"
  $python - "$tmp/inspect.json" "$tmp/plan.dot" "$tmp/trace.json" "$tmp/summary.dot" <<'PY' || fail "--dot or --timeline of $plan is wrong"
import json, re, sys
report = json.load(open(sys.argv[1]))
dot = open(sys.argv[2]).read()
trace = json.load(open(sys.argv[3]))
ranks = report["ranks"]
assert dot.startswith("digraph plan {"), dot[:40]
clusters = re.findall(r"subgraph cluster_rank(\d+) \{", dot)
assert sorted(map(int, clusters)) == [r["rank"] for r in ranks], clusters
assert dot.count("{") == dot.count("}")
summary = open(sys.argv[4]).read()
stages = re.findall(r"subgraph cluster_stage(\d+) \{", summary)
assert sorted(map(int, stages)) == sorted({r["stage"] for r in ranks}), stages
phases = len(re.findall(r"\n    s\d+_\d+ \[label=", summary))
microbatches = report["strategy"]["microbatches"]
assert 1 <= phases <= len(stages) * (2 * microbatches + 3), (phases, len(stages), microbatches)
assert summary.count("{") == summary.count("}")
events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
program = report["program"]
for r in ranks:
    mine = [e for e in events if e["pid"] == r["rank"]]
    count = next(p["instructions"] for p in r["programs"] if p["name"] == program)
    assert len(mine) == count, (r["rank"], len(mine), count)
    assert all(e["tid"] in (0, 1) and e["dur"] >= 0 for e in mine)
    end_us = max(e["ts"] + e["dur"] for e in mine)
    assert abs(end_us * 1e-6 - r["predicted_step_time_s"]) <= 1e-6 + 1e-3 * end_us * 1e-6, (end_us, r)
assert abs(trace["otherData"]["step_time_s"] - report["predicted_step_time_s"]) <= 1e-12
PY
}

# 1. A one-device training plan of the mlp: every figure against a hand count.
expect 0 "$cleave" compile "$source_dir/examples/mlp.cir" --train --batch 32 -o "$tmp/mlp.cplan"
expect 0 "$cleave" inspect "$tmp/mlp.cplan"
contains out '^predicted step time of train: [0-9.]+ (us|ms|s) \(cost model: cpu-local\)'
contains out '^rank +stage +dp +tp +instructions +peak +params +grads +optimizer +activations'
contains out '^0 +0 +0 +0 +[0-9]+ +[0-9.]+ MiB +2\.55 MiB'
contains out '^rank +all_reduce +all_gather +reduce_scatter +all_to_all +send +recv +total +finishes at'
expect 0 "$cleave" inspect "$tmp/mlp.cplan" --json
cp "$tmp/out" "$tmp/mlp.json"
$python - "$tmp/mlp.json" <<'PY' || fail "inspect --json of the mlp plan is wrong"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["devices"] == 1, s["devices"]
assert set(s["strategy"]) >= {"dp", "tp", "pp", "microbatches", "schedule"}, s["strategy"]
assert s["program"] == "train" and s["cluster"] == "cpu-local"
assert s["predicted_step_time_s"] > 0
[rank] = s["ranks"]
for key in ["rank", "stage", "instructions", "peak_memory_bytes", "param_bytes", "comm_bytes", "grad_bytes",
            "optimizer_state_bytes", "activation_bytes", "comm_bytes_by_kind", "predicted_step_time_s"]:
    assert key in rank, key
params = 512 * 784 + 512 + 512 * 512 + 512 + 10 * 512 + 10  # 669,706 weights, f32
assert rank["param_bytes"] == 4 * params, rank["param_bytes"]
assert rank["optimizer_state_bytes"] == 8, rank  # plain SGD keeps only its i64 step counter
assert rank["comm_bytes"] == 0 and set(rank["comm_bytes_by_kind"].values()) == {0}, rank
assert sorted(rank["comm_bytes_by_kind"]) == sorted(
    ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "recv"])
assert 0 < rank["grad_bytes"] <= 4 * params, rank
assert rank["activation_bytes"] > 0
assert rank["peak_memory_bytes"] >= rank["param_bytes"] + rank["grad_bytes"] + rank["activation_bytes"]
assert rank["predicted_step_time_s"] == s["predicted_step_time_s"]
PY
check_files "$tmp/mlp.cplan"

# 2. --rank names one of the plan's ranks; an absent one is bad input.
expect 0 "$cleave" inspect "$tmp/mlp.cplan" --rank 0
contains out '^0 +0 +0 +0 '
expect 1 "$cleave" inspect "$tmp/mlp.cplan" --rank 3
contains err '^cleave: error: --rank 3: .*mlp\.cplan has ranks 0\.\.0'
# An output file that cannot be written is named.
expect 1 "$cleave" inspect "$tmp/mlp.cplan" --dot "$tmp/no/such/dir/plan.dot"
contains err 'plan\.dot'

# 3. Data parallel: every rank all-reduces the gradients; ring all-reduce moves 2(n-1)/n of them.
for dp in 2 4; do
  expect 0 "$cleave" compile "$source_dir/examples/mlp.cir" --train --batch 32 --dp $dp -o "$tmp/dp.cplan"
  expect 0 "$cleave" inspect "$tmp/dp.cplan" --json
  cp "$tmp/out" "$tmp/dp.json"
  $python - "$tmp/dp.json" "$dp" <<'PY' || fail "inspect of the dp=$dp mlp plan is wrong"
import json, sys
s, n = json.load(open(sys.argv[1])), int(sys.argv[2])
assert s["devices"] == n and s["strategy"]["dp"] == n, s["strategy"]
grads = 4 * (512 * 784 + 512 + 512 * 512 + 512 + 10 * 512 + 10)
assert len(s["ranks"]) == n
for r in s["ranks"]:
    assert r["param_bytes"] == grads, r  # replicated weights
    # The gradient buckets, plus at most a few scalars (the loss's global mean) in all-reduces.
    moved = r["comm_bytes_by_kind"]["all_reduce"]
    expected = 2 * (n - 1) / n * grads
    assert expected <= moved <= expected + 2 * (n - 1) / n * 64, (r["rank"], moved, expected)
    assert r["predicted_step_time_s"] > 0
PY
  check_files "$tmp/dp.cplan"
done

# 4. Pipeline: each microbatch's activation goes forward and its gradient back, [B/M, 512] f32 each
#    way (every cut of the mlp between fc1 and fc3 crosses one hidden layer).
expect 0 "$cleave" compile "$source_dir/examples/mlp.cir" --train --batch 32 --pp 2 --microbatches 4 -o "$tmp/pp.cplan"
expect 0 "$cleave" inspect "$tmp/pp.cplan" --json
cp "$tmp/out" "$tmp/pp.json"
$python - "$tmp/pp.json" <<'PY' || fail "inspect of the pp=2 mlp plan is wrong"
import json, sys
s = json.load(open(sys.argv[1]))
assert [r["stage"] for r in s["ranks"]] == [0, 1], s["ranks"]
per_microbatch = (32 // 4) * 512 * 4
for r in s["ranks"]:
    kinds = r["comm_bytes_by_kind"]
    assert kinds["send"] == kinds["recv"] == 4 * per_microbatch, (r["rank"], kinds)
    assert kinds["all_reduce"] == 0, kinds
PY
check_files "$tmp/pp.cplan"

# 5. Tensor parallel: each split weight holds 1/T of its elements per rank. The mlp (784 -> 512 ->
#    512 -> 10) splits fc1 by columns (weight and bias), fc2 by rows (its bias stays whole) and fc3
#    by columns when T divides its 10 outputs; the row split's partial sums are all-reduced.
for tp in 2 4; do
  expect 0 "$cleave" compile "$source_dir/examples/mlp.cir" --train --batch 32 --tp $tp -o "$tmp/tp.cplan"
  expect 0 "$cleave" inspect "$tmp/tp.cplan" --json
  cp "$tmp/out" "$tmp/tp.json"
  $python - "$tmp/tp.json" "$tp" <<'PY' || fail "inspect of the tp=$tp mlp plan is wrong"
import json, sys
s, t = json.load(open(sys.argv[1])), int(sys.argv[2])
fc3 = (10 * 512 + 10) // t if 10 % t == 0 else 10 * 512 + 10
elements = (512 * 784 + 512) // t + 512 * 512 // t + 512 + fc3
for r in s["ranks"]:
    assert r["param_bytes"] == 4 * elements, (r["rank"], r["param_bytes"], 4 * elements)
    assert r["comm_bytes_by_kind"]["all_reduce"] > 0, r
PY
done
echo "inspect: all checks passed"
