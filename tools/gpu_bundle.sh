#!/usr/bin/env bash
# Packs a built cleave for a GPU machine that cannot build it (one without Debian's -dev packages
# or a network, such as a lent device machine): BUNDLE/cleave.tar.xz holds bin/cleave,
# bin/cleave_gpu_tests and bin/cleave_op_gpu_tests (stripped) and lib/, every shared library they load except the C and C++
# runtimes and CUDA's own, which the GPU machine brings; BUNDLE/built-from names the commit.
# tools/gpu_check.sh with BUNDLE=that folder runs the GPU check from it. Build first (tools/build.sh).
# Two of LLVM's dependencies that cleave never reaches are replaced with stubs whose functions abort,
# which keeps the bundle under the 64 MiB a device call carries: Z3 (the static analyzer's solver)
# and ICU (libxml2's character conversion; LLVM reads XML only for Windows manifests).
# Usage: tools/gpu_bundle.sh [BUNDLE]   (default build/gpu_bundle; env BUILD=build folder)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
bundle=${1:-$build/gpu_bundle}
binaries=("$build/tools/cleave" "$build/tests/gpu/cleave_gpu_tests" "$build/tests/ops/cleave_op_gpu_tests")
for binary in "${binaries[@]}"; do
  [ -x "$binary" ] || { echo "gpu_bundle: $binary is not built (tools/build.sh builds it)" >&2; exit 1; }
done
ldd "$build/tools/cleave" | grep -q libcudart ||
  { echo "gpu_bundle: $build/tools/cleave was built without the CUDA path" >&2; exit 1; }

rm -rf "$bundle"
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
mkdir -p "$bundle" "$staging/bin" "$staging/lib"
cp "${binaries[@]}" "$staging/bin/"
strip "$staging"/bin/*
# ldd lists "name => /path (address)" for each library the binaries load, directly or not.
ldd "${binaries[@]}" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u | while read -r library; do
  case $(basename "$library") in
    # The GPU machine's own: glibc, the C++ runtime (its may be newer, and CUDA's libraries may need
    # that), the driver, and CUDA's libraries, which must match its driver.
    libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | libstdc++.so* | libgcc_s.so* | \
      libcuda.so* | libcudart.so* | libcublas.so* | libcublasLt.so* | libcudnn*.so* | libnccl.so*) ;;
    libz3.so.* | libicu*.so.*) ;;  # stubs, below
    *) cp -L "$library" "$staging/lib/" ;;
  esac
done
# stub SONAME CONSUMER PATTERN: a library named SONAME that defines, as functions that abort, the
# symbols matching PATTERN that CONSUMER imports (enough for the loader, also under BIND_NOW).
stub() {
  local soname=$1 consumer=$2 pattern=$3
  { echo '#include <stdlib.h>'
    nm -D --undefined-only "$consumer" | awk '{ print $2 }' | sed 's/@.*//' | grep -E "$pattern" | sort -u |
      awk '{ printf "void %s(void) { abort(); }\n", $1 }'
  } >"$staging/stub.c"
  cc -shared -fPIC -Wl,-soname,"$soname" -o "$staging/lib/$soname" "$staging/stub.c"
}
loaded=$(ldd "$build/tools/cleave")
llvm=$(awk '$1 ~ /^libLLVM/ { print $3 }' <<<"$loaded")
xml=$(awk '$1 == "libxml2.so.2" { print $3 }' <<<"$loaded")
z3=$(awk '$1 ~ /^libz3/ { print $1 }' <<<"$loaded")
icu=$(awk '$1 ~ /^libicuuc/ { print $1 }' <<<"$loaded")
[ -z "$z3" ] || stub "$z3" "$llvm" '^Z3_'
[ -z "$icu" ] || stub "$icu" "$xml" '^(u|U)[A-Za-z_]*_[0-9]+$'
rm -f "$staging/stub.c"
tar -C "$staging" -cf - bin lib | xz -T0 -9 >"$bundle/cleave.tar.xz"
git rev-parse --short HEAD 2>/dev/null >"$bundle/built-from" || echo unknown >"$bundle/built-from"
git diff --quiet HEAD 2>/dev/null || sed -i 's/$/ (with uncommitted changes)/' "$bundle/built-from"
du -sh "$bundle"
