#!/usr/bin/env bash
# Installs the Debian packages cleave needs (DESIGN.md's table); a no-op when all are present.
# Usage: tools/setup.sh [--peers]. Plain: everything the build, the tests and the scripts they call
# need. --peers adds what the benchmarks and the fixture generator need (Debian's PyTorch and
# torchvision, python3-venv for the PyPI peers of ../shared/peers/current).
set -euo pipefail
with_peers=0
for argument in "$@"; do
  case $argument in
    --peers) with_peers=1 ;;
    *) echo "usage: tools/setup.sh [--peers]" >&2; exit 2 ;;
  esac
done

packages=(
  cmake g++ ninja-build clang-14                # build
  libclang-rt-14-dev libomp-14-dev              # sanitizers and libFuzzer with clang (check_sanitizers.sh)
  libgtest-dev libgmock-dev                     # unit tests
  llvm-14-tools                                 # lit and FileCheck for pass tests
  llvm-14-dev                                   # code generation for fused kernels
  libonnx-dev libprotobuf-dev protobuf-compiler # ONNX import and the plan schema
  libopenblas-dev                               # CPU math
  libopenmpi-dev openmpi-bin                    # multi-process runs
  nlohmann-json3-dev libcli11-dev               # JSON output and command-line flags
  dataset-fashion-mnist                         # the default training data
  python3 python3-numpy                         # lit; .npy fixtures in end-to-end tests
  python3-onnx                                  # end-to-end tests that write ONNX models (bad_input.sh)
  python3-pip                                   # downloads the ONNX conformance data (step 3)
  zlib1g-dev                                    # gzip-compressed IDX data files
)
if [[ $with_peers == 1 ]]; then
  packages+=(
    python3-torch python3-torchvision           # tests/fixtures/make_onnx.py, bench/*.sh peers
    python3-venv                                # venvs for PyPI peers (torch 2.x, onnxruntime)
  )
fi

# 1. Find the packages that are not installed yet.
missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$package")
done

# 2. Install them, through sudo unless we are root.
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all packages present"
else
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  echo "setup: installing ${missing[*]}"
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

# 3. The ONNX conformance suite (onnx 1.12's per-operator node tests, which match Debian's libonnx
#    1.12): the onnx wheel from PyPI, of which only onnx/backend/test/data/node/* is unpacked, to a
#    cache folder outside the repository. Done once; skipped with a note when pip is missing or PyPI
#    is unreachable (the conformance test then skips).
onnx_node_tests=${CLEAVE_ONNX_NODE_TESTS:-${XDG_CACHE_HOME:-$HOME/.cache}/cleave/onnx-1.12.0-node}
if [[ -f $onnx_node_tests/.complete ]]; then
  echo "setup: ONNX conformance data present in $onnx_node_tests"
else
  wheel_dir=$(mktemp -d)
  if python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.10 onnx==1.12.0 -d "$wheel_dir"; then
    python3 - "$wheel_dir"/onnx-1.12.0-*.whl "$onnx_node_tests" <<'PY'
import os, shutil, sys, zipfile
wheel, target = sys.argv[1], sys.argv[2]
prefix = "onnx/backend/test/data/node/"
partial = target + ".partial"
shutil.rmtree(partial, ignore_errors=True)
with zipfile.ZipFile(wheel) as archive:
    for name in archive.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            path = os.path.join(partial, name[len(prefix):])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with archive.open(name) as source, open(path, "wb") as sink:
                shutil.copyfileobj(source, sink)
shutil.rmtree(target, ignore_errors=True)
os.rename(partial, target)
open(os.path.join(target, ".complete"), "w").close()
print(f"setup: unpacked {len(os.listdir(target)) - 1} ONNX conformance cases to {target}")
PY
  else
    echo "setup: could not download the onnx 1.12.0 wheel; the ONNX conformance test will skip"
  fi
  rm -rf "$wheel_dir"
fi
