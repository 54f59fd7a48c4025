// Device: where a rank's arena lives and how bytes move in and out of it (cpu now, cuda later).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "ir/op_table.h"
#include "ir/status.h"

namespace cleave::runtime {

struct KernelCall;

// The kinds of device a plan can run on.
enum class DeviceKind { kCpu, kCuda };

// The name of a device kind ("cpu", "cuda").
std::string_view deviceKindName(DeviceKind kind);

// An owned block of device memory; frees itself through its device when destroyed.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(void* data, int64_t bytes, std::function<void(void*)> release)
      : data_(data), bytes_(bytes), release_(std::move(release)) {}
  DeviceMemory(DeviceMemory&& other) noexcept { *this = std::move(other); }
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { reset(); }

  // The first byte (nullptr when empty).
  void* data() const { return data_; }
  // The size asked for, in bytes.
  int64_t bytes() const { return bytes_; }
  // Frees the memory now (no-op when empty).
  void reset();

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  std::function<void(void*)> release_;
};

// One device: allocates arenas, copies bytes between the host and its memory, and runs kernels.
// Work may be asynchronous (cuda): kernels and device-to-device copies are enqueued in launch
// order; copyFromHost and copyToHost return once their bytes have moved; synchronize() waits for
// everything enqueued.
class Device {
 public:
  // Every arena allocation is aligned to this many bytes.
  static constexpr int64_t kArenaAlignment = 64;

  virtual ~Device() = default;
  // What kind of device this is.
  virtual DeviceKind kind() const = 0;
  // A human-readable name, e.g. "cpu (16 threads)".
  virtual std::string name() const = 0;
  // True when the host can read and write this device's memory through plain pointers.
  virtual bool hostAccessible() const = 0;
  // Allocates `bytes` bytes, kArenaAlignment-aligned and zero-filled; kRuntime when out of memory.
  virtual Expected<DeviceMemory> allocate(int64_t bytes) = 0;
  // Copies `bytes` bytes between two places in this device's memory (they must not overlap).
  virtual Status copy(void* dst, const void* src, int64_t bytes) = 0;
  // Copies `bytes` bytes from host memory into this device's memory.
  virtual Status copyFromHost(void* dst, const void* host_src, int64_t bytes) = 0;
  // Copies `bytes` bytes from this device's memory into host memory.
  virtual Status copyToHost(void* host_dst, const void* src, int64_t bytes) = 0;
  // Host memory for staging transfers to and from this device (pinned for cuda): `bytes` bytes,
  // kArenaAlignment-aligned and zero-filled; kRuntime when out of memory.
  virtual Expected<DeviceMemory> allocateHost(int64_t bytes) = 0;
  // True when this device has a kernel for `op`.
  virtual bool hasKernel(OpId op) const = 0;
  // Runs (cpu) or enqueues (cuda) the kernel of call.op on this device's memory.
  virtual Status launch(const KernelCall& call) = 0;
  // Waits until every kernel, copy and transfer enqueued on this device has finished.
  virtual Status synchronize() = 0;
};

// The host CPU as a device.
std::unique_ptr<Device> createCpuDevice();

// A device name taken apart: "cuda:3" is {kCuda, 3}; "cpu" and "cuda" have ordinal 0.
struct DeviceName {
  DeviceKind kind = DeviceKind::kCpu;
  int ordinal = 0;
};
// `name` ("cpu", "cuda" or "cuda:N") taken apart; kUsage naming it otherwise.
Expected<DeviceName> parseDeviceName(std::string_view name);

// The device named `name`: "cpu", "cuda" (GPU 0) or "cuda:N" (GPU N). kUsage for a malformed name
// or a kind this build does not have; kRuntime when the GPU does not exist.
Expected<std::unique_ptr<Device>> createDevice(std::string_view name);

// The number of devices of `kind` this process can use: 1 for the cpu; the visible GPUs for cuda
// (0 without a GPU, without a driver, or in a build without CUDA).
int deviceCount(DeviceKind kind);

}  // namespace cleave::runtime
