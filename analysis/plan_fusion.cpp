// Reads a program's kernel instructions and prices them (and its fused nodes) with the op table's cost rules.
#include "analysis/plan_fusion.h"

#include "analysis/plan_kernels.h"
#include "ir/ops/fused_ops.h"

namespace cleave {
namespace {

// Calls visit for each kernel instruction of the programs of `rank` named `program`.
Status forEachKernelOf(const planpb::RankPlan& rank, std::string_view program, const KernelVisitor& visit) {
  for (const planpb::Program& p : rank.programs())
    if (p.name() == program) CLEAVE_TRY(forEachKernel(rank, p, visit));
  return Status::ok();
}

}  // namespace

Expected<double> kernelBytes(const planpb::RankPlan& rank, std::string_view program) {
  double bytes = 0;
  CLEAVE_TRY(forEachKernelOf(rank, program, [&](int, const planpb::Instruction&, const OpContext& ctx) {
    bytes += ctx.def.cost(ctx).bytes;
  }));
  return bytes;
}

Expected<std::vector<FusedNodeReport>> fusedNodes(const planpb::RankPlan& rank, std::string_view program) {
  std::vector<FusedNodeReport> nodes;
  CLEAVE_TRY(forEachKernelOf(rank, program, [&](int i, const planpb::Instruction& instruction, const OpContext& ctx) {
    if (ctx.def.id != OpId::fused && ctx.def.id != OpId::sgd_matmul_update) return;
    FusedNodeReport node;
    node.instruction = i;
    node.op = std::string(ctx.def.name);
    node.source = instruction.source();
    node.bytes = ctx.def.cost(ctx).bytes;
    if (ctx.def.id == OpId::fused) {
      node.body = ctx.getString("body");
      node.bytes_saved = ops::fusedBytesSaved(ctx);
    } else {  // the weight gradient its matmul would write and its sgd_update read back
      node.bytes_saved = 2.0 * static_cast<double>(ctx.operands[0].bytes());
    }
    nodes.push_back(std::move(node));
  }));
  return nodes;
}

}  // namespace cleave
