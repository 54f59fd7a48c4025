// The cuda device: a GPU's arena in device memory, pinned host staging, and kernel launches on its
// CudaContext's compute stream.
#include "runtime/cuda/cuda_device.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "runtime/cuda/cuda_kernels.h"
#include "runtime/device/kernel.h"

namespace cleave::runtime {
namespace {

std::string gib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

class CudaDevice final : public Device {
 public:
  CudaDevice(std::unique_ptr<CudaContext> context, std::string name)
      : context_(std::move(context)), name_(std::move(name)), ordinal_(context_->ordinal()) {}

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  std::string name() const override { return name_; }
  bool hostAccessible() const override { return false; }
  CudaContext& context() { return *context_; }

  // Steps: allocate (cudaMalloc aligns to 256 bytes), zero-fill on the compute stream, wait for it.
  Expected<DeviceMemory> allocate(int64_t bytes) override {
    if (bytes < 0) return Status::internal(name_ + ": negative allocation size " + std::to_string(bytes));
    CLEAVE_TRY(makeCurrent());
    const size_t size = static_cast<size_t>(bytes == 0 ? 256 : bytes);
    void* data = nullptr;
    cudaError_t error = cudaMalloc(&data, size);
    if (error != cudaSuccess) {
      (void)cudaGetLastError();  // clear the error so later calls do not report it
      size_t free_bytes = 0, total_bytes = 0;
      std::string memory;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
        memory = " (" + gib(free_bytes) + " GiB free of " + gib(total_bytes) + " GiB)";
      else
        (void)cudaGetLastError();
      return cudaStatus(error, name_ + ": cannot allocate an arena of " + std::to_string(bytes) + " bytes" + memory);
    }
    const int ordinal = ordinal_;
    DeviceMemory memory(data, bytes, [ordinal](void* p) {
      (void)cudaSetDevice(ordinal);
      (void)cudaFree(p);
    });
    CLEAVE_TRY(cudaStatus(cudaMemsetAsync(data, 0, size, context_->compute()), name_ + ": zero-filling the arena"));
    CLEAVE_TRY(cudaStatus(cudaStreamSynchronize(context_->compute()), name_ + ": zero-filling the arena"));
    return memory;
  }

  Status copy(void* dst, const void* src, int64_t bytes) override {
    if (bytes == 0) return Status::ok();
    CLEAVE_TRY(makeCurrent());
    return checked(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, context_->compute()),
                   "copy", bytes);
  }

  // Enqueued on the compute stream after the kernels that came before, then waited for.
  Status copyFromHost(void* dst, const void* host_src, int64_t bytes) override {
    if (bytes == 0) return Status::ok();
    CLEAVE_TRY(makeCurrent());
    CLEAVE_TRY(checked(
        cudaMemcpyAsync(dst, host_src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, context_->compute()),
        "copy from the host", bytes));
    return checked(cudaStreamSynchronize(context_->compute()), "copy from the host", bytes);
  }

  Status copyToHost(void* host_dst, const void* src, int64_t bytes) override {
    if (bytes == 0) return Status::ok();
    CLEAVE_TRY(makeCurrent());
    CLEAVE_TRY(checked(
        cudaMemcpyAsync(host_dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, context_->compute()),
        "copy to the host", bytes));
    return checked(cudaStreamSynchronize(context_->compute()), "copy to the host", bytes);
  }

  // Page-locked (portable: usable with every GPU of the process), so copies run at full speed.
  Expected<DeviceMemory> allocateHost(int64_t bytes) override {
    if (bytes < 0) return Status::internal(name_ + ": negative allocation size " + std::to_string(bytes));
    CLEAVE_TRY(makeCurrent());
    const size_t size = static_cast<size_t>(bytes == 0 ? kArenaAlignment : bytes);
    void* data = nullptr;
    cudaError_t error = cudaHostAlloc(&data, size, cudaHostAllocPortable);
    if (error != cudaSuccess) {
      (void)cudaGetLastError();
      return cudaStatus(error, name_ + ": cannot allocate " + std::to_string(bytes) + " bytes of pinned host memory");
    }
    std::memset(data, 0, size);
    return DeviceMemory(data, bytes, [](void* p) { (void)cudaFreeHost(p); });
  }

  bool hasKernel(OpId op) const override { return findCudaKernel(op) != nullptr; }

  Status launch(const KernelCall& call) override {
    CudaKernel kernel = findCudaKernel(call.op.def.id);
    if (!kernel) return Status::usage("op '" + std::string(call.op.def.name) + "' has no cuda kernel");
    CLEAVE_TRY(makeCurrent());
    return kernel(call, *context_);
  }

  Status synchronize() override {
    CLEAVE_TRY(makeCurrent());
    CLEAVE_TRY(cudaStatus(cudaStreamSynchronize(context_->compute()), name_ + ": synchronizing the compute stream"));
    return cudaStatus(cudaStreamSynchronize(context_->communication()),
                      name_ + ": synchronizing the communication stream");
  }

 private:
  // Makes this GPU the calling thread's current device (cheap when it already is; every thread
  // that launches must, and ranks run on threads of their own). The error text is built only on failure.
  Status makeCurrent() const {
    cudaError_t error = cudaSetDevice(ordinal_);
    if (error == cudaSuccess) return Status::ok();
    return cudaStatus(error, name_ + ": cudaSetDevice");
  }

  Status checked(cudaError_t error, const char* what, int64_t bytes) const {
    if (error == cudaSuccess) return Status::ok();
    return cudaStatus(error, name_ + ": " + what + " of " + std::to_string(bytes) + " bytes");
  }

  std::unique_ptr<CudaContext> context_;
  std::string name_;
  int ordinal_;
};

}  // namespace

Expected<std::unique_ptr<Device>> createCudaDevice(int ordinal) {
  CLEAVE_ASSIGN_OR_RETURN(std::unique_ptr<CudaContext> context, CudaContext::create(ordinal));
  cudaDeviceProp properties{};
  CLEAVE_TRY(cudaStatus(cudaGetDeviceProperties(&properties, ordinal),
                        "cuda device " + std::to_string(ordinal) + ": cudaGetDeviceProperties"));
  std::string name = "cuda:" + std::to_string(ordinal) + " (" + properties.name + ", " +
                     gib(properties.totalGlobalMem) + " GiB)";
  return std::unique_ptr<Device>(new CudaDevice(std::move(context), std::move(name)));
}

CudaContext* cudaContextOf(Device& device) {
  auto* cuda = dynamic_cast<CudaDevice*>(&device);
  return cuda ? &cuda->context() : nullptr;
}

}  // namespace cleave::runtime
