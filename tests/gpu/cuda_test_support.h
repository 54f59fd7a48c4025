// What the GPU tests share: skipping without a device, the CUDA context of GPU 0, device buffers.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "runtime/cuda/cuda_context.h"

namespace cleave::cuda_test {

// Skips the current test, naming why, on a machine without a CUDA device.
#define CLEAVE_SKIP_WITHOUT_GPU() \
  if (::cleave::runtime::cudaDeviceCount() == 0)  \
  GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount found none or no driver)"

// The CUDA context of GPU 0, created once for the whole test binary.
inline runtime::CudaContext& context() {
  static std::unique_ptr<runtime::CudaContext> shared = [] {
    auto created = runtime::CudaContext::create(0);
    EXPECT_TRUE(created.hasValue()) << created.status().message();
    return created.hasValue() ? std::move(*created) : nullptr;
  }();
  return *shared;
}

// Device memory freed at scope exit.
struct DeviceBuffer {
  void* data = nullptr;
  explicit DeviceBuffer(int64_t bytes) {
    EXPECT_EQ(cudaMalloc(&data, static_cast<size_t>(std::max<int64_t>(bytes, 8))), cudaSuccess);
  }
  ~DeviceBuffer() { (void)cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

}  // namespace cleave::cuda_test
