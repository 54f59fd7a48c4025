#!/usr/bin/env bash
# Where a plan's GPU time goes: runs STEPS training steps of PLAN on GPU 0 under Nsight Compute
# (ncu, one metric: each kernel's duration; ncu runs kernels one at a time, so launch gaps and
# overlap are not counted) and prints, per kernel name, its launches and microseconds per step,
# largest first, with the sum of all kernels per step. (A `cleave run --trace` of a GPU run shows
# launch times, not kernel times.)
# Usage: tools/gpu_profile.sh PLAN [STEPS [TOP]]
#   env: CLEAVE=the cleave to run (build/tools/cleave), CSV=where to keep ncu's raw csv
set -euo pipefail
plan=$1
steps=${2:-2}
top=${3:-12}
cleave=${CLEAVE:-build/tools/cleave}
command -v ncu >/dev/null || { echo "gpu_profile: ncu (Nsight Compute) is not on the PATH" >&2; exit 1; }
csv=${CSV:-$(mktemp)}
ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$csv" \
  "$cleave" run "$plan" --device cuda --data synthetic --steps "$steps" --progress never >/dev/null
python3 - "$csv" "$steps" "$top" <<'PY'
import collections, csv, sys
path, steps, top = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lines = open(path).read().splitlines()
start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
time_us = collections.Counter()
calls = collections.Counter()
for row in csv.DictReader(lines[start:]):
    if row["Metric Name"] != "gpu__time_duration.sum":
        continue
    value = float(row["Metric Value"].replace(",", ""))
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6,
             "second": 1e6}[row["Metric Unit"]]
    name = row["Kernel Name"].split("(")[0][:70]
    time_us[name] += value * scale
    calls[name] += 1
total = sum(time_us.values())
print(f"{sum(calls.values()) / steps:.0f} kernels, {total / steps:.0f} us of kernel time per step")
print(f"{'us/step':>9} {'share':>6} {'calls/step':>10}  kernel")
for name, us in time_us.most_common(top):
    print(f"{us / steps:9.1f} {us / total:6.1%} {calls[name] / steps:10.1f}  {name}")
PY
