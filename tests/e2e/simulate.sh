#!/usr/bin/env bash
# End-to-end test of the cost model's commands: simulate (text, JSON, timeline, clusters by name
# and file), calibrate, and compile --strategy auto with what inspect shows of its choice.
# Usage: bash simulate.sh PATH_TO_cleave SOURCE_DIR
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

# 1. simulate a dp plan: text, JSON figures that agree with each other, a timeline.
expect 0 "$cleave" compile "$source_dir/examples/mlp.cir" --train --dp 2 -o "$tmp/dp.cplan"
expect 0 "$cleave" simulate "$tmp/dp.cplan" --cluster cpu-local
contains out '^predicted step time of train: [0-9.]+ (us|ms|s)$'
contains out '^throughput: [0-9.]+ samples/s \(global batch 128\)$'
contains out 'MFU [0-9.]+% of 2 x '
contains out '^memory per device: largest .* \(fits\)$'
expect 0 "$cleave" simulate "$tmp/dp.cplan" --cluster cpu-local --json --timeline "$tmp/trace.json"
cp "$tmp/out" "$tmp/cpu.json"
expect 0 "$cleave" simulate "$tmp/dp.cplan" --cluster h100x8 --json
cp "$tmp/out" "$tmp/h100.json"
$python - "$tmp/cpu.json" "$tmp/h100.json" "$tmp/trace.json" <<'PY' || fail "simulate's JSON or timeline is wrong"
import json, sys
cpu, h100, trace = (json.load(open(p)) for p in sys.argv[1:4])
for key in ("plan", "cluster", "devices", "program", "global_batch", "step_time_s", "samples_per_s",
            "model_flops", "mfu", "peak_flops_per_device", "memory_limit_bytes", "max_memory_bytes",
            "fits_memory", "ranks"):
    assert key in cpu, key
assert cpu["cluster"] == "cpu-local" and h100["cluster"] == "h100x8"
assert cpu["program"] == "train" and cpu["devices"] == 2 and len(cpu["ranks"]) == 2
assert cpu["step_time_s"] > 0
assert abs(cpu["samples_per_s"] * cpu["step_time_s"] - 128) < 1e-6 * 128
# MFU: model FLOPs per second over 2 devices' peak.
assert abs(cpu["mfu"] - cpu["model_flops"] / cpu["step_time_s"] / (2 * cpu["peak_flops_per_device"])) < 1e-9
assert 0 < cpu["mfu"] <= 1
# The same plan's FLOPs on another cluster; an H100 is faster than a CPU core.
assert cpu["model_flops"] == h100["model_flops"]
assert h100["step_time_s"] < cpu["step_time_s"] / 10
assert h100["peak_flops_per_device"] == 67e12
assert all(r["end_s"] <= cpu["step_time_s"] + 1e-12 for r in cpu["ranks"])
assert trace["otherData"]["step_time_s"] == cpu["step_time_s"]
assert {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"} == {0, 1}
PY

# 2. Clusters from files; errors name the file and key; multi-host names.
cat >"$tmp/lab.json" <<'JSON'
{"name": "lab", "hosts": 2, "devices_per_host": 1,
 "device": {"peak_flops": {"f32": 1e12}, "memory_bandwidth": 1e11, "memory_bytes": 1e9},
 "intra_host": {"bandwidth": 1e10, "latency": 1e-6}, "inter_host": {"bandwidth": 1e8, "latency": 1e-5}}
JSON
expect 0 "$cleave" simulate "$tmp/dp.cplan" --cluster "$tmp/lab.json" --json
$python -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['cluster']=='lab' and d['peak_flops_per_device']==1e12" "$tmp/out" ||
  fail "the file's cluster was not used"
echo '{"name": "bad", "device": {"peak_flops": {"f32": "fast"}}}' >"$tmp/bad.json"
expect 1 "$cleave" simulate "$tmp/dp.cplan" --cluster "$tmp/bad.json"
contains err "bad\.json: device\.peak_flops\.f32: must be a number"
expect 1 "$cleave" simulate "$tmp/dp.cplan" --cluster h100x8x0
contains err 'host count'
expect 0 "$cleave" simulate "$tmp/dp.cplan" --cluster h100x8x128
contains out '^cluster h100x8x128: 128 host\(s\) x 8 '
expect 2 "$cleave" simulate "$tmp/dp.cplan"
expect 0 "$cleave" inspect "$tmp/dp.cplan" --cluster a100x8
contains out 'cost model: a100x8'

# 3. calibrate writes a spec simulate reads back.
expect 0 "$cleave" calibrate -o "$tmp/local.json" --seconds 0.02
contains out "^wrote .*local\.json: [0-9]+ device\(s\) of one core each$"
contains out 'kernel efficiency'
$python - "$tmp/local.json" <<'PY' || fail "calibrate's spec is wrong"
import json, sys
spec = json.load(open(sys.argv[1]))
device = spec["device"]
assert spec["name"] == "cpu-local" and spec["hosts"] == 1 and spec["devices_per_host"] >= 1
assert 1e8 < device["peak_flops"]["f32"] < 1e13, device["peak_flops"]
assert 1e8 < device["memory_bandwidth"] < 1e13
assert device["memory_bytes"] > 0 and device["kernel_overhead_s"] > 0
assert "matmul" in device["kernel_efficiency"]
assert spec["intra_host"]["bandwidth"] > 0 and spec["intra_host"]["latency"] > 0
PY
expect 0 "$cleave" simulate "$tmp/dp.cplan" --cluster "$tmp/local.json"
contains out 'cpu core \(calibrated\)'

# 4. compile --strategy auto: the choice, the rejected alternatives in the plan, a plan that runs.
expect 0 "$cleave" compile "$source_dir/examples/mlp.cir" --train --strategy auto --devices 4 -o "$tmp/auto.cplan"
contains out '^strategy auto on cpu-local: dp [0-9]+ x tp [0-9]+ x pp [0-9]+, '
contains out '^  rejected: '
contains out '^predicted step time on cpu-local: '
expect 0 "$cleave" inspect "$tmp/auto.cplan"
contains out '^strategy chosen by --strategy auto for cpu-local: '
contains out '^rejected alternatives +predicted +memory +why$'
contains out ' slower$'
expect 0 "$cleave" inspect "$tmp/auto.cplan" --json
$python - "$tmp/out" <<'PY' || fail "inspect --json lacks the search"
import json, sys
plan = json.load(open(sys.argv[1]))
strategy = plan["strategy"]
search = strategy["search"]
chosen = search["chosen"]
assert plan["devices"] == 4 and strategy["dp"] * strategy["tp"] * strategy["pp"] == 4
assert (chosen["dp"], chosen["tp"], chosen["pp"], chosen["microbatches"], chosen["schedule"]) == \
       (strategy["dp"], strategy["tp"], strategy["pp"], strategy["microbatches"], strategy["schedule"])
assert search["cluster"] == "cpu-local" and len(search["alternatives"]) >= 1
for alternative in search["alternatives"]:
    assert alternative["predicted_step_time_s"] >= chosen["predicted_step_time_s"] or alternative["note"] != "slower"
PY
expect 0 "$cleave" run "$tmp/auto.cplan" --data synthetic --steps 2
contains out '^trained steps 0\.\.2 '

# A GPT on 2 GPUs of a host, and usage errors.
expect 0 "$cleave" gen gpt --layers 2 --hidden 64 --heads 4 --seq 16 --vocab 128 --batch 8 -o "$tmp/gpt.cir"
expect 0 "$cleave" compile "$tmp/gpt.cir" --train --optimizer adamw --strategy auto --devices 2 --cluster h100x8 -o "$tmp/gpt.cplan"
contains out '^strategy auto on h100x8: '
expect 2 "$cleave" compile "$source_dir/examples/mlp.cir" --train --strategy auto --devices 4 --dp 2 -o "$tmp/x.cplan"
contains err 'give only --devices'
expect 1 "$cleave" compile "$source_dir/examples/mlp.cir" --train --strategy auto --devices 2 --cluster nowhere -o "$tmp/x.cplan"
contains err "unknown cluster 'nowhere'"

echo "simulate e2e: ok"
