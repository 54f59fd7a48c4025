#!/usr/bin/env bash
# Installs the Debian packages cleave needs (DESIGN.md's table); a no-op when all are present.
# Usage: tools/setup.sh [--peers]. Plain: everything the build, the tests and the scripts they call
# need. --peers adds what the benchmarks and the old fixture generator need (Debian's PyTorch and
# torchvision; the PyPI peers and tests/fixtures/make_modern_onnx.py use a venv, python3-venv).
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
  libdnnl-dev                                   # f32 convolutions (oneDNN)
  ocl-icd-opencl-dev                            # oneDNN's CMake config requires OpenCL (a Recommends)
  libjemalloc-dev libjemalloc2                  # the executables' allocator (large compiles)
  libopenmpi-dev openmpi-bin                    # multi-process runs
  nlohmann-json3-dev libcli11-dev               # JSON output and command-line flags
  dataset-fashion-mnist                         # the default training data
  python3 python3-numpy                         # lit; .npy fixtures in end-to-end tests
  python3-onnx                                  # end-to-end tests that write ONNX models (bad_input.sh)
  python3-pip python3-venv                      # downloads the ONNX conformance data (step 3)
  zlib1g-dev                                    # gzip-compressed IDX data files
  iproute2 nftables                             # tests/e2e/mpi_hosts.sh: hosts as network namespaces, a firewall
)
if [[ $with_peers == 1 ]]; then
  packages+=(
    python3-torch python3-torchvision           # tests/fixtures/make_onnx.py, bench/*.sh peers
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

# 3. The ONNX conformance suites, in cache folders outside the repository, once each; skipped with a
#    note when PyPI is unreachable (the conformance tests then skip):
#    - onnx 1.12's node tests (which match Debian's libonnx): the wheel from PyPI, of which only
#      onnx/backend/test/data/node/* is unpacked;
#    - onnx 1.23.2's (the newest; opsets up to 23): its wheel no longer ships the data, so the
#      node-test generators run in a venv of it (tests/conformance/write_node_tests.py).
cache=${XDG_CACHE_HOME:-$HOME/.cache}/cleave
onnx_node_tests=${CLEAVE_ONNX_NODE_TESTS:-$cache/onnx-1.12.0-node}
if [[ -f $onnx_node_tests/.complete ]]; then
  echo "setup: ONNX 1.12.0 conformance data present in $onnx_node_tests"
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
newest_node_tests=$cache/onnx-1.23.2-node
if [[ -f $newest_node_tests/.complete ]]; then
  echo "setup: ONNX 1.23.2 conformance data present in $newest_node_tests"
else
  venv=$cache/onnx-1.23.2-venv
  if { [[ -x $venv/bin/python ]] || /usr/bin/python3 -m venv "$venv"; } &&
     "$venv/bin/pip" install --quiet onnx==1.23.2 numpy==2.4.6 &&
     rm -rf "$newest_node_tests.partial" &&
     "$venv/bin/python" "$(dirname "$0")/../tests/conformance/write_node_tests.py" "$newest_node_tests.partial"; then
    rm -rf "$newest_node_tests" && mv "$newest_node_tests.partial" "$newest_node_tests"
    touch "$newest_node_tests/.complete"
  else
    echo "setup: could not install onnx 1.23.2 from PyPI; its ONNX conformance test will skip"
  fi
fi

# 4. ONNX Runtime, which runs the ONNX models `cleave export` writes (tests/e2e/checkpoints.sh),
#    in a venv of its own; skipped with a note when PyPI is unreachable (that check then skips).
ort_venv=$cache/onnxruntime-1.32.0-venv
if [[ -f $ort_venv/.complete ]]; then
  echo "setup: ONNX Runtime 1.32.0 present in $ort_venv"
elif { [[ -x $ort_venv/bin/python ]] || /usr/bin/python3 -m venv "$ort_venv"; } &&
     "$ort_venv/bin/pip" install --quiet onnxruntime==1.32.0 numpy==2.4.6; then
  touch "$ort_venv/.complete"
else
  echo "setup: could not install onnxruntime 1.32.0 from PyPI; the check of exported ONNX models will skip"
fi
