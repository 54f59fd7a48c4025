// Storage in a plan: buffer sizes, which buffers share bytes, and when each storage is live.
#pragma once

#include <cstdint>
#include <vector>

namespace cleave {
namespace planpb {
class Buffer;
class Program;
class RankPlan;
}  // namespace planpb

// Bytes a buffer's type occupies; -1 when the type is not valid (unknown dtype, negative or
// overflowing dimensions).
int64_t bufferBytes(const planpb::Buffer& buffer);

// The buffer whose bytes `buffer_id` uses: its alias_of root, or itself. Ids must be in range.
int32_t storageRoot(const planpb::RankPlan& rank, int32_t buffer_id);

// True when a buffer's storage outlives every program: parameters and optimizer state.
bool isPersistentStorage(const planpb::RankPlan& rank, int32_t buffer_id);

// When one storage (a root buffer and every alias of it) is live during a program.
// Times: 0 is the program's start (inputs are written), instruction i runs at time i + 1, and
// instructions_size() + 1 is the end (outputs are read). Both ends are inclusive.
struct StorageLifetime {
  int32_t root = 0;
  int64_t first = 0;
  int64_t last = 0;
};

// The time at which a program ends (its outputs are read).
int64_t programEndTime(const planpb::Program& program);

// The lifetime of every storage `program` touches, and of every persistent storage of the rank
// (live from start to end whether used or not), ordered by root id. A storage is live from its
// first write or read to its last read or write; program inputs from the start, outputs to the
// end. Buffer ids and alias_of must be in range (validatePlan checks that first).
std::vector<StorageLifetime> programLifetimes(const planpb::RankPlan& rank, const planpb::Program& program);

}  // namespace cleave
