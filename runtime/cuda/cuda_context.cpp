// CudaContext: creating a GPU's streams and library handles, scratch memory, and CUDA error text.
#include "runtime/cuda/cuda_context.h"

#include <memory>

#include "runtime/cuda/cublas_library.h"

namespace cleave::runtime {

Status cudaStatus(cudaError_t error, std::string_view what) {
  if (error == cudaSuccess) return Status::ok();
  return Status::runtime(std::string(what) + ": CUDA error " + cudaGetErrorName(error) + ": " +
                         cudaGetErrorString(error));
}

Status cublasStatus(cublasStatus_t status, std::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return Status::runtime(std::string(what) + ": cuBLAS error " + cublasGetStatusName(status) + ": " +
                         cublasGetStatusString(status));
}

Status cudnnStatus(cudnnStatus_t status, std::string_view what) {
  if (status == CUDNN_STATUS_SUCCESS) return Status::ok();
  return Status::runtime(std::string(what) + ": cuDNN error: " + cudnnGetErrorString(status));
}

int cudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

Expected<std::unique_ptr<CudaContext>> CudaContext::create(int ordinal) {
  const int count = cudaDeviceCount();
  if (ordinal < 0 || ordinal >= count)
    return Status::runtime("cuda device " + std::to_string(ordinal) + ": this machine has " +
                           (count == 0 ? std::string("no CUDA device (or no driver)")
                                       : std::to_string(count) + " CUDA device(s)"));
  std::unique_ptr<CudaContext> context(new CudaContext());
  context->ordinal_ = ordinal;
  const std::string where = "cuda device " + std::to_string(ordinal);
  CLEAVE_TRY(context->makeCurrent());
  CLEAVE_TRY(cudaStatus(cudaStreamCreateWithFlags(&context->compute_, cudaStreamNonBlocking), where + ": compute stream"));
  CLEAVE_TRY(cudaStatus(cudaStreamCreateWithFlags(&context->communication_, cudaStreamNonBlocking),
                        where + ": communication stream"));
  CLEAVE_TRY(loadCublas().withContext(where));
  CLEAVE_TRY(cublasStatus(cublasCreate(&context->cublas_), where + ": cublasCreate"));
  CLEAVE_TRY(cublasStatus(cublasSetStream(context->cublas_, context->compute_), where + ": cublasSetStream"));
  // fp32 GEMMs stay fp32 (no TF32): results must match the CPU's within float tolerance.
  CLEAVE_TRY(cublasStatus(cublasSetMathMode(context->cublas_, CUBLAS_DEFAULT_MATH), where + ": cublasSetMathMode"));
  CLEAVE_TRY(cudnnStatus(cudnnCreate(&context->cudnn_), where + ": cudnnCreate"));
  CLEAVE_TRY(cudnnStatus(cudnnSetStream(context->cudnn_, context->compute_), where + ": cudnnSetStream"));
  return context;
}

CudaContext::~CudaContext() {
  (void)makeCurrent();
  if (compute_) (void)cudaStreamSynchronize(compute_);
  if (communication_) (void)cudaStreamSynchronize(communication_);
  if (scratch_) (void)cudaFree(scratch_);
  if (cudnn_) (void)cudnnDestroy(cudnn_);
  if (cublas_) (void)cublasDestroy(cublas_);
  if (communication_) (void)cudaStreamDestroy(communication_);
  if (compute_) (void)cudaStreamDestroy(compute_);
}

Status CudaContext::makeCurrent() const {
  return cudaStatus(cudaSetDevice(ordinal_), "cuda device " + std::to_string(ordinal_) + ": cudaSetDevice");
}

Expected<void*> CudaContext::scratch(int64_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  // The old block may still be in use by kernels in flight on the compute stream.
  CLEAVE_TRY(cudaStatus(cudaStreamSynchronize(compute_), "cuda scratch memory: synchronize"));
  if (scratch_) CLEAVE_TRY(cudaStatus(cudaFree(scratch_), "cuda scratch memory: cudaFree"));
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  const int64_t rounded = (bytes + (1 << 20) - 1) / (1 << 20) * (1 << 20);  // whole MiB: fewer regrowths
  CLEAVE_TRY(cudaStatus(cudaMalloc(&scratch_, static_cast<size_t>(rounded)),
                        "cuda device " + std::to_string(ordinal_) + ": cannot allocate " + std::to_string(rounded) +
                            " bytes of scratch memory"));
  scratch_bytes_ = rounded;
  return scratch_;
}

}  // namespace cleave::runtime
