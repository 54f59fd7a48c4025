#!/usr/bin/env bash
# Measurement 5: perf profiles of cleave where it is slower than a peer.
# Usage: profile.sh NAME -- COMMAND...   (records `perf record -g` of COMMAND into $OUT/perf-NAME.data and
#        writes the flat self-time report ($OUT/perf-NAME.self.txt), the same by shared object
#        ($OUT/perf-NAME.dso.txt) and the caller graph of the top symbols ($OUT/perf-NAME.callers.txt))
#        With no arguments: the default set below (cnn training T=1/T=2, gpt training T=1, resnet18 inference).
set -euo pipefail
OUT=${OUT:-/tmp/perf}
here=$(cd "$(dirname "$0")/../.." && pwd)
CLEAVE=${CLEAVE:-$here/build/tools/cleave}
BENCH=${BENCH:-$here/build/bench/onnx_inference_bench}
mkdir -p "$OUT"
one() {
  local name=$1; shift; [ "$1" = "--" ] && shift
  echo "== $name: $* (load $(cut -d' ' -f1-3 /proc/loadavg))"
  perf record -F 1999 -g -o "$OUT/perf-$name.data" -- "$@" >"$OUT/perf-$name.cmd.txt" 2>&1
  perf report -i "$OUT/perf-$name.data" --no-children --stdio --sort symbol --percent-limit 0.7 2>/dev/null |
    grep -v '^$' >"$OUT/perf-$name.self.txt" || true
  perf report -i "$OUT/perf-$name.data" --no-children --stdio --sort dso 2>/dev/null | grep -E '^ +[0-9]' | head -12 \
    >"$OUT/perf-$name.dso.txt" || true
  perf report -i "$OUT/perf-$name.data" --no-children --stdio --sort symbol -G --percent-limit 3 2>/dev/null | head -400 \
    >"$OUT/perf-$name.callers.txt" || true
  grep -E '^ +[0-9.]+%' "$OUT/perf-$name.self.txt" | head -15
  echo "-- by object:"; cat "$OUT/perf-$name.dso.txt"
}
if [ $# -gt 0 ]; then one "$@"; exit; fi
work=$(mktemp -d -p "$OUT" peers2-prof-XXXX)
"$CLEAVE" compile ${MAIN:-.}/examples/fashion_cnn.cir --train --loss softmax_cross_entropy \
  --optimizer sgd:lr=0.01,momentum=0.9 -o "$work/cnn.cplan" >/dev/null
"$CLEAVE" gen gpt --layers 4 --hidden 256 --heads 4 --seq 64 --vocab 1024 --batch 8 -o "$work/gpt.cir"
"$CLEAVE" compile "$work/gpt.cir" --train --loss softmax_cross_entropy --optimizer sgd:lr=0.01,momentum=0.9 \
  -o "$work/gpt.cplan" >/dev/null
"$CLEAVE" gen mlp --batch 128 -o "$work/mlp.cir"
"$CLEAVE" compile "$work/mlp.cir" --train --loss softmax_cross_entropy --optimizer sgd:lr=0.01,momentum=0.9 \
  -o "$work/mlp.cplan" >/dev/null
for what in ${PROFILES:-cnn-t1 cnn-t2 gpt-t1 mlp-t1 resnet18_64-t1 gpt2-t1}; do
  case $what in
    cnn-t1) one cnn-t1 -- "$CLEAVE" run "$work/cnn.cplan" --data synthetic --steps 40 --threads 1 --progress never ;;
    cnn-t2) one cnn-t2 -- "$CLEAVE" run "$work/cnn.cplan" --data synthetic --steps 40 --threads 2 --progress never ;;
    gpt-t1) one gpt-t1 -- "$CLEAVE" run "$work/gpt.cplan" --data synthetic --steps 30 --threads 1 --progress never ;;
    gpt-t2) one gpt-t2 -- "$CLEAVE" run "$work/gpt.cplan" --data synthetic --steps 30 --threads 2 --progress never ;;
    mlp-t1) one mlp-t1 -- "$CLEAVE" run "$work/mlp.cplan" --data synthetic --steps 400 --threads 1 --progress never ;;
    mlp-t2) one mlp-t2 -- "$CLEAVE" run "$work/mlp.cplan" --data synthetic --steps 400 --threads 2 --progress never ;;
    resnet18_64-t1) OMP_NUM_THREADS=1 one resnet18_64-t1 -- "$BENCH" "$OUT/models/resnet18_64_b8.onnx" --batch 8 \
      --threads 1 --iterations 60 --warmup 5 ;;
    resnet18_224-t1) OMP_NUM_THREADS=1 one resnet18_224-t1 -- "$BENCH" "$OUT/models/resnet18_224_b1.onnx" --batch 1 \
      --threads 1 --iterations 60 --warmup 5 ;;
    gpt2-t1) OMP_NUM_THREADS=1 one gpt2-t1 -- "$BENCH" "$OUT/models/gpt2_tiny_b4.onnx" --batch 4 \
      --threads 1 --iterations 100 --warmup 5 ;;
    gpt17-t1) OMP_NUM_THREADS=1 one gpt17-t1 -- "$BENCH" ${MAIN:-.}/tests/fixtures/gpt17/model.onnx --batch 16 \
      --threads 1 --iterations 3000 --warmup 10 ;;
  esac
done
