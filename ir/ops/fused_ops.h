// Op ids of the fused family: nodes the fusion pass makes from chains of elementwise ops; the ops
// are defined in ir/ops/fused_ops.cpp, their bodies in ir/ops/fused_body.h.
#pragma once

#include <vector>

// The family's ops as X(id, "text name"), in OpId order; ir/op_table.h builds OpId from every family's list.
#define CLEAVE_FUSED_OPS(X) \
  X(fused, "fused")

namespace cleave {
struct OpDef;
struct OpContext;
namespace ops {
// Appends the definition of every op in CLEAVE_FUSED_OPS to `table`.
void addFusedOps(std::vector<OpDef>& table);
// Bytes the steps of a fused node would read and write as separate nodes, less the bytes the fused
// node moves (0 for an invalid node): what fusion saves per run.
double fusedBytesSaved(const OpContext& ctx);
}  // namespace ops
}  // namespace cleave
