// Memory planning: persistent layout, greedy-by-size activation offsets over lifetimes, and memory reports.
#include "passes/lowering/memory_planner.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
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

// The storages placed so far, in order of offset, cut into runs of at most 2 * kRun. The walk in
// lowestFreeOffset is the greedy planner's: upwards through the storages live at the same time as
// the one being placed, until the gap below the next one holds it. Each run keeps a summary so the
// walk crosses a run in one step when it may:
//  - no storage of the run is live then: skip it;
//  - every storage of the run is live then, no gap between them holds the storage, nor the gap
//    below the run's first: the walk ends above the run's highest end.
// In a training program the activations kept for the backward pass are live together over long
// spans, and the walks cross thousands of them: those are the runs crossed in one step.
class PlacedStorages {
 public:
  // The lowest offset at or above `base` where `size` bytes are free over times [first, last].
  int64_t lowestFreeOffset(int64_t base, int64_t size, int64_t first, int64_t last) const {
    int64_t offset = base;
    for (const Run& run : runs_) {
      if (run.max_last < first || last < run.min_first) continue;
      const bool all_live = first <= run.min_last && run.max_first <= last;
      if (all_live && run.largest_gap < size && offset + size > run.storages.front().offset) {
        offset = std::max(offset, run.max_end);
        continue;
      }
      for (const PlacedStorage& other : run.storages) {
        if (other.last < first || last < other.first) continue;
        if (offset + size <= other.offset) return offset;
        offset = std::max(offset, other.end);
      }
    }
    return offset;
  }

  void add(const PlacedStorage& entry) {
    if (runs_.empty()) runs_.emplace_back();
    // The last run whose first storage starts at or below the entry (the first run otherwise).
    auto run = std::upper_bound(runs_.begin() + 1, runs_.end(), entry.offset,
                                [](int64_t offset, const Run& r) { return offset < r.storages.front().offset; });
    --run;
    auto at = std::upper_bound(run->storages.begin(), run->storages.end(), entry,
                               [](const PlacedStorage& a, const PlacedStorage& b) { return a.offset < b.offset; });
    run->storages.insert(at, entry);
    if (run->storages.size() < 2 * kRun) {
      run->summarize();
      return;
    }
    Run upper;
    upper.storages.assign(run->storages.begin() + kRun, run->storages.end());
    run->storages.resize(kRun);
    run->summarize();
    upper.summarize();
    runs_.insert(run + 1, std::move(upper));
  }

 private:
  static constexpr size_t kRun = 64;
  struct Run {
    std::vector<PlacedStorage> storages;  // by offset
    // An empty run's summary: no storage is live at any time.
    int64_t min_first = INT64_MAX, max_first = INT64_MIN, min_last = INT64_MAX, max_last = INT64_MIN;
    int64_t max_end = INT64_MIN;
    int64_t largest_gap = 0;  // the largest gap between a storage and the highest end below it
    void summarize() {
      min_first = min_last = INT64_MAX;
      max_first = max_last = max_end = INT64_MIN;
      largest_gap = 0;
      for (const PlacedStorage& s : storages) {
        if (max_end != INT64_MIN) largest_gap = std::max(largest_gap, s.offset - max_end);
        min_first = std::min(min_first, s.first);
        max_first = std::max(max_first, s.first);
        min_last = std::min(min_last, s.last);
        max_last = std::max(max_last, s.last);
        max_end = std::max(max_end, s.end);
      }
    }
  };
  std::vector<Run> runs_;
};

// Places one program's non-persistent storages above `base` and returns the region's high-water
// mark (an absolute offset).
int64_t placeProgramStorages(planpb::RankPlan& rank, const std::vector<StorageLifetime>& lifetimes, int64_t base) {
  std::vector<StorageRequest> requests;
  requests.reserve(lifetimes.size());
  for (const StorageLifetime& lifetime : lifetimes)
    requests.push_back({alignUp(bufferBytes(rank.buffers(lifetime.root))), lifetime.first, lifetime.last});
  const std::vector<int64_t> offsets = placeGreedyBySize(requests, base);
  int64_t high_water = base;
  for (size_t i = 0; i < lifetimes.size(); ++i) {
    rank.mutable_buffers(lifetimes[i].root)->set_offset(offsets[i]);
    high_water = std::max(high_water, offsets[i] + requests[i].size);
  }
  return high_water;
}

}  // namespace

std::vector<int64_t> placeGreedyBySize(const std::vector<StorageRequest>& storages, int64_t base) {
  std::vector<size_t> order(storages.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (storages[a].size != storages[b].size) return storages[a].size > storages[b].size;
    return storages[a].first != storages[b].first ? storages[a].first < storages[b].first : a < b;
  });
  std::vector<int64_t> offsets(storages.size(), base);
  PlacedStorages placed;
  for (size_t i : order) {
    const StorageRequest& s = storages[i];
    if (s.size <= 0) continue;
    offsets[i] = placed.lowestFreeOffset(base, s.size, s.first, s.last);
    placed.add(PlacedStorage{offsets[i], offsets[i] + s.size, s.first, s.last});
  }
  return offsets;
}

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
