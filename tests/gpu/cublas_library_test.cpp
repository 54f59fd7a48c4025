// cuBLAS loaded at first use (runtime/cuda/cublas_library.h): found and complete wherever the CUDA
// toolkit cleave was built with is installed, GPU or not (tests/e2e/cli.sh checks that cleave does
// not link it).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "runtime/cuda/cublas_library.h"
#include "runtime/cuda/cuda_context.h"

namespace cleave {
namespace {

// Whether this process has a library whose path contains `name` mapped.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}

TEST(CublasLibrary, LoadsAndResolvesEveryFunction) {
  const Status loaded = runtime::loadCublas();
  ASSERT_TRUE(loaded.isOk()) << loaded.message();
  EXPECT_TRUE(mapped("libcublas.so"));
  EXPECT_TRUE(runtime::loadCublas().isOk());  // the first call's result, kept
  // The forwarding definitions reach the library's own functions.
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_EQ(cublasSetMathMode(nullptr, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_NE(runtime::cublasStatus(CUBLAS_STATUS_NOT_INITIALIZED, "x").message().find("CUBLAS_STATUS_NOT_INITIALIZED"),
            std::string::npos);
}

}  // namespace
}  // namespace cleave
