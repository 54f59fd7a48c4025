// The cuda device: a GPU's arena in device memory and its CudaContext (streams, cuBLAS, cuDNN).
// Only files under runtime/cuda include this header.
#pragma once

#include <memory>

#include "runtime/cuda/cuda_context.h"
#include "runtime/device/device.h"

namespace cleave::runtime {

// GPU `ordinal` as a device; kRuntime naming the GPU when it does not exist or cannot be set up.
Expected<std::unique_ptr<Device>> createCudaDevice(int ordinal);

// The CUDA state of `device` when it is a cuda device, else nullptr.
CudaContext* cudaContextOf(Device& device);

}  // namespace cleave::runtime
