// cuBLAS loaded when a GPU is first used, not when cleave starts: cuBLAS and the cuBLASLt it loads
// are hundreds of MiB whose relocations every cleave process would otherwise pay (about 60-110 ms
// and 200 MiB of memory at startup, GPU or not). TensorFlow's stream executor loads its CUDA
// libraries the same way. Only files under runtime/cuda include this header.
#pragma once

#include "ir/status.h"

namespace cleave::runtime {

// Loads libcublas.so.<the major version cleave was built against> (found as the dynamic loader
// finds any library: LD_LIBRARY_PATH, the binary's run path, ld.so.cache; then the toolkit's
// library folder at configure time) and resolves every cuBLAS function cleave calls. The first
// call does the work; later calls return its result. kRuntime naming the library and the loader's
// message when it cannot be loaded or lacks a function. cleave's calls of the cuBLAS API (cublasCreate,
// cublasSgemm, ...) go through forwarding definitions (cublas_library.cpp) that call this first.
Status loadCublas();

}  // namespace cleave::runtime
