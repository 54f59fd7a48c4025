// Storage in a plan: buffer sizes, alias roots and per-program storage lifetimes.
#include "ir/plan_storage.h"

#include <algorithm>
#include <limits>
#include <map>

#include "ir/dtype.h"
#include "ir/plan.pb.h"

namespace cleave {
namespace {
// The largest buffer accepted; keeps offset + bytes sums far from overflow.
constexpr int64_t kMaxBufferBytes = std::numeric_limits<int64_t>::max() / 4;
}  // namespace

int64_t bufferBytes(const planpb::Buffer& buffer) {
  auto dtype = parseDType(buffer.type().dtype());
  if (!dtype) return -1;
  int64_t bytes = dtypeSize(*dtype);
  for (int64_t dim : buffer.type().shape()) {
    if (dim < 0) return -1;
    if (dim != 0 && bytes > kMaxBufferBytes / dim) return -1;
    bytes *= dim;
  }
  return bytes;
}

int32_t storageRoot(const planpb::RankPlan& rank, int32_t buffer_id) {
  // A valid plan's aliases name their root directly; the bound guards against cycles in bad ones.
  for (int steps = 0; steps < rank.buffers_size(); ++steps) {
    const planpb::Buffer& buffer = rank.buffers(buffer_id);
    if (!buffer.has_alias_of()) return buffer_id;
    buffer_id = buffer.alias_of();
  }
  return buffer_id;
}

bool isPersistentStorage(const planpb::RankPlan& rank, int32_t buffer_id) {
  planpb::BufferKind kind = rank.buffers(storageRoot(rank, buffer_id)).kind();
  return kind == planpb::BUFFER_PARAM || kind == planpb::BUFFER_OPTIMIZER_STATE;
}

int64_t programEndTime(const planpb::Program& program) { return program.instructions_size() + 1; }

std::vector<StorageLifetime> programLifetimes(const planpb::RankPlan& rank, const planpb::Program& program) {
  const int64_t end = programEndTime(program);
  std::map<int32_t, StorageLifetime> by_root;
  auto touch = [&](int32_t buffer_id, int64_t time) {
    int32_t root = storageRoot(rank, buffer_id);
    auto [it, inserted] = by_root.try_emplace(root, StorageLifetime{root, time, time});
    if (!inserted) {
      it->second.first = std::min(it->second.first, time);
      it->second.last = std::max(it->second.last, time);
    }
  };
  // 1. Persistent storages are live throughout every program.
  for (int32_t id = 0; id < rank.buffers_size(); ++id)
    if (!rank.buffers(id).has_alias_of() && isPersistentStorage(rank, id)) {
      touch(id, 0);
      touch(id, end);
    }
  // 2. Inputs are written before the first instruction; outputs are read after the last.
  for (const auto& input : program.inputs()) touch(input.buffer(), 0);
  for (const auto& output : program.outputs()) touch(output.buffer(), end);
  // 3. Every operand and result keeps its storage live at its instruction's time.
  for (int i = 0; i < program.instructions_size(); ++i) {
    const planpb::Instruction& instruction = program.instructions(i);
    for (int32_t id : instruction.operands()) touch(id, i + 1);
    for (int32_t id : instruction.results()) touch(id, i + 1);
  }
  std::vector<StorageLifetime> lifetimes;
  lifetimes.reserve(by_root.size());
  for (const auto& [root, lifetime] : by_root) lifetimes.push_back(lifetime);
  return lifetimes;
}

}  // namespace cleave
