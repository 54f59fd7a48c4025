#!/usr/bin/env bash
# The data flow has no edge back (docs/design.md): each library includes only the rooms below it.
# Usage: tests/layering.sh SOURCE_DIR. Fails naming every include that crosses a boundary.
set -euo pipefail
cd "$1"

# room: the rooms it must not include.
declare -A forbidden=(
  [ir]="frontend passes analysis runtime tools"
  [frontend]="passes analysis runtime tools"
  [analysis]="frontend passes runtime tools"
  [passes]="frontend runtime tools"
  [runtime]="frontend passes analysis tools"
)
status=0
for room in "${!forbidden[@]}"; do
  for other in ${forbidden[$room]}; do
    if hits=$(grep -rn --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' "#include \"$other/" "$room"); then
      echo "layering: $room/ must not include $other/:" >&2
      echo "$hits" >&2
      status=1
    fi
  done
done
[[ $status == 0 ]] && echo "layering: ok (frontend and analysis on ir; passes on ir and analysis; runtime on ir only)"
exit $status
