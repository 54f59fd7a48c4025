// Reads a program's kernel instructions back into op contexts: buffer types and attributes.
#include "analysis/plan_kernels.h"

#include <optional>

#include "ir/plan.h"

namespace cleave {

Status forEachKernel(const planpb::RankPlan& rank, const planpb::Program& program, const KernelVisitor& visit) {
  auto typesOf = [&](const google::protobuf::RepeatedField<int32_t>& ids) -> Expected<std::vector<TensorType>> {
    std::vector<TensorType> types;
    for (int32_t id : ids) {
      if (id < 0 || id >= rank.buffers_size())
        return Status::badInput("rank " + std::to_string(rank.rank()) + ": buffer id " + std::to_string(id) +
                                " is out of range");
      CLEAVE_ASSIGN_OR_RETURN(TensorType type, fromProto(rank.buffers(id).type()));
      types.push_back(std::move(type));
    }
    return types;
  };
  for (int i = 0; i < program.instructions_size(); ++i) {
    const planpb::Instruction& instruction = program.instructions(i);
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
  return Status::ok();
}

}  // namespace cleave
