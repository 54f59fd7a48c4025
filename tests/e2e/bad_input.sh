#!/usr/bin/env bash
# Bad input never crashes cleave: truncated and corrupt models (.cir, .onnx), an unsupported opset,
# mismatched shapes, a batch that does not split, a plan over the device memory limit, truncated
# and corrupt plans or another format version, missing, corrupt and mis-shaped data files and
# checkpoints, labels out of range, flags out of range. Each gets exit 1 (bad input) or 2 (usage) and a
# one- or two-line message naming what is wrong and where; a usage error's second line points at
# --help (docs/errors.md).
# Usage: bash bad_input.sh PATH_TO_cleave SOURCE_DIR   (VERBOSE=1 prints every command and its message)
set -euo pipefail

cleave=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
source_dir=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python=/usr/bin/python3
failed=0
checks=0
cd "$tmp"

fail() {
  echo "FAIL: $*"
  failed=1
}

# expect CODE PATTERN COMMAND...: COMMAND must exit CODE, and for an error print one or two lines
# on stderr, the first 'cleave: error: ' followed by a match of the extended regex PATTERN.
expect() {
  local want=$1 pattern=$2 got=0
  shift 2
  checks=$((checks + 1))
  "$@" >out 2>err || got=$?
  if [[ $got -ne $want ]]; then
    fail "'$*' exited $got, expected $want; stderr: $(head -c 600 err)"
  elif [[ $want -ne 0 ]]; then
    if ! head -n 1 err | grep -Eq -e "^cleave: error: .*$pattern"; then
      fail "'$*': stderr does not match /cleave: error: .*$pattern/: $(head -c 600 err)"
    elif [[ $(wc -l <err) -gt 2 ]]; then
      fail "'$*': the error takes $(wc -l <err) lines: $(head -c 600 err)"
    fi
  fi
  [[ ${VERBOSE:-0} == 0 ]] || echo "exit $got: ${*#"$cleave" }: $(head -n 2 err)"
}

# expect_usage COMMAND_PATH PATTERN COMMAND...: exit 2, the error line matching PATTERN (at most 200
# characters), then exactly the line pointing at the command's --help (docs/errors.md).
expect_usage() {
  local command_path=$1
  shift
  expect 2 "$@"
  if [[ $(sed -n 2p err) != "Run '$command_path --help' for usage." ]]; then
    fail "'${*:2}': the second line is not the --help line of '$command_path': $(head -c 600 err)"
  elif [[ $(head -n 1 err | wc -c) -gt 201 ]]; then
    fail "'${*:2}': the error line is $(head -n 1 err | wc -c) characters long: $(head -n 1 err)"
  fi
}

# expect_bad_input PATTERN COMMAND...: exit 1 (for inputs whose exact message depends on where the
# damage falls: truncations, flipped bytes).
expect_bad_input() { expect 1 "$@"; }

# A small model, a plan of it, data for it.
"$cleave" gen mlp --input 8 --hidden 16 --classes 4 --batch 8 -o mlp.cir
"$cleave" compile mlp.cir --train -o train.cplan >/dev/null
"$cleave" compile mlp.cir -o infer.cplan >/dev/null
mkdir -p data inputs
$python - <<'PY'
import numpy as np
rng = np.random.default_rng(0)
np.save("data/x.npy", rng.random((32, 8), dtype=np.float32))
np.save("data/labels.npy", rng.integers(0, 4, size=32, dtype=np.int64))
np.save("inputs/x.npy", rng.random((8, 8), dtype=np.float32))
PY
expect 0 '' "$cleave" run train.cplan --data npy:data --steps 2 --progress never

# 1. Truncated and corrupt text IR: every cut is a parse error at file:line:col.
size=$(wc -c <mlp.cir)
for cut in 0 1 10 40 100 $((size / 2)) $((size - 30)) $((size - 2)); do
  head -c "$cut" mlp.cir >cut.cir
  expect_bad_input "cut\.cir(:[0-9]+:[0-9]+)?: " "$cleave" compile cut.cir -o cut.cplan
done
head -c 3000 /dev/urandom >garbage.cir
expect_bad_input 'garbage\.cir:[0-9]+:[0-9]+: ' "$cleave" inspect garbage.cir
printf 'graph @g {\n  input %%x : f32[4,8]\n  param %%w : f32[16,4] = zeros\n  %%y = matmul(%%x, %%w) : f32[4,4]\n  output %%y\n}\n' >shapes.cir
expect_bad_input 'shapes\.cir:4:3: .*matmul' "$cleave" compile shapes.cir -o shapes.cplan
printf 'graph @g {\n  input %%x : f32[4,8]\n  %%y = relu(%%x) : f32[4,9]\n  output %%y\n}\n' >declared.cir
expect_bad_input 'declared\.cir:3:3: .*f32\[4,9\]' "$cleave" compile declared.cir -o declared.cplan
printf 'graph @g {\n  input %%x : f32[4611686018427387904,4]\n  output %%x\n}\n' >huge.cir
expect_bad_input 'huge\.cir:2:[0-9]+: .*too large' "$cleave" inspect huge.cir

# 2. ONNX: truncated at any length, bytes flipped anywhere, an unsupported opset, mismatched shapes.
onnx_model=$source_dir/tests/fixtures/ops13/model.onnx
size=$(wc -c <"$onnx_model")
for cut in 0 5 50 500 $((size / 2)) $((size - 100)) $((size - 1)); do
  head -c "$cut" "$onnx_model" >cut.onnx
  expect_bad_input "cut\.onnx" "$cleave" import cut.onnx -o cut.cir
done
for seed in 1 2 3 4 5 6 7 8; do
  $python - "$onnx_model" "flip$seed.onnx" "$seed" <<'PY'
import random, sys
data = bytearray(open(sys.argv[1], "rb").read())
rng = random.Random(int(sys.argv[3]))
for _ in range(8):
    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
open(sys.argv[2], "wb").write(data)
PY
  # A flip may land in a weight's value and leave a valid model; anything else is bad input.
  code=0
  "$cleave" import "flip$seed.onnx" -o "flip$seed.cir" >out 2>err || code=$?
  checks=$((checks + 1))
  if [[ $code -ne 0 && $code -ne 1 ]] || { [[ $code -eq 1 ]] && ! grep -q "^cleave: error: .*flip$seed\.onnx" err; }; then
    fail "import of flip$seed.onnx exited $code: $(head -c 600 err)"
  fi
done
$python - <<'PY'
from onnx import TensorProto, helper
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
def model(weight_dims, opset, name):
    w = helper.make_tensor("w", TensorProto.FLOAT, weight_dims, [0.5] * (weight_dims[0] * weight_dims[1]))
    b = helper.make_tensor("b", TensorProto.FLOAT, [3], [0.0, 1.0, 2.0])
    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1, name="fc")
    graph = helper.make_graph([node], "g", [x], [y], [w, b])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    open(name, "wb").write(m.SerializeToString())
model([3, 4], 13, "gemm13.onnx")
model([3, 4], 18, "gemm18.onnx")
model([3, 4], 28, "gemm28.onnx")
model([3, 4], 29, "gemm29.onnx")
model([3, 4], 9, "gemm9.onnx")
model([3, 5], 13, "mismatch.onnx")
# Opset 18 and newer go without libonnx's schema check: a node short of inputs, a local function that
# calls itself.
short = helper.make_graph([helper.make_node("Gemm", ["x"], ["y"], name="fc")], "g", [x], [y])
open("short18.onnx", "wb").write(helper.make_model(short, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
loop = helper.make_function("local", "Loop1", ["a"], ["b"], [helper.make_node("Loop1", ["a"], ["b"], domain="local")],
                            [helper.make_opsetid("", 18)])
calls = helper.make_graph([helper.make_node("Loop1", ["x"], ["y"], domain="local", name="call")], "g", [x], [y])
recursive = helper.make_model(calls, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("local", 1)],
                              functions=[loop])
open("recursive18.onnx", "wb").write(recursive.SerializeToString())
# ONNX's Attention (opset 23) on 3-D inputs without the head counts it needs to split them.
q = helper.make_tensor_value_info("q", TensorProto.FLOAT, [2, 4, 8])
out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4, 8])
attention = helper.make_graph([helper.make_node("Attention", ["q", "q", "q"], ["out"], name="sdpa")], "g", [q], [out])
open("attention23.onnx", "wb").write(helper.make_model(attention, opset_imports=[helper.make_opsetid("", 23)]).SerializeToString())
# Opset 24's nonpad_kv_seqlen (a cache outside the operator) given with past keys (one inside it).
q4 = helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 2, 3, 4])
past = helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, 2, 5, 4])
lengths = helper.make_tensor_value_info("n", TensorProto.INT64, [1])
out4 = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2, 3, 4])
both = helper.make_graph([helper.make_node("Attention", ["q", "q", "q", "", "past", "past", "n"], ["out"], name="sdpa")],
                         "g", [q4, past, lengths], [out4])
open("attention24.onnx", "wb").write(helper.make_model(both, opset_imports=[helper.make_opsetid("", 24)]).SerializeToString())
# TensorScatter along the batch dim.
cache = helper.make_tensor_value_info("cache", TensorProto.FLOAT, [2, 8, 4])
scatter = helper.make_graph([helper.make_node("TensorScatter", ["cache", "cache"], ["out"], name="kv", axis=0)],
                            "g", [cache], [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 8, 4])])
open("scatter24.onnx", "wb").write(helper.make_model(scatter, opset_imports=[helper.make_opsetid("", 24)]).SerializeToString())
PY
expect 0 '' "$cleave" import gemm13.onnx -o gemm13.cir
expect 0 '' "$cleave" import gemm9.onnx -o gemm9.cir  # upgraded by libonnx's version converter
expect 0 '' "$cleave" import gemm18.onnx -o gemm18.cir  # checked by cleave's own rules (libonnx knows up to 17)
expect 0 '' "$cleave" import gemm28.onnx -o gemm28.cir  # the newest opset cleave imports
expect 1 'gemm29\.onnx: ONNX opset 29 is not supported \(cleave imports opsets 11 to 28' \
  "$cleave" import gemm29.onnx -o gemm29.cir
expect 1 "attention24\.onnx \(node 'sdpa'\): Attention: nonpad_kv_seqlen cannot be given with past_key and past_value" \
  "$cleave" import attention24.onnx -o attention24.cir
expect 1 "scatter24\.onnx \(node 'kv'\): TensorScatter: axis must name a dim of f32\[2,8,4\] other than the batch" \
  "$cleave" import scatter24.onnx -o scatter24.cir
expect 1 "mismatch\.onnx \(node 'fc'\): gemm: operand 1 has shape \[3,5\]" "$cleave" compile mismatch.onnx -o mismatch.cplan
expect 1 "short18\.onnx \(node 'fc'\): Gemm: malformed node \(1 inputs, 1 outputs\)" "$cleave" import short18.onnx -o short.cir
expect 1 "recursive18\.onnx \(node 'call/Loop1'\): local function 'Loop1' calls itself" "$cleave" import recursive18.onnx -o rec.cir
expect 1 "attention23\.onnx \(node 'sdpa'\): Attention: a 3-D input of f32\[2,4,8\] needs q_num_heads and kv_num_heads" \
  "$cleave" import attention23.onnx -o attention.cir

# 3. Batches that do not split over data-parallel shards or microbatches (batch 8).
expect 1 "input '%x' has batch 8, which does not divide into 3 data-parallel shards" \
  "$cleave" compile mlp.cir --dp 3 -o bad.cplan
expect 1 'batch 8 does not divide into 1 data-parallel shards x 3 microbatches' \
  "$cleave" compile mlp.cir --pp 2 --microbatches 3 -o bad.cplan
expect 1 'batch 8 does not divide into 2 data-parallel shards x 3 microbatches' \
  "$cleave" compile mlp.cir --dp 2 --pp 2 --microbatches 3 --train -o bad.cplan
expect 2 'microbatches' "$cleave" compile mlp.cir --microbatches 0 -o bad.cplan
# A batch mean used with the rows (BatchNorm's centring): microbatches would each compute it from
# their own rows, so they are an error; --dp computes it over the whole batch, also where it crosses
# a pipeline stage ([1,16], which the stage boundary carries whole), and trains as one device does.
cat >statistic.cir <<'CIR'
graph @batch_statistic {
  input %x : f32[8,16]
  param %w1 : f32[16,16] = uniform {high = 0.3, low = -0.3, seed = 1}
  param %w2 : f32[16,16] = uniform {high = 0.3, low = -0.3, seed = 2}
  param %w3 : f32[16,10] = uniform {high = 0.3, low = -0.3, seed = 3}
  %h1 = matmul(%x, %w1) : f32[8,16]
  %m = reduce_mean(%h1) {axes = [0], keepdims = 1} : f32[1,16]
  %c1 = sub(%h1, %m) : f32[8,16]
  %r1 = relu(%c1) : f32[8,16]
  %h2 = matmul(%r1, %w2) : f32[8,16]
  %s2 = add(%h2, %m) : f32[8,16]
  %r2 = relu(%s2) : f32[8,16]
  %logits = matmul(%r2, %w3) : f32[8,10]
  output %logits
}
CIR
expect 1 "statistic\.cir: --microbatches 2: statistic\.cir:7:3: reduce_mean '%m': computed across the batch rows, and statistic\.cir:8:3: sub '%c1': uses it with them" \
  "$cleave" compile statistic.cir --train --pp 2 --microbatches 2 -o bad.cplan
for layout in one:"" dp2xpp2:"--dp 2 --pp 2"; do
  name=${layout%%:*}
  expect 0 '' "$cleave" compile statistic.cir --train --optimizer sgd:lr=0.1 ${layout#*:} -o "statistic_$name.cplan"
  "$cleave" run "statistic_$name.cplan" --data synthetic --steps 3 --seed 7 --metrics "statistic_$name.jsonl" \
    --progress never >/dev/null 2>&1 || fail "statistic.cir $name: run failed"
done
checks=$((checks + 1))
"$python" "$source_dir/tests/e2e/same_losses.py" "statistic dp2xpp2" statistic_one.jsonl statistic_dp2xpp2.jsonl 1e-6 >/dev/null ||
  fail "statistic.cir under --dp 2 --pp 2 does not train as one device"

# 4. A plan over the device memory limit is rejected at compile time with the numbers.
"$cleave" gen mlp --hidden 512,512 --batch 64 -o wide.cir
expect 0 '' "$cleave" compile wide.cir --train --memory-limit 1GB -o wide.cplan
expect 1 'wide\.cir: the plan needs [0-9]+ bytes \([0-9.]+ MiB: parameters [0-9.]+ MiB, optimizer state [0-9.]+ MiB, gradients and activations [0-9.]+ MiB\), over the memory limit of 4000000 bytes \(3\.81 MiB\) per device' \
  "$cleave" compile wide.cir --train --optimizer adamw:lr=1e-3 --memory-limit 4MB -o wide.cplan
expect 1 'wide\.cir: rank [01] \(the fullest of 2 ranks over the limit\) needs [0-9]+ bytes .* over the memory limit of 4194304 bytes \(4\.00 MiB\)' \
  "$cleave" compile wide.cir --train --dp 2 --memory-limit 4MiB -o wide.cplan
expect 1 "no split of graph 'mlp' into 2 stages fits the memory limit of 1000000 bytes per device" \
  "$cleave" compile wide.cir --train --pp 2 --microbatches 2 --memory-limit 1000000 -o wide.cplan
[[ ! -e wide-over.cplan ]] || fail "a plan over the memory limit was written"
expect 2 'memory-limit' "$cleave" compile wide.cir --memory-limit plenty -o wide.cplan

# 5. Plans: missing, truncated at any length, not a plan, another format version, flipped bytes.
expect 1 'missing\.cplan: cannot open plan file' "$cleave" run missing.cplan --data synthetic --steps 1
size=$(wc -c <train.cplan)
for cut in 0 4 8 9 20 $((size / 3)) $((size / 2)) $((size - 10)) $((size - 1)); do
  head -c "$cut" train.cplan >cut.cplan
  expect_bad_input 'cut\.cplan' "$cleave" run cut.cplan --data synthetic --steps 1
  expect_bad_input 'cut\.cplan' "$cleave" inspect cut.cplan
done
cp mlp.cir not-a-plan.cplan
expect 1 'not-a-plan\.cplan: not a cleave plan' "$cleave" run not-a-plan.cplan --data synthetic --steps 1
$python - <<'PY'
data = bytearray(open("train.cplan", "rb").read())
assert data[:10] == b"CLVPLAN\n\x08\x01", data[:10]  # the magic, then format_version = 1
data[9] = 2
open("version2.cplan", "wb").write(data)
PY
expect 1 'version2\.cplan was written by format version 2; this cleave reads version 1' \
  "$cleave" run version2.cplan --data synthetic --steps 1
for seed in 1 2 3 4 5 6 7 8 9 10; do
  $python - "$seed" <<'PY'
import random, sys
data = bytearray(open("train.cplan", "rb").read())
rng = random.Random(int(sys.argv[1]))
for _ in range(4):
    data[rng.randrange(10, len(data))] ^= 1 << rng.randrange(8)
open("flip.cplan", "wb").write(data)
PY
  # A flip may hit a name or a number that still makes a valid plan; otherwise it is bad input.
  for command in "run flip.cplan --data synthetic --steps 2 --progress never" "inspect flip.cplan"; do
    code=0
    # shellcheck disable=SC2086
    "$cleave" $command >out 2>err || code=$?
    checks=$((checks + 1))
    if [[ $code -ne 0 && $code -ne 1 ]] || { [[ $code -eq 1 ]] && ! grep -q '^cleave: error: ' err; }; then
      fail "'cleave $command' (flips with seed $seed) exited $code: $(head -c 600 err)"
    fi
  done
done

# 6. Data files: missing, mis-shaped, another dtype, truncated, too few rows, labels out of range.
expect 1 "missing/x\.npy" "$cleave" run train.cplan --data npy:missing --steps 1
mkdir -p d1 d2 d3 d4 d5 d6
$python - <<'PY'
import numpy as np
x = np.random.default_rng(0).random((32, 8), dtype=np.float32)
labels = np.zeros(32, np.int64)
np.save("d1/x.npy", x)                                   # d1: no labels.npy
np.save("d2/x.npy", x.reshape(32, 2, 4)); np.save("d2/labels.npy", labels)
np.save("d3/x.npy", x.astype(np.float64)); np.save("d3/labels.npy", labels)
np.save("d4/x.npy", x); np.save("d4/labels.npy", labels[:4])
np.save("d5/x.npy", x); np.save("d5/labels.npy", labels)
open("d5/x.npy", "r+b").truncate(200)
np.save("d6/x.npy", x[:4]); np.save("d6/labels.npy", labels[:4])
PY
expect 1 "d1/labels\.npy" "$cleave" run train.cplan --data npy:d1 --steps 1
expect 1 "d2/x\.npy.*f32\[32,2,4\]" "$cleave" run train.cplan --data npy:d2 --steps 1
expect 1 "d3/x\.npy.*f64" "$cleave" run train.cplan --data npy:d3 --steps 1
expect 1 "d4/labels\.npy.*(4|32)" "$cleave" run train.cplan --data npy:d4 --steps 1
expect 1 "d5/x\.npy.*truncated data" "$cleave" run train.cplan --data npy:d5 --steps 1
expect 1 "d6/x\.npy.*(rows|batch)" "$cleave" run train.cplan --data npy:d6 --steps 1
expect 1 "missing/x\.npy" "$cleave" run infer.cplan --inputs missing --outputs out
cp data/x.npy inputs/x.npy
expect 1 "inputs/x\.npy.*f32\[32,8\].*f32\[8,8\]" "$cleave" run infer.cplan --inputs inputs --outputs out

# Fashion-MNIST (IDX) files: a missing folder, truncated and corrupt gzip files, other image sizes.
expect 1 "images need a float input of 784" "$cleave" run train.cplan --data fashion-mnist --steps 1
"$cleave" gen mlp --input 784 --hidden 16 --batch 4 -o fashion.cir
"$cleave" compile fashion.cir --train -o fashion.cplan >/dev/null
expect 1 "no-such-folder" "$cleave" run fashion.cplan --data fashion-mnist:no-such-folder --steps 1
mkdir -p idx-cut idx-corrupt idx-size
$python - <<'PY'
import gzip, struct
def idx(dims, fill=0):
    count = 1
    for d in dims:
        count *= d
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + bytes([fill]) * count
for folder, images, labels in [("idx-cut", idx([8, 28, 28]), idx([8])), ("idx-corrupt", idx([8, 28, 28]), idx([8])),
                               ("idx-size", idx([8, 27, 27]), idx([8]))]:
    for split, count in [("train", 8), ("t10k", 8)]:
        image_bytes, label_bytes = gzip.compress(images), gzip.compress(labels)
        if folder == "idx-cut":
            image_bytes = image_bytes[: len(image_bytes) // 2]
        if folder == "idx-corrupt":
            image_bytes = image_bytes[:20] + bytes(b ^ 0x5A for b in image_bytes[20:40]) + image_bytes[40:]
        open(f"{folder}/{split}-images-idx3-ubyte.gz", "wb").write(image_bytes)
        open(f"{folder}/{split}-labels-idx1-ubyte.gz", "wb").write(label_bytes)
PY
expect 1 "idx-cut/train-images-idx3-ubyte\.gz" "$cleave" run fashion.cplan --data fashion-mnist:idx-cut --steps 1
expect 1 "idx-corrupt/train-images-idx3-ubyte\.gz" "$cleave" run fashion.cplan --data fashion-mnist:idx-corrupt --steps 1
expect 1 "idx-size/train-images-idx3-ubyte\.gz.*27" "$cleave" run fashion.cplan --data fashion-mnist:idx-size --steps 1

# 7. Checkpoints: truncated, corrupt, damaged in one byte (its CRC-32), naming a missing file, from
#    another model, or none at all.
"$cleave" run train.cplan --data npy:data --steps 2 --checkpoint-dir ckpt --progress never >/dev/null
shard=checkpoint-2/rank-0.safetensors
size=$(wc -c <"ckpt/$shard")
cp -r ckpt ckpt-cut
head -c $((size / 2)) "ckpt/$shard" >"ckpt-cut/$shard"
expect 1 "ckpt-cut/checkpoint-2/rank-0\.safetensors" "$cleave" run train.cplan --data npy:data --steps 3 --checkpoint-dir ckpt-cut --resume
cp -r ckpt ckpt-garbage
head -c "$size" /dev/urandom >"ckpt-garbage/$shard"
expect 1 "ckpt-garbage/checkpoint-2/rank-0\.safetensors" "$cleave" run train.cplan --data npy:data --steps 3 --checkpoint-dir ckpt-garbage --resume
cp -r ckpt ckpt-flipped
$python - "ckpt-flipped/$shard" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
data[-5] ^= 0x40  # one bit of the last tensor's data
open(sys.argv[1], "wb").write(data)
PY
expect 1 "ckpt-flipped/checkpoint-2/rank-0\.safetensors': tensor '.*' is corrupt \(CRC-32" "$cleave" run train.cplan --data npy:data --steps 3 --checkpoint-dir ckpt-flipped --resume
cp -r ckpt ckpt-missing
rm "ckpt-missing/$shard"
expect 1 "ckpt-missing/checkpoint-2/rank-0\.safetensors" "$cleave" run train.cplan --data npy:data --steps 3 --checkpoint-dir ckpt-missing --resume
cp -r ckpt ckpt-no-manifest
rm ckpt-no-manifest/checkpoint-2/manifest.json
expect 1 "ckpt-no-manifest/checkpoint-2/manifest\.json" "$cleave" run train.cplan --data npy:data --steps 3 --checkpoint-dir ckpt-no-manifest --resume
"$cleave" gen mlp --input 8 --hidden 32 --classes 4 --batch 8 -o other.cir
"$cleave" compile other.cir --train -o other.cplan >/dev/null
expect 1 "ckpt/checkpoint-2/manifest\.json" "$cleave" run other.cplan --data npy:data --steps 3 --checkpoint-dir ckpt --resume
expect 1 "--resume: no checkpoint in 'empty-ckpt'" "$cleave" run train.cplan --data npy:data --steps 3 --checkpoint-dir empty-ckpt --resume
# Steps count from the start of training: a resumed run asked for no more steps than the checkpoint has
# done trains nothing, which is a usage error (it used to print "final loss nan" and exit 0).
expect_usage "cleave run" "--steps 2 leaves nothing to train: the checkpoint 'ckpt/checkpoint-2' is at step 2 already" \
  "$cleave" run train.cplan --data npy:data --steps 2 --checkpoint-dir ckpt --resume
expect_usage "cleave run" "--steps 1 leaves nothing to train" \
  "$cleave" run train.cplan --data npy:data --steps 1 --checkpoint-dir ckpt --resume

# 8. Usage errors, CLI11's and cleave's own, are one short line and the --help line.
expect_usage "cleave compile" "--dp: must be a whole number of at least 1, not -2$" "$cleave" compile mlp.cir --dp -2 -o bad.cplan
expect_usage "cleave compile" "--tp: expected a whole number of at least 1, not '2x'$" "$cleave" compile mlp.cir --tp 2x -o bad.cplan
expect_usage "cleave run" "--timeout: must be a number above 0, not -1$" "$cleave" run train.cplan --data synthetic --steps 1 --timeout -1
expect_usage "cleave run" "--threads: must be a whole number of at least 0, not -3$" "$cleave" run train.cplan --data synthetic --steps 1 --threads -3
expect_usage "cleave compile" "--strategy auto chooses --dp" "$cleave" compile mlp.cir --strategy auto --devices 2 --dp 2 -o bad.cplan
expect_usage "cleave run" "--resume needs --checkpoint-dir" "$cleave" run train.cplan --data synthetic --steps 1 --resume
expect_usage "cleave gen" "'cleave gen' needs a subcommand" "$cleave" gen
expect_usage "cleave run" "CLEAVE_INJECT_FAULT='fail:7:2' names rank 7, but the plan has 1 rank \\(0\\)" \
  env CLEAVE_INJECT_FAULT=fail:7:2 "$cleave" run train.cplan --data synthetic --steps 1

# 9. Labels and token ids outside what the model takes name the data file and its row.
mkdir -p bad-labels
$python - <<'PY'
import numpy as np
np.save("bad-labels/x.npy", np.zeros((32, 8), np.float32))
labels = np.zeros(32, np.int64)
labels[21] = 4  # the model has 4 classes: 0..3
np.save("bad-labels/labels.npy", labels)
PY
expect 1 "'bad-labels/labels\.npy': row 21 holds 4, outside \[0, 4\) for input 'labels'$" \
  "$cleave" run train.cplan --data npy:bad-labels --steps 1
expect 1 "'bad-labels/labels\.npy': row 21 holds 4" \
  "$cleave" run train.cplan --data npy:data --eval-data npy:bad-labels --steps 1

[[ $failed -eq 0 ]] && echo "bad_input.sh: all $checks checks passed"
exit $failed
