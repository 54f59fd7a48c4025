// Calibration fits: a cluster spec's link and per-op efficiencies from measured times (cleave calibrate).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "analysis/cost_model.h"
#include "ir/op_table.h"

namespace cleave {

// One kernel of the calibration suite: its op, cost and roofline dtype, how many times the suite
// runs it, the bytes of its operands and results, and the seconds one call was measured to take
// (calling it again and again on the same buffers).
struct MeasuredKernel {
  OpId op;
  OpCost cost;
  DType dtype = DType::kF32;
  int count = 1;
  int64_t footprint_bytes = 0;
  double seconds = 0;
};

// Per op, the speed its kernels reach relative to the roofline of `device` (whose peaks, bandwidth,
// overhead and cache model are already measured): the sum of their roofline times over the sum of
// their measured times, both less the overhead. With a cache model, a kernel whose footprint fits
// the cache moves all its bytes there; a larger one misses all of them, and their time at memory
// bandwidth comes off both sums. Ops whose kernels take under 50 us in all are left out (too
// little to tell); ratios are clamped to [0.02, 50].
std::map<OpId, double> kernelEfficiencies(const std::vector<MeasuredKernel>& kernels, const DeviceSpec& device);

// Alpha-beta fit of a link from a small and a large message: latency per step, bytes/s per rank.
LinkSpec fitLink(std::string name, double small_seconds, int latency_steps, double large_seconds, double bytes_per_rank);

}  // namespace cleave
