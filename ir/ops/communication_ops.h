// Op ids of the communication family (collectives, pipeline send/recv); the ops are defined in ir/ops/communication_ops.cpp.
#pragma once

#include <vector>

// The family's ops as X(id, "text name"), in OpId order; ir/op_table.h builds OpId from every family's list.
#define CLEAVE_COMMUNICATION_OPS(X) \
  X(all_reduce, "all_reduce") \
  X(grad_all_reduce, "grad_all_reduce") \
  X(all_gather, "all_gather") \
  X(reduce_scatter, "reduce_scatter") \
  X(shard_slice, "shard_slice") \
  X(all_to_all, "all_to_all") \
  X(send, "send") \
  X(recv, "recv")

namespace cleave {
struct OpDef;
namespace ops {
// Appends the definition of every op in CLEAVE_COMMUNICATION_OPS to `table`.
void addCommunicationOps(std::vector<OpDef>& table);
}  // namespace ops
}  // namespace cleave
