// Op ids of the loss family; the ops are defined in ir/ops/loss.cpp.
#pragma once

#include <vector>

// The family's ops as X(id, "text name"), in OpId order; ir/op_table.h builds OpId from every family's list.
#define CLEAVE_LOSS_OPS(X) \
  X(softmax_cross_entropy, "softmax_cross_entropy") \
  X(mse, "mse") \
  X(softmax_cross_entropy_and_grad, "softmax_cross_entropy_and_grad")

namespace cleave {
struct OpDef;
namespace ops {
// Appends the definition of every op in CLEAVE_LOSS_OPS to `table`.
void addLossOps(std::vector<OpDef>& table);
}  // namespace ops
}  // namespace cleave
