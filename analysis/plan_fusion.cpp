// Reads a program's kernel instructions and prices them (and its fused nodes) with the op table's cost rules.
#include "analysis/plan_fusion.h"

#include <optional>

#include "ir/op_table.h"
#include "ir/ops/fused_ops.h"
#include "ir/plan.h"

namespace cleave {
namespace {

// Calls visit(index, instruction, ctx) for each kernel instruction of `program` of `rank`.
template <class Visit>
Status forEachKernel(const planpb::RankPlan& rank, std::string_view program, Visit&& visit) {
  auto typesOf = [&](const auto& ids) -> Expected<std::vector<TensorType>> {
    std::vector<TensorType> types;
    for (int32_t id : ids) {
      if (id < 0 || id >= rank.buffers_size())
        return Status::badInput("rank " + std::to_string(rank.rank()) + ": buffer " + std::to_string(id) + " is out of range");
      CLEAVE_ASSIGN_OR_RETURN(TensorType type, fromProto(rank.buffers(id).type()));
      types.push_back(std::move(type));
    }
    return types;
  };
  for (const planpb::Program& p : rank.programs()) {
    if (p.name() != program) continue;
    for (int i = 0; i < p.instructions_size(); ++i) {
      const planpb::Instruction& instruction = p.instructions(i);
      if (instruction.kind() != planpb::KERNEL) continue;
      std::optional<OpId> op = lookupOp(instruction.op());
      if (!op) return Status::badInput("rank " + std::to_string(rank.rank()) + ": unknown op '" + instruction.op() + "'");
      CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorType> operands, typesOf(instruction.operands()));
      CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorType> results, typesOf(instruction.results()));
      AttrMap attrs;
      for (const auto& [name, attr] : instruction.attrs()) {
        CLEAVE_ASSIGN_OR_RETURN(Attribute value, fromProto(attr));
        attrs.emplace(name, std::move(value));
      }
      visit(i, instruction, OpContext{opDef(*op), operands, results, attrs});
    }
  }
  return Status::ok();
}

}  // namespace

Expected<double> kernelBytes(const planpb::RankPlan& rank, std::string_view program) {
  double bytes = 0;
  CLEAVE_TRY(forEachKernel(rank, program, [&](int, const planpb::Instruction&, const OpContext& ctx) {
    bytes += ctx.def.cost(ctx).bytes;
  }));
  return bytes;
}

Expected<std::vector<FusedNodeReport>> fusedNodes(const planpb::RankPlan& rank, std::string_view program) {
  std::vector<FusedNodeReport> nodes;
  CLEAVE_TRY(forEachKernel(rank, program, [&](int i, const planpb::Instruction& instruction, const OpContext& ctx) {
    if (ctx.def.id != OpId::fused) return;
    FusedNodeReport node;
    node.instruction = i;
    node.body = ctx.getString("body");
    node.source = instruction.source();
    node.bytes = ctx.def.cost(ctx).bytes;
    node.bytes_saved = ops::fusedBytesSaved(ctx);
    nodes.push_back(std::move(node));
  }));
  return nodes;
}

}  // namespace cleave
