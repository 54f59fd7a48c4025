// cuBLAS through dlopen (cublas_library.h): the cuBLAS functions cleave calls are defined here, each
// forwarding to the library's own, which loadCublas resolves at first use. cleave does not link
// libcublas, so these are the definitions its calls bind to.
#include "runtime/cuda/cublas_library.h"

#include <cublas_v2.h>
#include <dlfcn.h>

#include <array>
#include <mutex>
#include <string>

namespace cleave::runtime {
namespace {

// The functions cleave calls, by their exported names (cublas_v2.h maps cublasCreate to
// cublasCreate_v2 and so on).
enum Fn { kCreate, kDestroy, kSetStream, kSetMathMode, kSetPointerMode, kSgemm, kDgemm, kSgemmStridedBatched,
          kDgemmStridedBatched, kGemmStridedBatchedEx, kGetStatusName, kGetStatusString, kFnCount };
constexpr std::array<const char*, kFnCount> kNames = {
    "cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasSetMathMode", "cublasSetPointerMode_v2",
    "cublasSgemm_v2", "cublasDgemm_v2", "cublasSgemmStridedBatched", "cublasDgemmStridedBatched",
    "cublasGemmStridedBatchedEx", "cublasGetStatusName", "cublasGetStatusString"};

struct Library {
  Status status = Status::ok();
  std::array<void*, kFnCount> functions{};
};

const Library& library() {
  static const Library loaded = [] {
    Library lib;
    const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    std::string error = handle ? "" : dlerror();
#ifdef CLEAVE_CUDA_LIBRARY_DIR
    if (!handle) handle = dlopen((std::string(CLEAVE_CUDA_LIBRARY_DIR) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
    if (!handle) {
      lib.status = Status::runtime("cannot load cuBLAS (" + soname + "): " + error +
                                   " (install CUDA " + std::to_string(CUBLAS_VER_MAJOR) +
                                   "'s cuBLAS or put its folder on LD_LIBRARY_PATH)");
      return lib;
    }
    for (int f = 0; f < kFnCount; ++f) {
      lib.functions[f] = dlsym(handle, kNames[f]);
      if (!lib.functions[f]) {
        lib.status = Status::runtime(soname + " has no function " + kNames[f] + ": it is older than the cuBLAS " +
                                     std::to_string(CUBLAS_VER_MAJOR) + "." + std::to_string(CUBLAS_VER_MINOR) +
                                     " cleave was built against");
        return lib;
      }
    }
    return lib;
  }();
  return loaded;
}

// Library function f with the type of its declaration `Declared`, or null when cuBLAS is not loaded.
template <class Declared>
Declared function(Fn f) {
  const Library& lib = library();
  return lib.status.isOk() ? reinterpret_cast<Declared>(lib.functions[f]) : nullptr;
}

}  // namespace

Status loadCublas() { return library().status; }

}  // namespace cleave::runtime

using cleave::runtime::function;

// Each forwards to the library's function; without the library, CUBLAS_STATUS_NOT_INITIALIZED
// (CudaContext::create calls loadCublas first and reports why).
#define CLEAVE_CUBLAS_FORWARD(name, fn, params, args)                     \
  extern "C" cublasStatus_t CUBLASWINAPI name params {                    \
    const auto call = function<cublasStatus_t(*) params>(cleave::runtime::fn); \
    return call ? call args : CUBLAS_STATUS_NOT_INITIALIZED;              \
  }

CLEAVE_CUBLAS_FORWARD(cublasCreate_v2, kCreate, (cublasHandle_t * handle), (handle))
CLEAVE_CUBLAS_FORWARD(cublasDestroy_v2, kDestroy, (cublasHandle_t handle), (handle))
CLEAVE_CUBLAS_FORWARD(cublasSetStream_v2, kSetStream, (cublasHandle_t handle, cudaStream_t stream), (handle, stream))
CLEAVE_CUBLAS_FORWARD(cublasSetMathMode, kSetMathMode, (cublasHandle_t handle, cublasMath_t mode), (handle, mode))
CLEAVE_CUBLAS_FORWARD(cublasSetPointerMode_v2, kSetPointerMode, (cublasHandle_t handle, cublasPointerMode_t mode),
                      (handle, mode))
CLEAVE_CUBLAS_FORWARD(cublasSgemm_v2, kSgemm,
                      (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                       const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta, float* C,
                       int ldc),
                      (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))
CLEAVE_CUBLAS_FORWARD(cublasDgemm_v2, kDgemm,
                      (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                       const double* alpha, const double* A, int lda, const double* B, int ldb, const double* beta,
                       double* C, int ldc),
                      (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))
CLEAVE_CUBLAS_FORWARD(cublasSgemmStridedBatched, kSgemmStridedBatched,
                      (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                       const float* alpha, const float* A, int lda, long long int strideA, const float* B, int ldb,
                       long long int strideB, const float* beta, float* C, int ldc, long long int strideC,
                       int batchCount),
                      (handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
                       batchCount))
CLEAVE_CUBLAS_FORWARD(cublasDgemmStridedBatched, kDgemmStridedBatched,
                      (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                       const double* alpha, const double* A, int lda, long long int strideA, const double* B, int ldb,
                       long long int strideB, const double* beta, double* C, int ldc, long long int strideC,
                       int batchCount),
                      (handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
                       batchCount))
CLEAVE_CUBLAS_FORWARD(cublasGemmStridedBatchedEx, kGemmStridedBatchedEx,
                      (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                       const void* alpha, const void* A, cudaDataType Atype, int lda, long long int strideA,
                       const void* B, cudaDataType Btype, int ldb, long long int strideB, const void* beta, void* C,
                       cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
                       cublasComputeType_t computeType, cublasGemmAlgo_t algo),
                      (handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C,
                       Ctype, ldc, strideC, batchCount, computeType, algo))

extern "C" const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  const auto call = function<decltype(&::cublasGetStatusName)>(cleave::runtime::kGetStatusName);
  return call ? call(status) : "CUBLAS_STATUS_NOT_INITIALIZED";
}

extern "C" const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  const auto call = function<decltype(&::cublasGetStatusString)>(cleave::runtime::kGetStatusString);
  return call ? call(status) : "cuBLAS could not be loaded";
}
