// The LRU cache model (cache_reuse.h): stack distances of arena chunks, counted with a Fenwick tree
// over access times.
#include "analysis/cache_reuse.h"

#include <algorithm>
#include <unordered_map>

#include "ir/plan_storage.h"

namespace cleave {
namespace {

// Counts of marks over access times 1..n: one mark per chunk, at the time of its last access.
class FenwickTree {
 public:
  explicit FenwickTree(int64_t n) : tree_(static_cast<size_t>(n) + 1, 0) {}
  void add(int64_t time, int delta) {
    for (; time < static_cast<int64_t>(tree_.size()); time += time & -time) tree_[time] += delta;
  }
  int64_t prefix(int64_t time) const {  // marks at times 1..time
    int64_t sum = 0;
    for (; time > 0; time -= time & -time) sum += tree_[time];
    return sum;
  }

 private:
  std::vector<int32_t> tree_;
};

// The chunks [first, last] that `buffer` occupies, or an empty range (first > last) for no bytes.
std::pair<int64_t, int64_t> chunksOf(const planpb::Buffer& buffer) {
  const int64_t bytes = bufferBytes(buffer);
  if (bytes <= 0 || buffer.offset() < 0) return {1, 0};
  return {buffer.offset() / kCacheChunkBytes, (buffer.offset() + bytes - 1) / kCacheChunkBytes};
}

}  // namespace

std::vector<double> cacheMissBytes(const planpb::RankPlan& rank, const planpb::Program& program, int64_t cache_bytes) {
  const int n = program.instructions_size();
  std::vector<double> missed(n, 0.0);
  if (cache_bytes <= 0) return missed;
  auto valid = [&](int32_t id) { return id >= 0 && id < rank.buffers_size(); };
  int64_t accesses = 0;
  for (const planpb::Instruction& instruction : program.instructions())
    for (const auto* ids : {&instruction.operands(), &instruction.results()})
      for (int32_t id : *ids)
        if (valid(id)) {
          auto [first, last] = chunksOf(rank.buffers(id));
          accesses += std::max<int64_t>(last - first + 1, 0);
        }
  if (2 * accesses > (int64_t{1} << 26)) return missed;

  const int64_t capacity = std::max<int64_t>(cache_bytes / kCacheChunkBytes, 1);
  FenwickTree marks(2 * accesses);
  std::unordered_map<int64_t, int64_t> last_access;  // chunk -> time of its last access
  int64_t now = 0;
  // Touches chunk `chunk`; true when it was in the cache (fewer than `capacity` other chunks
  // were touched since its last access).
  auto touch = [&](int64_t chunk) {
    ++now;
    bool hit = false;
    auto found = last_access.find(chunk);
    if (found != last_access.end()) {
      hit = marks.prefix(now - 1) - marks.prefix(found->second) < capacity;
      marks.add(found->second, -1);
      found->second = now;
    } else {
      last_access.emplace(chunk, now);
    }
    marks.add(now, 1);
    return hit;
  };
  // Per instruction, its distinct chunks are touched once each, in the order its operands and then
  // its results list them (an in-place kernel streams its buffer once); a buffer's bytes count as
  // missed in proportion to its chunks that missed.
  std::unordered_map<int64_t, bool> hit_of;  // chunk -> whether this instruction found it cached
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < n; ++i) {
      const planpb::Instruction& instruction = program.instructions(i);
      hit_of.clear();
      for (const auto* ids : {&instruction.operands(), &instruction.results()})
        for (int32_t id : *ids) {
          if (!valid(id)) continue;
          auto [first, last] = chunksOf(rank.buffers(id));
          for (int64_t chunk = first; chunk <= last; ++chunk)
            if (!hit_of.count(chunk)) hit_of[chunk] = touch(chunk);
        }
      if (pass == 0) continue;
      for (const auto* ids : {&instruction.operands(), &instruction.results()})
        for (int32_t id : *ids) {
          if (!valid(id)) continue;
          auto [first, last] = chunksOf(rank.buffers(id));
          if (first > last) continue;
          int64_t misses = 0;
          for (int64_t chunk = first; chunk <= last; ++chunk) misses += hit_of[chunk] ? 0 : 1;
          missed[i] += static_cast<double>(bufferBytes(rank.buffers(id))) * misses / (last - first + 1);
        }
    }
  return missed;
}

}  // namespace cleave
