// Memory planning: arena offsets for a rank's buffers (persistent state first, then activations by liveness).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/status.h"

namespace cleave {
namespace planpb {
class RankPlan;
}  // namespace planpb

// Every planned offset and size is a multiple of this many bytes.
constexpr int64_t kBufferAlignment = 64;

// Assigns an offset to every buffer of `rank` and sets arena_bytes, persistent_bytes and each
// program's peak_bytes. Persistent storage (parameters, optimizer state) is laid out at the start
// of the arena in buffer order; each program's other storage is placed above it by the greedy
// "by size" algorithm over storage lifetimes, so storages never live at the same time reuse bytes.
// Programs never run at once, so they all reuse the same region above the persistent one.
// Aliases (alias_of) get their root's offset. Buffers must have valid types and ids.
Status planMemory(planpb::RankPlan& rank);

// One storage to place: its size in bytes and the times [first, last] it is live.
struct StorageRequest {
  int64_t size = 0;
  int64_t first = 0;
  int64_t last = 0;
};

// Offsets at or above `base` by the greedy "by size" algorithm (as TFLite's and ONNX Runtime's
// planners): the largest storage first (ties: the one live first, then the one listed first), each
// at the lowest offset where its bytes are free of every storage placed before it that is live at
// the same time. Storages of size 0 get `base`.
std::vector<int64_t> placeGreedyBySize(const std::vector<StorageRequest>& storages, int64_t base);

// What a rank's arena holds, for inspect. Sums are over storages (aliases not counted twice);
// the kind sums are before any reuse, activation_region_bytes after it.
struct MemoryReport {
  int64_t param_bytes = 0;               // BUFFER_PARAM storage
  int64_t optimizer_state_bytes = 0;     // BUFFER_OPTIMIZER_STATE storage
  int64_t gradient_bytes = 0;            // BUFFER_GRADIENT storage
  int64_t activation_bytes = 0;          // BUFFER_ACTIVATION storage
  int64_t input_bytes = 0;               // BUFFER_INPUT storage
  int64_t output_bytes = 0;              // BUFFER_OUTPUT storage
  int64_t persistent_bytes = 0;          // the persistent region (parameters and optimizer state)
  int64_t activation_region_bytes = 0;   // arena above the persistent region, shared by all programs
  int64_t arena_bytes = 0;               // the whole arena
};

// Sums a planned rank's buffers by kind.
MemoryReport memoryReport(const planpb::RankPlan& rank);

}  // namespace cleave
