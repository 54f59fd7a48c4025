// The CPU device: arenas in host memory, copies with memcpy.
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "runtime/device.h"

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

class CpuDevice final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::kCpu; }

  std::string name() const override {
    return "cpu (" + std::to_string(std::thread::hardware_concurrency()) + " hardware threads)";
  }

  bool hostAccessible() const override { return true; }

  Expected<DeviceMemory> allocate(int64_t bytes) override {
    if (bytes < 0) return Status::internal("cpu device: negative allocation size " + std::to_string(bytes));
    // aligned_alloc needs a size that is a multiple of the alignment, and at least one block.
    int64_t rounded = (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
    if (rounded == 0) rounded = kArenaAlignment;
    void* data = std::aligned_alloc(kArenaAlignment, static_cast<size_t>(rounded));
    if (!data)
      return Status::runtime("cpu device: cannot allocate an arena of " + std::to_string(bytes) + " bytes");
    std::memset(data, 0, static_cast<size_t>(rounded));
    return DeviceMemory(data, bytes, [](void* p) { std::free(p); });
  }

  Status copy(void* dst, const void* src, int64_t bytes) override {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return Status::ok();
  }
  Status copyFromHost(void* dst, const void* host_src, int64_t bytes) override { return copy(dst, host_src, bytes); }
  Status copyToHost(void* host_dst, const void* src, int64_t bytes) override { return copy(host_dst, src, bytes); }
};

}  // namespace

std::unique_ptr<Device> createCpuDevice() { return std::make_unique<CpuDevice>(); }

Expected<std::unique_ptr<Device>> createDevice(std::string_view name) {
  if (name == "cpu") return createCpuDevice();
  if (name == "cuda") return Status::usage("device 'cuda': this build has no CUDA device (not built yet)");
  return Status::usage("unknown device '" + std::string(name) + "' (expected cpu or cuda)");
}

}  // namespace cleave::runtime
