// CudaContext: the CUDA state of one GPU that its device, kernels and communicator share.
// Only files under runtime/cuda include this header (it pulls in the CUDA, cuBLAS and cuDNN headers).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ir/status.h"

namespace cleave::runtime {

// kOk for cudaSuccess, else kRuntime: "<what>: CUDA error <name>: <description>".
Status cudaStatus(cudaError_t error, std::string_view what);
// The same for cuBLAS and cuDNN results.
Status cublasStatus(cublasStatus_t status, std::string_view what);
Status cudnnStatus(cudnnStatus_t status, std::string_view what);

// One GPU's streams, library handles and scratch memory. Plan stream 0 (kernels, copies) runs on
// `compute`, plan stream 1 (communication) on `communication`. cuBLAS and cuDNN are bound to
// `compute`. Not thread-safe: kernels are launched from one thread.
class CudaContext {
 public:
  // Selects GPU `ordinal` and creates its streams and handles; kRuntime when there is no such GPU.
  static Expected<std::unique_ptr<CudaContext>> create(int ordinal);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int ordinal() const { return ordinal_; }
  cudaStream_t compute() const { return compute_; }
  cudaStream_t communication() const { return communication_; }
  cublasHandle_t cublas() const { return cublas_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  // At least `bytes` of device memory for a kernel on the compute stream, valid until the next
  // call (it may free the previous block after synchronizing the compute stream).
  Expected<void*> scratch(int64_t bytes);
  // Makes `ordinal()` the calling thread's current device (each thread that launches must call it).
  Status makeCurrent() const;

 private:
  CudaContext() = default;
  int ordinal_ = 0;
  cudaStream_t compute_ = nullptr;
  cudaStream_t communication_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  void* scratch_ = nullptr;
  int64_t scratch_bytes_ = 0;
};

// The number of CUDA devices this process sees; 0 when there is no GPU or no driver (the error
// cudaGetDeviceCount gives then, e.g. "driver version is insufficient", means "no device").
int cudaDeviceCount();

}  // namespace cleave::runtime
