// Op ids of the reduction family (reduce_*, argmax, cumsum, softmax, normalisation); the ops are defined in ir/ops/reduction.cpp.
#pragma once

#include <vector>

// The family's ops as X(id, "text name"), in OpId order; ir/op_table.h builds OpId from every family's list.
#define CLEAVE_REDUCTION_OPS(X) \
  X(reduce_sum, "reduce_sum") \
  X(reduce_mean, "reduce_mean") \
  X(reduce_max, "reduce_max") \
  X(argmax, "argmax") \
  X(cumsum, "cumsum") \
  X(softmax, "softmax") \
  X(log_softmax, "log_softmax") \
  X(layer_norm, "layer_norm") \
  X(rms_norm, "rms_norm") \
  X(batch_norm, "batch_norm")

namespace cleave {
struct OpDef;
namespace ops {
// Appends the definition of every op in CLEAVE_REDUCTION_OPS to `table`.
void addReductionOps(std::vector<OpDef>& table);
}  // namespace ops
}  // namespace cleave
