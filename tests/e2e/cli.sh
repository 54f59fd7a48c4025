#!/usr/bin/env bash
# End-to-end test of the cleave CLI: exit codes, error messages, gen + inspect, examples, GPT-3 size.
# Usage: bash cli.sh PATH_TO_cleave SOURCE_DIR   (cleave-opt is expected next to cleave)
set -euo pipefail

cleave=$1
source_dir=$2
cleave_opt=$(dirname "$cleave")/cleave-opt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL: $*" >&2
  echo "--- stdout (first 20 lines):" >&2
  head -n 20 "$tmp/out" >&2 || true
  echo "--- stderr:" >&2
  cat "$tmp/err" >&2 || true
  exit 1
}

# expect CODE COMMAND...: runs COMMAND with stdout in $tmp/out and stderr in $tmp/err; fails
# unless it exits with CODE. An error (CODE > 0) must be one or two lines starting "cleave: error:".
expect() {
  local want=$1
  shift
  local got=0
  "$@" >"$tmp/out" 2>"$tmp/err" || got=$?
  [[ $got -eq $want ]] || fail "'$*' exited $got, expected $want"
  if [[ $want -ne 0 && "$(basename "$1")" == cleave ]]; then
    head -n 1 "$tmp/err" | grep -q '^cleave: error: ' || fail "'$*': stderr does not start with 'cleave: error: '"
    [[ $(wc -l <"$tmp/err") -le 2 ]] || fail "'$*': the error takes more than two lines"
  fi
}

# contains FILE PATTERN: fails unless FILE (out or err) has a line matching the extended regex.
contains() {
  grep -Eq -e "$2" "$tmp/$1" || fail "std$1 lacks /$2/"
}

# 1. Help and version exit 0; every contract flag is documented.
expect 0 "$cleave" --help
for sub in import compile inspect simulate calibrate run gen; do contains out "^  $sub "; done
expect 0 "$cleave" --version
contains out '^cleave 0\.1\.0$'
# cuBLAS (with cuBLASLt, hundreds of MiB) is loaded when a GPU is first used, never at startup.
if readelf -d "$cleave" | grep -q 'NEEDED.*libcublas'; then fail "cleave links libcublas: every process pays its load"; fi
expect 0 "$cleave" compile --help
for flag in --devices --dp --tp --pp --strategy --microbatches --schedule --batch --train --loss --optimizer --cluster; do
  contains out "(^ +|,)$flag( |$)"
done
expect 0 "$cleave" run --help
for flag in --device --backend --inputs --outputs --data --steps --epochs --eval-data --metrics --checkpoint-dir --resume --trace --seed --threads; do
  contains out "(^ +|,)$flag( |$)"
done
expect 0 "$cleave" inspect --help
for flag in --json --rank --dot --timeline --cluster; do contains out "(^ +|,)$flag( |$)"; done
expect 0 "$cleave" simulate --help
for flag in --cluster --json --timeline; do contains out "(^ +|,)$flag( |$)"; done
expect 0 "$cleave" gen gpt --help
for flag in --layers --hidden --heads --seq --vocab --batch --seed --output; do contains out "$flag"; done

# 2. Usage errors exit 2: unknown flag, no subcommand, a missing required flag, a bad choice.
expect 2 "$cleave" --no-such-flag
contains err 'not expected: --no-such-flag'
expect 2 "$cleave"
contains err 'needs a subcommand'
expect 2 "$cleave" gen
expect 2 "$cleave" inspect
expect 2 "$cleave" gen gpt --layers 2
contains err 'required'
expect 2 "$cleave" compile model.cir -o plan.cplan --schedule zigzag
expect 2 "$cleave" gen mlp --batch many

# 3. Subcommands not built yet exit 2 and name the issue that builds them; a batch that does not
#    split over the devices is bad input (exit 1) naming the input.
expect 1 "$cleave" compile "$source_dir/examples/mlp.cir" -o "$tmp/plan.cplan" --dp 3
contains err "input '%x' has batch 128, which does not divide into 3 data-parallel shards"
expect 1 "$cleave" compile "$source_dir/examples/mlp.cir" -o "$tmp/plan.cplan" --dp 2 --microbatches 3
contains err 'batch 128 does not divide into 2 data-parallel shards x 3 microbatches'
expect 1 "$cleave" simulate plan.cplan --cluster dgx-h100
contains err "unknown cluster 'dgx-h100'"
expect 2 "$cleave" compile "$source_dir/examples/mlp.cir" -o "$tmp/plan.cplan" --strategy auto
contains err '--strategy auto needs --devices N'
expect 2 "$cleave" run plan.cplan --device cuda:x
contains err "expected cpu, cuda or cuda:N, not 'cuda:x'"
expect 1 "$cleave" run plan.cplan --data synthetic --steps 1
contains err 'plan.cplan'
expect 1 "$cleave" inspect plan.cplan
contains err 'plan.cplan'

# 4. Bad input exits 1 and names the file (and line:col for a parse error).
expect 1 "$cleave" inspect "$tmp/missing.cir"
contains err 'missing\.cir'
printf 'graph @broken(%%x : f32[2]) {\n  %%y = this is not cleave ir\n}\n' >"$tmp/broken.cir"
expect 1 "$cleave" inspect "$tmp/broken.cir"
contains err 'broken\.cir:[0-9]+:[0-9]+: '
expect 1 "$cleave" inspect "$tmp/model.onnx"
contains err 'model\.onnx'
expect 1 "$cleave" import "$tmp/model.onnx" -o "$tmp/model.cir"
contains err 'model\.onnx'
expect 1 "$cleave" import "$tmp/broken.cir" -o "$tmp/model.cir"
contains err 'expected an ONNX model'
# An unsupported model gets one error listing every unsupported op type with node names and opset.
expect 1 "$cleave" import "$source_dir/tests/fixtures/unsupported/model.onnx" -o "$tmp/model.cir"
contains err 'unsupported ONNX ops at opset 13: Hardmax \(1 node: hardmax\); LRN \(2 nodes: lrn_1, lrn_2\)'
expect 1 "$cleave" gen gpt --layers 1 --hidden 100 --heads 3 --seq 8 --vocab 10 --batch 1
contains err 'multiple of heads'

# 5. gen writes a model that inspect summarizes; stdout and -o give the same text.
expect 0 "$cleave" gen mlp -o "$tmp/mlp.cir"
[[ ! -s "$tmp/out" ]] || fail "gen -o also wrote to stdout"
expect 0 "$cleave" gen mlp
cmp -s "$tmp/out" "$tmp/mlp.cir" || fail "gen mlp printed something other than what -o wrote"
expect 0 "$cleave" inspect "$tmp/mlp.cir"
contains out '669,706'
contains out 'matmul 3'
contains out 'training step'
expect 0 "$cleave" inspect --json "$tmp/mlp.cir"
python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
assert s["parameters"]["count"] == 669706, s["parameters"]
assert s["inputs"] == [{"name": "x", "type": "f32[128,784]"}], s["inputs"]
assert s["training_step"]["flops"] == 3 * s["forward"]["flops"]' "$tmp/out" || fail "inspect --json is wrong"
expect 1 "$cleave" inspect "$tmp/mlp.cir" --rank 0
expect 0 "$cleave" gen mlp --hidden 64,32 --batch 4 --seed 3
contains out 'fc3\.weight'
expect 0 "$cleave" gen cnn --batch 2
contains out 'conv2\.weight'

# 6. The committed examples are exactly what the generators print.
expect 0 "$cleave" gen mlp --batch 128
cmp -s "$tmp/out" "$source_dir/examples/mlp.cir" || fail "examples/mlp.cir differs from 'cleave gen mlp --batch 128'"
expect 0 "$cleave" gen cnn --batch 64
cmp -s "$tmp/out" "$source_dir/examples/fashion_cnn.cir" ||
  fail "examples/fashion_cnn.cir differs from 'cleave gen cnn --batch 64'"
# Every example round-trips: parse then print gives back the file byte for byte.
for example in "$source_dir"/examples/*.cir; do
  expect 0 "$cleave_opt" "$example" --passes=verify
  cmp -s "$tmp/out" "$example" || fail "$example does not round-trip through cleave-opt"
done

# 7. A GPT-3-sized graph generates, and cleave-opt parses, verifies and prints it in under 1 s.
expect 0 "$cleave" gen gpt --layers 96 --hidden 12288 --heads 96 --seq 2048 --vocab 50257 --batch 8 -o "$tmp/gpt3.cir"
start=$(date +%s.%N)
expect 0 "$cleave_opt" "$tmp/gpt3.cir" --passes=verify
end=$(date +%s.%N)
seconds=$(awk -v start="$start" -v end="$end" 'BEGIN { printf "%.3f", end - start }')
awk -v s="$seconds" 'BEGIN { exit !(s < 1.0) }' || fail "cleave-opt took $seconds s on the GPT-3 graph (limit 1 s)"
cmp -s "$tmp/out" "$tmp/gpt3.cir" || fail "cleave-opt --passes=verify did not print the GPT-3 graph back unchanged"
expect 0 "$cleave" inspect "$tmp/gpt3.cir"
contains out '175,221,817,344'

# 8. A compile that runs out of memory (address space capped at 1 GB; the plan of a 400-layer GPT
#    over dp 2 x tp 2 x pp 2 with 8 microbatches needs about 1.7 GB) is a runtime failure (exit 3)
#    that says so, and exits at once rather than hanging in the libraries' exit handlers. (At 1.5 GB,
#    near the end of the compile, one run in three fresh clones crashed with SIGSEGV instead: jemalloc
#    making an arena for a new thread found no memory; tools/allocator_tuning.h now makes them all at
#    start, tests/allocator checks it. 1.5 GB is also too close to the need: one run in 25 passed.)
expect 0 "$cleave" gen gpt --layers 400 --hidden 64 --heads 2 --seq 16 --vocab 100 --batch 32 -o "$tmp/g400.cir"
expect 3 bash -c 'ulimit -v 1000000; exec timeout 120 "$0" compile "$1" --train --dp 2 --tp 2 --pp 2 --microbatches 8 -o "$2"' \
  "$cleave" "$tmp/g400.cir" "$tmp/g400.cplan"
contains err '^cleave: error: out of memory'

echo "cli.sh: all checks passed (GPT-3 graph verified in $seconds s)"
