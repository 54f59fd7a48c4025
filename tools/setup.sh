#!/usr/bin/env bash
# Installs the Debian packages cleave needs (DESIGN.md's table); a no-op when all are present.
set -euo pipefail

packages=(
  cmake g++ ninja-build clang-14                # build
  libgtest-dev libgmock-dev                     # unit tests
  llvm-14-tools                                 # lit and FileCheck for pass tests
  llvm-14-dev                                   # code generation for fused kernels
  libonnx-dev libprotobuf-dev protobuf-compiler # ONNX import and the plan schema
  libopenblas-dev                               # CPU math
  libopenmpi-dev openmpi-bin                    # multi-process runs
  nlohmann-json3-dev libcli11-dev               # JSON output and command-line flags
  dataset-fashion-mnist                         # the default training data
  python3 python3-numpy                         # lit; .npy fixtures in end-to-end tests
  zlib1g-dev                                    # gzip-compressed IDX data files
)

# 1. Find the packages that are not installed yet.
missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$package")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all packages present"
  exit 0
fi

# 2. Install them, through sudo unless we are root.
sudo=()
[[ $(id -u) -eq 0 ]] || sudo=(sudo)
echo "setup: installing ${missing[*]}"
"${sudo[@]}" apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
