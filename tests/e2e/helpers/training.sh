# Helpers the training end-to-end scripts source: they need $cleave, $source_dir and $python set,
# and run in a scratch folder.
#   fail MESSAGE                      print FAIL: MESSAGE and exit 1
#   compile NAME MODEL FLAGS...       compile MODEL for training into NAME.cplan (log in NAME.log)
#   train NAME DATA [RUN FLAGS...]    run NAME.cplan $steps steps (default 4), losses in NAME.jsonl
#   same_losses REFERENCE RUN TOL     RUN.jsonl's losses against REFERENCE.jsonl (a run) or
#                                     REFERENCE.json (a fixture's PyTorch losses)
fail() { echo "FAIL: $*" >&2; exit 1; }
compile() {
  local name=$1 model=$2
  shift 2
  "$cleave" compile "$model" --train "$@" -o "$name.cplan" >"$name.log" 2>&1 || { cat "$name.log" >&2; fail "compile $name: $*"; }
}
train() {
  local name=$1 data=$2
  shift 2
  "$cleave" run "$name.cplan" --data "$data" --steps "${steps:-4}" --progress never --metrics "$name.jsonl" "$@" \
    >"$name.run" 2>&1 || { cat "$name.run" >&2; fail "run $name"; }
}
same_losses() {
  local reference=$1.jsonl
  [[ -f $reference ]] || reference=$1.json
  $python "$source_dir/tests/e2e/same_losses.py" "$2" "$reference" "$2.jsonl" "$3" || fail "$2's losses differ from $1's"
}
