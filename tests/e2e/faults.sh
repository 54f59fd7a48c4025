#!/usr/bin/env bash
# Faults on the local backend: kill -9 of a run that checkpoints every step, at random moments and
# while a checkpoint file is being written, always leaves a checkpoint that resumes, and the
# resumed runs end bitwise where a straight run ends; a rank that fails, or hangs for good (CLEAVE_INJECT_FAULT),
# ends the run with exit 3 naming it within two timeouts, whether the other ranks wait for it in a
# collective, in a receive, or not at all.
# Usage: bash faults.sh PATH_TO_cleave SOURCE_DIR
set -euo pipefail

cleave=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python=/usr/bin/python3
failed=0
fail() {
  echo "FAIL $*"
  failed=1
}
cd "$tmp"

# 1. kill -9 during checkpoint saves. A 1.9M-parameter mlp with momentum writes a 15 MB
#    checkpoint (with fsync) every step, so a save takes most of each step's time; a kill that
#    leaves a temporary file behind landed while a checkpoint file was being written.
"$cleave" gen mlp --input 784 --hidden 1024,1024 --classes 10 --batch 4 -o big.cir
"$cleave" compile big.cir --train --optimizer sgd:lr=0.01,momentum=0.9 -o big.cplan >/dev/null
train=(run big.cplan --data synthetic --seed 5 --threads 1 --progress never)
"$cleave" "${train[@]}" --steps 2 --checkpoint-every 1 --checkpoint-dir chain >/dev/null
latest_step() { sed -E 's|^checkpoint-([0-9]+)/manifest\.json$|\1|' chain/latest; }
# At least 8 kills, and on until 3 have landed inside a save (at most 30 kills).
kills=0
mid_save=0
while [[ ($mid_save -lt 3 || $kills -lt 8) && $kills -lt 30 ]]; do
  kills=$((kills + 1))
  rm -f steps.jsonl
  "$cleave" "${train[@]}" --resume --steps 1000000 --checkpoint-every 1 --checkpoint-dir chain \
    --metrics steps.jsonl >/dev/null 2>&1 &
  pid=$!
  # Once it trains (a step is logged), kill it: on odd kills at a random moment of the next 50 ms,
  # on even ones as soon as a checkpoint's temporary file appears (while it is being written).
  for ((wait = 0; wait < 600; wait++)); do
    [[ -s steps.jsonl ]] && break
    sleep 0.05
  done
  if ((kills % 2)); then
    sleep "$($python -c "import random; print(random.uniform(0, 0.05))")"
  else
    for ((wait = 0; wait < 20000; wait++)); do
      compgen -G "chain/checkpoint-*/.tmp-rank-*-$pid-*" >/dev/null && break
    done
  fi
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  # A temporary file of this run left behind means the kill landed while a file was being written.
  compgen -G "chain/checkpoint-*/.tmp-*-$pid-*" >/dev/null && mid_save=$((mid_save + 1))
  step=$(latest_step)
  [[ -f chain/checkpoint-$step/manifest.json ]] || fail "kill $kills: latest names checkpoint-$step, which has no manifest"
  # The checkpoint `latest` names must load: resume it for one more step.
  if ! "$cleave" "${train[@]}" --resume --steps $((step + 1)) --checkpoint-dir chain >resume.log 2>&1; then
    fail "kill $kills: resuming from step $step failed: $(cat resume.log)"
    break
  fi
done
[[ $mid_save -ge 3 ]] || fail "only $mid_save of $kills kills landed inside a checkpoint save"
# The chain of killed and resumed runs ends bitwise where a straight run of as many steps ends.
final=$(latest_step)
"$cleave" "${train[@]}" --steps "$final" --checkpoint-dir straight >/dev/null
cmp -s "chain/checkpoint-$final/rank-0.safetensors" "straight/checkpoint-$final/rank-0.safetensors" ||
  fail "killed and resumed runs do not end where a straight run ends (step $final)"
# Saves since the last kill pruned what the crashed saves left: no temporary file, no folder without
# its manifest, and the two newest complete checkpoints.
[[ -z $(find chain -name '.tmp-*') ]] || fail "crashed saves' temporary files are left: $(find chain -name '.tmp-*')"
for folder in chain/checkpoint-*; do
  [[ -f $folder/manifest.json ]] || fail "$folder (a crashed save) was not pruned"
done
[[ $(ls -d chain/checkpoint-* | wc -l) -eq 2 ]] || fail "pruning kept $(ls -d chain/checkpoint-* | tr '\n' ' ')"
echo "checkpoints: $kills kills ($mid_save inside a save), every checkpoint resumed, step $final bitwise as a straight run"

# 2. A rank that fails or hangs. expect_dead LABEL RANK_NAMED PATTERN COMMAND...: the command must
#    exit 3 within two timeouts (plus start-up), with one error line matching PATTERN.
timeout_s=2
expect_dead() {
  local label=$1 pattern=$2
  shift 2
  local start end code=0
  start=$(date +%s.%N)
  timeout 60 "$@" >dead.out 2>dead.err || code=$?
  end=$(date +%s.%N)
  local seconds
  seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  if [[ $code -ne 3 ]]; then
    fail "$label: exited $code after $seconds s, expected 3: $(cat dead.err)"
  elif ! grep -Eq "^cleave: error: $pattern" dead.err || [[ $(wc -l <dead.err) -ne 1 ]]; then
    fail "$label: the error is not one line matching /$pattern/: $(cat dead.err)"
  elif ! awk -v s="$seconds" -v t="$timeout_s" 'BEGIN { exit !(s < 2 * t + 15) }'; then
    fail "$label: took $seconds s (timeout $timeout_s s)"
  else
    echo "ok   $label: exit 3 after $seconds s: $(cat dead.err)"
  fi
}
"$cleave" gen mlp --input 8 --hidden 16 --classes 4 --batch 8 -o tiny.cir
"$cleave" compile tiny.cir --train --dp 2 -o dp2.cplan >/dev/null
"$cleave" compile tiny.cir --train --pp 2 --microbatches 2 -o pp2.cplan >/dev/null
"$cleave" compile tiny.cir --dp 2 -o infer-dp2.cplan >/dev/null
mkdir -p inputs
$python -c "import numpy as np; np.save('inputs/x.npy', np.ones((8, 8), np.float32))"
run_dp2=("$cleave" run dp2.cplan --data synthetic --steps 20 --threads 2 --progress never --timeout "$timeout_s")
run_pp2=("$cleave" run pp2.cplan --data synthetic --steps 20 --threads 2 --progress never --timeout "$timeout_s")
CLEAVE_INJECT_FAULT=fail:1:3 expect_dead "dp2, rank 1 fails" \
  'rank 1: failed at program run 3' "${run_dp2[@]}"
CLEAVE_INJECT_FAULT=hang:1:3 expect_dead "dp2, rank 1 hangs: the all-reduce times out" \
  "rank 0: .*all_reduce over ranks \{0,1\} timed out after $timeout_s s waiting for rank 1" "${run_dp2[@]}"
CLEAVE_INJECT_FAULT=hang:0:2 expect_dead "pp2, stage 0 hangs: the receive times out" \
  "rank 1: .*recv from rank 0 \(tag [0-9]+\) timed out after $timeout_s s waiting for rank 0" "${run_pp2[@]}"
CLEAVE_INJECT_FAULT=hang:1:2 expect_dead "pp2, stage 1 hangs: the gradient receive times out" \
  "rank 0: .*recv from rank 1 \(tag [0-9]+\) timed out after $timeout_s s waiting for rank 1" "${run_pp2[@]}"
CLEAVE_INJECT_FAULT=hang:1:1 expect_dead "dp2 inference (no communication), rank 1 hangs" \
  "rank 1 had not finished $timeout_s s after the first rank did" \
  "$cleave" run infer-dp2.cplan --inputs inputs --outputs outputs --timeout "$timeout_s"
# The heartbeat: a rank kept waiting names the stalled rank and what it runs within --heartbeat
# seconds, again at twice and four times as long, then the timeout ends the run.
code=0
CLEAVE_INJECT_FAULT=hang:1:3 timeout 60 "$cleave" run dp2.cplan --data synthetic --steps 20 --threads 2 --progress never \
  --heartbeat 1 --timeout 5 >/dev/null 2>stall.err || code=$?
[[ $code -eq 3 ]] || fail "heartbeat: exited $code: $(cat stall.err)"
[[ $(grep -c "^cleave: warning: rank 0 has waited [124] s for rank 1 in all_reduce over ranks {0,1} (instruction [0-9]* of train (all_reduce)); rank 1 is in a hang injected by CLEAVE_INJECT_FAULT at program run 3 for [0-9.]* s$" stall.err) -eq 3 ]] ||
  fail "heartbeat: expected three warnings (after 1, 2 and 4 s) naming rank 1: $(cat stall.err)"
code=0
CLEAVE_INJECT_FAULT=hang:0:2 timeout 60 "$cleave" run pp2.cplan --data synthetic --steps 20 --threads 2 --progress never \
  --heartbeat 1 --timeout 3 >/dev/null 2>stall.err || code=$?
grep -q "^cleave: warning: rank 1 has waited 1 s for rank 0 in recv from rank 0 (tag [0-9]*) (instruction [0-9]* of train (recv from tiny.cir:[0-9:]*)); rank 0 is in a hang injected" stall.err ||
  fail "heartbeat (pp2): no warning naming rank 0: $(cat stall.err)"
echo "ok   heartbeat: $(head -n 1 stall.err)"
code=0
CLEAVE_INJECT_FAULT=fail:2:1 "$cleave" run dp2.cplan --data synthetic --steps 1 >/dev/null 2>dead.err || code=$?
[[ $code -eq 2 ]] && grep -q "CLEAVE_INJECT_FAULT='fail:2:1' names rank 2, but the plan has 2 ranks (0 to 1)" dead.err ||
  fail "a fault naming rank 2 of a 2-rank plan exited $code: $(cat dead.err)"
code=0
CLEAVE_INJECT_FAULT=sometimes "$cleave" run dp2.cplan --data synthetic --steps 1 >/dev/null 2>dead.err || code=$?
[[ $code -eq 2 ]] && grep -q "CLEAVE_INJECT_FAULT='sometimes' is not" dead.err ||
  fail "a malformed CLEAVE_INJECT_FAULT exited $code: $(cat dead.err)"

[[ $failed -eq 0 ]] && echo "faults.sh: all checks passed"
exit $failed
