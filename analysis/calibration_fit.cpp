// Calibration fits: roofline efficiencies per op and alpha-beta link fits from measured times.
#include "analysis/calibration_fit.h"

#include <algorithm>
#include <utility>

namespace cleave {

std::map<OpId, double> kernelEfficiencies(const std::vector<MeasuredKernel>& kernels, const DeviceSpec& device) {
  std::map<OpId, std::pair<double, double>> sums;  // op -> (roofline, measured)
  for (const MeasuredKernel& kernel : kernels) {
    const bool misses = device.cache_bandwidth > 0 && kernel.footprint_bytes > device.cache_bytes;
    const double missed = misses ? kernel.cost.bytes : 0.0;
    const double from_memory = misses && device.memory_bandwidth > 0 ? missed / device.memory_bandwidth : 0.0;
    double roofline = rooflineTime(kernel.cost, kernel.dtype, device, 1, missed) - device.kernel_overhead_s - from_memory;
    sums[kernel.op].first += kernel.count * roofline;
    sums[kernel.op].second +=
        kernel.count * std::max(kernel.seconds - device.kernel_overhead_s - from_memory, 1e-9);
  }
  std::map<OpId, double> efficiencies;
  for (const auto& [op, sum] : sums)
    if (sum.second >= 50e-6) efficiencies[op] = std::clamp(sum.first / sum.second, 0.02, 50.0);
  return efficiencies;
}

LinkSpec fitLink(std::string name, double small_seconds, int latency_steps, double large_seconds, double bytes_per_rank) {
  LinkSpec link;
  link.name = std::move(name);
  link.latency = small_seconds / latency_steps;
  link.bandwidth = bytes_per_rank / std::max(large_seconds - latency_steps * link.latency, 1e-9);
  return link;
}

}  // namespace cleave
