// Memory planning: persistent layout, greedy-by-size activation offsets over lifetimes, and memory reports.
#include "passes/lowering/memory_planner.h"

#include <algorithm>
#include <string>
#include <vector>

#include "ir/plan.pb.h"
#include "ir/plan_storage.h"

namespace cleave {
namespace {

int64_t alignUp(int64_t bytes) { return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment; }

// A storage already given bytes [offset, end) in the region, live over times [first, last].
struct PlacedStorage {
  int64_t offset = 0;
  int64_t end = 0;
  int64_t first = 0;
  int64_t last = 0;
};

// Places one program's non-persistent storages above `base` and returns the region's high-water
// mark (an absolute offset). Greedy by size (as TFLite's and ONNX Runtime's planners): the largest
// storage first, each at the lowest offset free of every placed storage whose lifetime meets its own.
int64_t placeProgramStorages(planpb::RankPlan& rank, std::vector<StorageLifetime> storages, int64_t base) {
  auto sizeOf = [&](const StorageLifetime& s) { return alignUp(bufferBytes(rank.buffers(s.root))); };
  std::sort(storages.begin(), storages.end(), [&](const StorageLifetime& a, const StorageLifetime& b) {
    int64_t size_a = sizeOf(a), size_b = sizeOf(b);
    if (size_a != size_b) return size_a > size_b;
    return a.first != b.first ? a.first < b.first : a.root < b.root;
  });
  std::vector<PlacedStorage> placed;  // kept sorted by offset
  int64_t high_water = base;
  for (const StorageLifetime& storage : storages) {
    const int64_t size = sizeOf(storage);
    int64_t offset = base;
    if (size > 0) {
      // 1. Walk the placed storages upwards, skipping past each one that is live at the same time,
      //    until the gap below the next one holds this storage.
      for (const PlacedStorage& other : placed) {
        if (other.last < storage.first || storage.last < other.first) continue;
        if (offset + size <= other.offset) break;
        offset = std::max(offset, other.end);
      }
      // 2. Record it, keeping the list sorted by offset.
      PlacedStorage entry{offset, offset + size, storage.first, storage.last};
      auto at = std::upper_bound(placed.begin(), placed.end(), entry,
                                 [](const PlacedStorage& a, const PlacedStorage& b) { return a.offset < b.offset; });
      placed.insert(at, entry);
      high_water = std::max(high_water, offset + size);
    }
    rank.mutable_buffers(storage.root)->set_offset(offset);
  }
  return high_water;
}

}  // namespace

Status planMemory(planpb::RankPlan& rank) {
  const int32_t num_buffers = rank.buffers_size();
  for (int32_t id = 0; id < num_buffers; ++id) {
    if (bufferBytes(rank.buffers(id)) < 0)
      return Status::internal("memory planner: buffer '" + rank.buffers(id).name() + "' has an invalid type");
    if (rank.buffers(id).has_alias_of() &&
        (rank.buffers(id).alias_of() < 0 || rank.buffers(id).alias_of() >= num_buffers))
      return Status::internal("memory planner: buffer '" + rank.buffers(id).name() + "' aliases an unknown buffer");
  }
  // 1. Persistent storage: laid out from offset 0 in buffer order.
  int64_t persistent_end = 0;
  for (int32_t id = 0; id < num_buffers; ++id) {
    if (rank.buffers(id).has_alias_of() || !isPersistentStorage(rank, id)) continue;
    rank.mutable_buffers(id)->set_offset(persistent_end);
    persistent_end += alignUp(bufferBytes(rank.buffers(id)));
  }
  rank.set_persistent_bytes(persistent_end);
  int64_t arena_end = persistent_end;

  // 2. Each program's other storages, above the persistent region. A storage belongs to one program.
  std::vector<int> owner(num_buffers, -1);
  for (int p = 0; p < rank.programs_size(); ++p) {
    std::vector<StorageLifetime> storages;
    for (const StorageLifetime& lifetime : programLifetimes(rank, rank.programs(p))) {
      if (isPersistentStorage(rank, lifetime.root)) continue;
      if (owner[lifetime.root] >= 0)
        return Status::internal("memory planner: buffer '" + rank.buffers(lifetime.root).name() +
                                "' is used by programs '" + rank.programs(owner[lifetime.root]).name() + "' and '" +
                                rank.programs(p).name() + "'; only persistent buffers may be shared");
      owner[lifetime.root] = p;
      storages.push_back(lifetime);
    }
    int64_t high_water = placeProgramStorages(rank, std::move(storages), persistent_end);
    rank.mutable_programs(p)->set_peak_bytes(high_water);
    arena_end = std::max(arena_end, high_water);
  }

  // 3. Storages no program touches are never live: they sit at the region's start.
  for (int32_t id = 0; id < num_buffers; ++id) {
    if (rank.buffers(id).has_alias_of() || isPersistentStorage(rank, id) || owner[id] >= 0) continue;
    rank.mutable_buffers(id)->set_offset(persistent_end);
    arena_end = std::max(arena_end, persistent_end + alignUp(bufferBytes(rank.buffers(id))));
  }

  // 4. Aliases share their root's bytes.
  for (int32_t id = 0; id < num_buffers; ++id)
    if (rank.buffers(id).has_alias_of())
      rank.mutable_buffers(id)->set_offset(rank.buffers(storageRoot(rank, id)).offset());
  rank.set_arena_bytes(arena_end);
  return Status::ok();
}

MemoryReport memoryReport(const planpb::RankPlan& rank) {
  MemoryReport report;
  for (const planpb::Buffer& buffer : rank.buffers()) {
    if (buffer.has_alias_of()) continue;
    int64_t bytes = std::max<int64_t>(bufferBytes(buffer), 0);
    switch (buffer.kind()) {
      case planpb::BUFFER_PARAM: report.param_bytes += bytes; break;
      case planpb::BUFFER_OPTIMIZER_STATE: report.optimizer_state_bytes += bytes; break;
      case planpb::BUFFER_GRADIENT: report.gradient_bytes += bytes; break;
      case planpb::BUFFER_INPUT: report.input_bytes += bytes; break;
      case planpb::BUFFER_OUTPUT: report.output_bytes += bytes; break;
      default: report.activation_bytes += bytes; break;
    }
  }
  report.persistent_bytes = rank.persistent_bytes();
  report.arena_bytes = rank.arena_bytes();
  report.activation_region_bytes = rank.arena_bytes() - rank.persistent_bytes();
  return report;
}

}  // namespace cleave
