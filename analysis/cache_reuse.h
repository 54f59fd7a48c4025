// Which bytes a rank's instructions find in its cache: an LRU model of the last-level cache over
// the rank's arena, for the cost model of a calibrated CPU (DeviceSpec::cache_bytes).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/plan.pb.h"

namespace cleave {

// Bytes of the arena the cache model tracks as one unit.
inline constexpr int64_t kCacheChunkBytes = 64 * 1024;

// For each instruction of `program` (a program a rank runs again and again: a training step), the
// bytes of its operands and results that are not in a cache of `cache_bytes` when it runs: the
// arena is cut into kCacheChunkBytes chunks by offset (buffers that share bytes share chunks), the
// cache keeps the `cache_bytes / kCacheChunkBytes` chunks used last (LRU), an instruction touches
// each of its distinct chunks once, and a buffer's bytes count as missed in proportion to its
// chunks that were not there (both operand and result of an in-place kernel: read, then written back). The program is run twice and the
// second run's misses are returned, so the first instructions see what the end of a step left.
// All zeros when `cache_bytes` <= 0 or the program would touch over 2^26 chunks in two runs (too
// large to model; its kernels are priced as hits).
std::vector<double> cacheMissBytes(const planpb::RankPlan& rank, const planpb::Program& program, int64_t cache_bytes);

}  // namespace cleave
