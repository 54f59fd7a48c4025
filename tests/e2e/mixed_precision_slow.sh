#!/usr/bin/env bash
# Mixed precision on real data: the Fashion-MNIST convnet (examples/fashion_cnn.cir, AdamW lr 1e-3,
# batch 64, as tools/quickstart.sh) trained one epoch in f32 and with --precision bf16; the bf16
# test accuracy must be within 0.5 points of f32's. About two minutes on 2 cores.
# Usage: bash mixed_precision_slow.sh PATH_TO_cleave SOURCE_DIR (labelled slow: tools/check.sh runs it with CLEAVE_CHECK_ALL=1)
set -euo pipefail

cleave=$1
source_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

declare -A accuracy rate
for precision in f32 bf16; do
  "$cleave" compile "$source_dir/examples/fashion_cnn.cir" --train --optimizer adamw:lr=1e-3 --precision $precision \
    -o "$tmp/$precision.cplan" >/dev/null || fail "compile with --precision $precision failed"
  "$cleave" run "$tmp/$precision.cplan" --data fashion-mnist --epochs 1 --eval-data fashion-mnist --progress never \
    >"$tmp/$precision.out" 2>&1 || fail "one epoch with --precision $precision failed: $(tail -3 "$tmp/$precision.out")"
  accuracy[$precision]=$(sed -n 's/^eval accuracy: \([0-9.]*\) .*/\1/p' "$tmp/$precision.out")
  rate[$precision]=$(sed -n 's/.*s: \([0-9.]*\) samples\/s.*/\1/p' "$tmp/$precision.out")
  [[ -n ${accuracy[$precision]} ]] || fail "no eval accuracy in the $precision run: $(tail -3 "$tmp/$precision.out")"
done
/usr/bin/python3 - "${accuracy[f32]}" "${accuracy[bf16]}" "${rate[f32]}" "${rate[bf16]}" <<'PY' || fail "bf16 accuracy is more than 0.5 points from f32's"
import sys
f32, bf16, f32_rate, bf16_rate = map(float, sys.argv[1:])
print(f"convnet, one epoch of Fashion-MNIST: test accuracy {f32:.4f} in f32, {bf16:.4f} in bf16 "
      f"({100 * (bf16 - f32):+.2f} points); {f32_rate:.0f} and {bf16_rate:.0f} samples/s")
assert abs(bf16 - f32) <= 0.005
PY
echo "mixed_precision_slow.sh: all checks passed"
