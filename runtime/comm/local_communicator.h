// LocalCommunicator: the ranks of a plan as threads of one process, communicating through shared memory.
#pragma once

#include <memory>
#include <vector>

#include "runtime/comm/communicator.h"

namespace cleave::runtime {

// Creates the endpoints of `ranks` in-process ranks (endpoint i is rank i), each to be used by one
// thread. Collectives read the peers' tensors directly: all-reduce is a ring (a reduce-scatter then
// an all-gather over group-size chunks, each rank reading 2(n-1)/n of the data) that sums in a fixed
// order, so every rank and every run gets bitwise the same result; all-gather, reduce-scatter and
// all-to-all read each peer's block once. Sends are copied into the receiver's mailbox. Every wait
// ends after `timeout_seconds`, or as soon as any endpoint aborts. A wait of `stall_seconds` (then
// twice, four times as long...) prints a warning naming the rank that holds it up and what that
// rank is doing (rank_activity.h; 0: no warnings).
std::vector<std::unique_ptr<Communicator>> createLocalCommunicators(int ranks, double timeout_seconds = 300,
                                                                    double stall_seconds = 0);

}  // namespace cleave::runtime
