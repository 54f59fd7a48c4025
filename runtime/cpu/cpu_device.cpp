// The CPU device (arenas in host memory, copies with memcpy, the CPU kernels) and createDevice.
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "runtime/device/device.h"
#include "runtime/device/kernel.h"

namespace cleave::runtime {

std::string_view deviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kCuda: return "cuda";
  }
  return "?";
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    release_ = std::move(other.release_);
    other.release_ = nullptr;
  }
  return *this;
}

void DeviceMemory::reset() {
  if (data_ && release_) release_(data_);
  data_ = nullptr;
  bytes_ = 0;
  release_ = nullptr;
}

namespace {

// `bytes` bytes of host memory, kArenaAlignment-aligned and zero-filled; `who` names the device in errors.
Expected<DeviceMemory> allocateAlignedHost(int64_t bytes, const char* who) {
  if (bytes < 0) return Status::internal(std::string(who) + ": negative allocation size " + std::to_string(bytes));
  // aligned_alloc needs a size that is a multiple of the alignment, and at least one block.
  int64_t rounded = (bytes + Device::kArenaAlignment - 1) / Device::kArenaAlignment * Device::kArenaAlignment;
  if (rounded == 0) rounded = Device::kArenaAlignment;
  void* data = std::aligned_alloc(Device::kArenaAlignment, static_cast<size_t>(rounded));
  if (!data)
    return Status::runtime(std::string(who) + ": cannot allocate an arena of " + std::to_string(bytes) + " bytes");
  std::memset(data, 0, static_cast<size_t>(rounded));
  return DeviceMemory(data, bytes, [](void* p) { std::free(p); });
}

class CpuDevice final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::kCpu; }

  std::string name() const override {
    return "cpu (" + std::to_string(std::thread::hardware_concurrency()) + " hardware threads)";
  }

  bool hostAccessible() const override { return true; }

  Expected<DeviceMemory> allocate(int64_t bytes) override { return allocateAlignedHost(bytes, "cpu device"); }

  Status copy(void* dst, const void* src, int64_t bytes) override {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return Status::ok();
  }
  Status copyFromHost(void* dst, const void* host_src, int64_t bytes) override { return copy(dst, host_src, bytes); }
  Status copyToHost(void* host_dst, const void* src, int64_t bytes) override { return copy(host_dst, src, bytes); }
  Expected<DeviceMemory> allocateHost(int64_t bytes) override { return allocateAlignedHost(bytes, "cpu device"); }
  bool hasKernel(OpId op) const override { return findCpuKernel(op) != nullptr; }

  Status launch(const KernelCall& call) override {
    CpuKernel kernel = findCpuKernel(call.op.def.id);
    if (!kernel) return Status::usage("op '" + std::string(call.op.def.name) + "' has no cpu kernel");
    return kernel(call);
  }

  Status synchronize() override { return Status::ok(); }
};

}  // namespace

#if CLEAVE_HAVE_CUDA
// Defined in runtime/cuda (declared in runtime/cuda/cuda_device.h and cuda_context.h, which include
// the CUDA headers that stay out of this file).
Expected<std::unique_ptr<Device>> createCudaDevice(int ordinal);
int cudaDeviceCount();
#endif

std::unique_ptr<Device> createCpuDevice() { return std::make_unique<CpuDevice>(); }

Expected<DeviceName> parseDeviceName(std::string_view name) {
  if (name == "cpu") return DeviceName{DeviceKind::kCpu, 0};
  if (name == "cuda") return DeviceName{DeviceKind::kCuda, 0};
  if (!name.starts_with("cuda:"))
    return Status::usage("unknown device '" + std::string(name) + "' (expected cpu, cuda or cuda:N)");
  int ordinal = 0;
  std::string_view digits = name.substr(5);
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
  if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() || ordinal < 0)
    return Status::usage("device '" + std::string(name) + "': expected cuda or cuda:N with N a GPU number");
  return DeviceName{DeviceKind::kCuda, ordinal};
}

Expected<std::unique_ptr<Device>> createDevice(std::string_view name) {
  CLEAVE_ASSIGN_OR_RETURN(DeviceName parsed, parseDeviceName(name));
  if (parsed.kind == DeviceKind::kCpu) return createCpuDevice();
#if CLEAVE_HAVE_CUDA
  return createCudaDevice(parsed.ordinal);
#else
  return Status::usage("device '" + std::string(name) +
                       "': this cleave was built without CUDA (nvcc was not found at configure time)");
#endif
}

int deviceCount(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu: return 1;
    case DeviceKind::kCuda:
#if CLEAVE_HAVE_CUDA
      return cudaDeviceCount();
#else
      return 0;
#endif
  }
  return 0;
}

}  // namespace cleave::runtime
