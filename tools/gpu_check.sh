#!/usr/bin/env bash
# The GPU check: builds cleave (Release, with CUDA) into build/, runs the GPU tests, trains
# fashion_cnn on the GPU through the CLI and compares its first losses with the CPU's, trains the GPT
# fused and unfused, measures GEMM-bound training TFLOP/s against the device's fp32 peak and
# fashion_cnn and gpt training throughput against PyTorch on the same GPU (when torch sees it),
# --precision bf16 against f32 on the MLP and the GPT, and prints one summary table.
# Every section runs even when an earlier one failed (a first run on a new GPU should tell all it
# can), each cleave command runs under a time limit (a hang fails its section), and the check exits
# non-zero when any section failed. Without a GPU it builds, runs the (skipping) GPU tests, reports
# "no GPU: GPU tests skipped" and exits 0. Budget: under 8 minutes on one H200.
# Usage: tools/gpu_check.sh
#   env: BUILD=build folder, JOBS=build jobs, PEAK_TFLOPS=fp32 peak (67), PYTHON=interpreter
#        (/usr/bin/python3), CMD_TIMEOUT=seconds per cleave command (240), TEST_TIMEOUT=seconds
#        per GPU test (300),
#        LOG_DIR=a folder to keep the check's logs and metrics in (LOG_DIR/gpu_check_work.tar.gz),
#        BUNDLE=a folder made by tools/gpu_bundle.sh: nothing is built, the bundle's cleave and
#        cleave_gpu_tests run (for GPU machines without Debian's -dev packages, which cannot build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
jobs=${JOBS:-$(nproc)}
python=${PYTHON:-/usr/bin/python3}
limit=${CMD_TIMEOUT:-240}
test_limit=${TEST_TIMEOUT:-300}
work=$(mktemp -d)
summary=$work/summary  # rows of the summary table: "check|result|detail"
: >"$summary"
status=0
row() { echo "$1|$2|$3" >>"$summary"; }
print_summary() {
  [ -s "$summary" ] || return 0
  echo
  echo "== summary"
  printf '%-34s %-10s %s\n' check result detail
  while IFS='|' read -r check result detail; do
    printf '%-34s %-10s %s\n' "$check" "$result" "$detail"
  done <"$summary"
}
keep_logs() {
  [ -n "${LOG_DIR:-}" ] || return 0
  tar -C "$work" -czf "$LOG_DIR/gpu_check_work.tar.gz" --exclude='*.cplan' --exclude=wide_data --exclude=bin --exclude=lib . || true
}
trap 'print_summary; keep_logs; rm -rf "$work"' EXIT
# fail MESSAGE: records the failure and ends the section (or, outside one, the check).
fail() { echo "gpu_check: FAILED: $*" >&2; row "${section_name:-setup}" FAILED "$*"; exit 1; }
# section NAME FUNCTION: runs FUNCTION in a subshell that stops at its first failing command; a
# failure is recorded and the next section still runs.
section() {
  local name=$1 rc
  shift
  echo "-- $name ($(date +%T))"
  set +e
  (
    set -e
    section_name=$name
    "$@"
  )
  rc=$?
  set -e
  if [ "$rc" != 0 ]; then
    status=1
    grep -q "^$name|FAILED" "$summary" || row "$name" FAILED "exit status $rc$([ "$rc" = 124 ] && echo " (over ${limit} s)") (log above)"
  fi
}

if [ -n "${BUNDLE:-}" ]; then
  # 1. A bundle: binaries and their libraries from the machine that built them; CUDA's own
  #    libraries (cuBLAS, NCCL) are this machine's, wherever its toolkit or PyTorch keeps them
  #    (cleave loads cuBLAS with dlopen at first GPU use: the CublasLibrary test checks it is found).
  echo "== bundle $BUNDLE (nothing built here)"
  tar -C "$work" -xJf "$BUNDLE/cleave.tar.xz" 2>/dev/null ||  # without xz, Python's lzma
    $python -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$BUNDLE/cleave.tar.xz" "$work"
  cuda_dirs=$(find /usr/local/cuda/lib64 /usr/local/cuda/targets /usr/lib/x86_64-linux-gnu /opt /usr/local/lib \
    \( -name libnccl.so.2 -o -name libcublas.so.13 -o -name libcublasLt.so.13 \) 2>/dev/null | xargs -r -n1 dirname | awk '!seen[$0]++' | paste -sd: -)
  export LD_LIBRARY_PATH=$work/lib${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  cleave_bin=$work/bin/cleave
  gpu_tests=$work/bin/cleave_gpu_tests
  op_gpu_tests=$work/bin/cleave_op_gpu_tests
  if ldd "$cleave_bin" "$gpu_tests" "$op_gpu_tests" | grep 'not found'; then fail "libraries not found (above)"; fi
  row bundle ok "$(basename "$BUNDLE"): $(cat "$BUNDLE/built-from" 2>/dev/null || echo '?')"
else
  # 1. Build (Release; the CUDA path is built whenever nvcc is found).
  echo "== build ($build, Release)"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" 2>&1 ||
    { cat "$work/configure.log" >&2; fail "cmake configure"; }
  if ! grep -q "building the CUDA path" "$work/configure.log"; then
    if nvidia-smi -L >/dev/null 2>&1; then fail "this machine has a GPU but CMake found no nvcc (set CUDACXX)"; fi
    cmake --build "$build" -j "$jobs" --target cleave
    echo "no GPU: GPU tests skipped (no nvcc either: cleave was built without CUDA)"
    exit 0
  fi
  cmake --build "$build" -j "$jobs" --target cleave cleave_gpu_tests cleave_op_gpu_tests
  row build ok "Release, CUDA path built"
  cleave_bin=$build/tools/cleave
  gpu_tests=$build/tests/gpu/cleave_gpu_tests
  op_gpu_tests=$build/tests/ops/cleave_op_gpu_tests
fi
cleave() { timeout "$limit" "$cleave_bin" "$@"; }

# 2. Is there a GPU? nvidia-smi lists one per line ("GPU 0: NVIDIA H200 (UUID: ...)").
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null || true

# 3. The GPU tests (a bundle has no ctest files, so the executables list them): cleave_gpu_tests'
#    each in a process of its own (a crash or a broken CUDA context stays with its test), then the
#    op harness's cases on CUDA in one process (ctest's label gpu holds the same tests). On a GPU
#    machine a skip fails the check, unless the test says it needs more GPUs than the machine has.
echo "== GPU tests ($gpu_tests, $op_gpu_tests)"
tests=$("$gpu_tests" --gtest_list_tests | awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }')
failed_tests=()
for test in $tests; do
  test_status=0
  timeout "$test_limit" "$gpu_tests" --gtest_filter="$test" >"$work/test.log" 2>&1 || test_status=$?
  cat "$work/test.log" >>"$work/gpu_tests.log"
  grep -E '^\[ *(OK|FAILED|SKIPPED) *\] [A-Za-z]' "$work/test.log" | head -n 1 || true
  if [ "$test_status" != 0 ]; then
    failed_tests+=("$test")
    grep -q '^\[  FAILED  \]' "$work/test.log" || echo "[  FAILED  ] $test: exit status $test_status"
  fi
done
harness_status=0
timeout "$test_limit" "$op_gpu_tests" --gtest_filter='-CudaOpHarnessPerf.*' >"$work/test.log" 2>&1 || harness_status=$?
cat "$work/test.log" >>"$work/gpu_tests.log"
grep -E '^\[ *(FAILED|SKIPPED|PASSED) *\] [0-9]+ test' "$work/test.log" | head -n 3 || true
[ "$harness_status" = 0 ] || failed_tests+=("cleave_op_gpu_tests (exit status $harness_status)")
# One line a test, "[  SKIPPED ] Suite.Test (0 ms)" (gtest's closing list repeats the name alone).
skipped=$(grep -cE '^\[  SKIPPED \] [A-Za-z].* \([0-9]+ ms\)$' "$work/gpu_tests.log" || true)
passed=$(grep -cE '^\[       OK \] [A-Za-z].* \([0-9]+ ms\)$' "$work/gpu_tests.log" || true)
if [ "$gpus" = 0 ]; then
  [ ${#failed_tests[@]} = 0 ] || { tail -n 100 "$work/gpu_tests.log"; fail "GPU tests failed without a GPU: ${failed_tests[*]}"; }
  echo "no GPU: GPU tests skipped ($skipped skipped, $passed passed)"
  exit 0
fi
gpu_tests_section() {
  if [ ${#failed_tests[@]} != 0 ]; then
    grep -B40 -E '^\[  FAILED  \] [A-Za-z]' "$work/gpu_tests.log" | head -n 300 || true
    fail "${#failed_tests[@]} GPU test(s) failed: ${failed_tests[*]} (log above)"
  fi
  local needs_more
  needs_more=$(grep -cE 'needs [0-9]+ (CUDA devices|GPUs)' "$work/gpu_tests.log" || true)
  if [ "$skipped" -gt "$needs_more" ]; then
    grep -B3 '\[  SKIPPED \]' "$work/gpu_tests.log" | head -n 40 || true
    fail "$gpus GPU(s) visible but $skipped GPU test(s) skipped ($needs_more of them need more GPUs)"
  fi
  row "GPU tests" ok "$passed passed, $skipped skipped (need more GPUs); $gpus x $gpu_name"
}
section "GPU tests" gpu_tests_section

# Mean samples/s over a metrics file's steps after the first 3 (warm-up).
mean_rate() {
  $python - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][3:]
print(f"{sum(r['samples_per_s'] for r in rows) / len(rows):.1f}")
PY
}

cnn_section() {
  # 4. fashion_cnn through the CLI: 300 steps on the GPU; its first 5 losses against the CPU's.
  echo "== cleave run fashion_cnn --device cuda (300 steps) against the CPU's first 5"
  cleave gen cnn --batch 64 -o "$work/cnn64.cir"
  cleave compile "$work/cnn64.cir" --train --optimizer sgd:lr=0.01,momentum=0.9 -o "$work/cnn64.cplan" >/dev/null
  cleave run "$work/cnn64.cplan" --device cuda --data synthetic --steps 300 --progress never \
    --metrics "$work/cnn_gpu.jsonl" || fail "cleave run --device cuda (fashion_cnn)"
  cleave run "$work/cnn64.cplan" --data synthetic --steps 5 --progress never --metrics "$work/cnn_cpu.jsonl" \
    >/dev/null || fail "cleave run on the cpu (fashion_cnn)"
  compare=$($python - "$work/cnn_cpu.jsonl" "$work/cnn_gpu.jsonl" <<'PY'
import json, math, sys
cpu = [json.loads(l)["loss"] for l in open(sys.argv[1])]
gpu = [json.loads(l)["loss"] for l in open(sys.argv[2])]
worst = max(abs(g - c) / max(abs(c), 1e-6) for c, g in zip(cpu, gpu))
finite = all(math.isfinite(g) for g in gpu)
print(f"{'ok' if worst <= 1e-3 and finite and len(gpu) == 300 else 'FAILED'} worst relative difference {worst:.2e} "
      f"over {len(cpu)} steps; {len(gpu)} GPU steps, last loss {gpu[-1]:.4f}")
PY
  )
  echo "$compare"
  [[ $compare == ok* ]] || fail "fashion_cnn GPU losses differ from the CPU's: $compare"
  row "fashion_cnn cuda vs cpu losses" ok "${compare#ok }"
  # The same plan through the NCCL backend (one rank, one GPU): its first 5 losses too.
  cleave run "$work/cnn64.cplan" --device cuda --backend nccl --data synthetic --steps 5 --progress never \
    --metrics "$work/cnn_nccl.jsonl" >/dev/null || fail "cleave run --device cuda --backend nccl (fashion_cnn)"
  nccl=$($python - "$work/cnn_cpu.jsonl" "$work/cnn_nccl.jsonl" <<'PY'
import json, sys
cpu = [json.loads(l)["loss"] for l in open(sys.argv[1])]
gpu = [json.loads(l)["loss"] for l in open(sys.argv[2])]
worst = max(abs(g - c) / max(abs(c), 1e-6) for c, g in zip(cpu, gpu))
print(f"{'ok' if worst <= 1e-3 and len(gpu) == len(cpu) else 'FAILED'} worst relative difference {worst:.2e} over {len(gpu)} steps")
PY
  )
  [[ $nccl == ok* ]] || fail "fashion_cnn losses through --backend nccl differ from the CPU's: $nccl"
  row "fashion_cnn nccl (1 rank) vs cpu" ok "${nccl#ok }"
}
section "fashion_cnn cuda vs cpu" cnn_section

fusion_section() {
  # 4b. Fused kernels (PTX from LLVM's NVPTX backend, loaded by the CUDA runtime): the GPT trained
  #     fused and unfused on the GPU, 30 steps each: losses within 1e-5 of each other (the first 5
  #     within 1e-3 of the CPU's) and the fused plan's speed against the unfused one.
  echo "== fused against unfused GPT training on the GPU"
  cleave gen gpt --layers 4 --hidden 512 --heads 8 --seq 128 --vocab 2048 --batch 16 -o "$work/gpt_fusion.cir"
  for fusion in on off; do
    cleave compile "$work/gpt_fusion.cir" --train --optimizer sgd:lr=0.01,momentum=0.9 --fusion $fusion \
      -o "$work/gpt_fusion_$fusion.cplan" >/dev/null
    cleave run "$work/gpt_fusion_$fusion.cplan" --device cuda --data synthetic --steps 30 --progress never \
      --metrics "$work/gpt_fusion_$fusion.jsonl" >/dev/null || fail "cleave run --device cuda (GPT, --fusion $fusion)"
  done
  cleave run "$work/gpt_fusion_on.cplan" --data synthetic --steps 5 --progress never \
    --metrics "$work/gpt_fusion_cpu.jsonl" >/dev/null || fail "cleave run on the cpu (fused GPT)"
  fusion=$($python - "$work/gpt_fusion_on.jsonl" "$work/gpt_fusion_off.jsonl" "$work/gpt_fusion_cpu.jsonl" <<'PY'
import json, sys
on, off, cpu = ([json.loads(l) for l in open(p)] for p in sys.argv[1:4])
same = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(on, off))
vs_cpu = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(on, cpu))
rate = lambda rows: sum(r["samples_per_s"] for r in rows[5:]) / len(rows[5:])
ok = same <= 1e-5 and vs_cpu <= 1e-3 and len(on) == len(off) == 30
print(f"{'ok' if ok else 'FAILED'} fused {rate(on):.0f} vs unfused {rate(off):.0f} samples/s "
      f"({rate(on) / rate(off):.2f}x); losses within {same:.1e} of unfused, {vs_cpu:.1e} of the cpu's")
PY
  )
  echo "$fusion"
  [[ $fusion == ok* ]] || fail "fused GPT on the GPU: $fusion"
  row "fused vs unfused GPT (cuda)" ok "${fusion#ok }"
}
section "fused vs unfused GPT (cuda)" fusion_section

gemm_section() {
  # 5. GEMM-bound training: an MLP of 8192-wide layers, batch 8192, its data from .npy (no
  #    generation in the step). FLOPs per step from the cost model (cleave simulate), 90% GEMMs.
  echo "== GEMM-bound training TFLOP/s"
  cleave gen mlp --input 256 --hidden 8192,8192,8192 --classes 256 --batch 8192 -o "$work/wide.cir"
  cleave compile "$work/wide.cir" --train --optimizer sgd:lr=0.001 -o "$work/wide.cplan" >/dev/null
  mkdir -p "$work/wide_data"
  $python - "$work/wide_data" <<'PY'
import array, random, struct, sys
def write_npy(path, descr, shape, values):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, "".join(f"{d}," for d in shape))
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + values.tobytes())
rows = 8192
write_npy(f"{sys.argv[1]}/x.npy", "<f4", (rows, 256), array.array("f", (random.gauss(0, 1) for _ in range(rows * 256))))
write_npy(f"{sys.argv[1]}/labels.npy", "<i8", (rows,), array.array("q", (random.randrange(256) for _ in range(rows))))
PY
  cleave run "$work/wide.cplan" --device cuda --data "npy:$work/wide_data" --steps 13 --progress never \
    --metrics "$work/wide.jsonl" >/dev/null || fail "cleave run --device cuda (GEMM-bound MLP)"
  flops=$(cleave simulate "$work/wide.cplan" --cluster h200x8 --json | $python -c "import json,sys; print(json.load(sys.stdin)['model_flops'])")
  rate=$(mean_rate "$work/wide.jsonl")
  peak=${PEAK_TFLOPS:-67}
  gemm=$($python -c "t = $flops * $rate / 8192 / 1e12; print(f'{t:.1f} TFLOP/s = {t / $peak:.2f} of the {$peak} TFLOP/s fp32 peak')")
  echo "$gemm"
  row "GEMM-bound training (fp32)" ok "$gemm"
}
section "GEMM-bound training (fp32)" gemm_section

throughput_section() {
  # 6. Training throughput against PyTorch on the same GPU (fp32, no TF32).
  have_torch=0
  $python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null && have_torch=1
  echo "== training throughput: cleave against PyTorch (torch on the GPU: $([ $have_torch = 1 ] && echo yes || echo no))"
  throughput() {
    local model=$1 batch=$2 cir=$3
    cleave compile "$cir" --train --optimizer sgd:lr=0.01,momentum=0.9 -o "$work/$model.cplan" >/dev/null
    cleave run "$work/$model.cplan" --device cuda --data synthetic --steps 53 --progress never \
      --metrics "$work/$model.jsonl" >/dev/null || fail "cleave run --device cuda ($model)"
    local ours theirs=n/a ratio=n/a
    ours=$(mean_rate "$work/$model.jsonl")
    if [ "$have_torch" = 1 ]; then
      theirs=$($python bench/torch_gpu_train_bench.py "$model" "$batch" 50 | sed -E 's/.*: ([0-9.]+) samples\/s.*/\1/')
      ratio=$($python -c "print(f'{$ours / $theirs:.2f}')")
    fi
    echo "$model batch $batch: cleave $ours samples/s, torch $theirs samples/s, ratio $ratio"
    row "$model training batch $batch" ok "cleave $ours samples/s, torch $theirs, cleave/torch $ratio"
  }
  cleave gen cnn --batch 256 -o "$work/cnn.cir"
  throughput cnn 256 "$work/cnn.cir"
  cleave gen gpt --layers 4 --hidden 256 --heads 4 --seq 64 --vocab 1024 --batch 32 -o "$work/gpt.cir"
  throughput gpt 32 "$work/gpt.cir"
}
section "training throughput" throughput_section

bf16_section() {
  # 7. Mixed precision (issue 18): --precision bf16 against f32 on the GEMM-bound MLP and the GPT
  #    (cuBLAS bf16 GEMMs with f32 compute), the first losses close to f32's.
  echo "== --precision bf16 against f32"
  for model in wide gpt; do
    cir=$work/$model.cir
    data=(--data synthetic)
    [ "$model" = wide ] && data=(--data "npy:$work/wide_data")
    for precision in f32 bf16; do
      cleave compile "$cir" --train --optimizer sgd:lr=0.001 --precision $precision -o "$work/$model-$precision.cplan" >/dev/null
      cleave run "$work/$model-$precision.cplan" --device cuda "${data[@]}" --steps 23 --progress never \
        --metrics "$work/$model-$precision.jsonl" >/dev/null || fail "cleave run --device cuda --precision $precision ($model)"
    done
    mixed=$($python - "$work/$model-f32.jsonl" "$work/$model-bf16.jsonl" <<'PY'
import json, sys
f32 = [json.loads(l) for l in open(sys.argv[1])]
bf16 = [json.loads(l) for l in open(sys.argv[2])]
rate = lambda rows: sum(r["samples_per_s"] for r in rows[3:]) / len(rows[3:])
worst = max(abs(b["loss"] - f["loss"]) / abs(f["loss"]) for f, b in zip(f32[:5], bf16[:5]))
print(f"{'ok' if worst <= 5e-2 else 'FAILED'} bf16 {rate(bf16):.1f} / f32 {rate(f32):.1f} samples/s = "
      f"{rate(bf16) / rate(f32):.2f}x; first 5 losses within {worst:.1e} of f32's")
PY
  )
    echo "$model: $mixed"
    [[ $mixed == ok* ]] || fail "--precision bf16 on $model: $mixed"
    row "$model bf16 vs f32" ok "${mixed#ok }"
  done
}
section "bf16 vs f32" bf16_section

profile_section() {
  # 8. Where the GPU time goes (Nsight Compute, when installed): kernel time per step of the
  #    convnet at batch 256 and of the GPT fused and unfused.
  echo "== kernel time per step (ncu)"
  local plan
  for plan in cnn gpt_fusion_on gpt_fusion_off; do
    echo "-- $plan"
    CLEAVE=$cleave_bin timeout 180 bash tools/gpu_profile.sh "$work/$plan.cplan" 2 12 | tee "$work/profile_$plan.txt"
    row "kernel time $plan" ok "$(head -n 1 "$work/profile_$plan.txt")"
  done
}
if command -v ncu >/dev/null; then section "kernel profile" profile_section; fi
echo "(cleave's samples/s include generating synthetic data on the host each step; PyTorch's do not)"
exit "$status"
