// The kernel instructions of a plan's program, each with its op's context (types and attributes),
// for the readers that price them with the op table's cost rules.
#pragma once

#include <functional>

#include "ir/op_table.h"
#include "ir/plan.pb.h"
#include "ir/status.h"

namespace cleave {

// Called with a kernel instruction's index in its program, the instruction and its op's context.
using KernelVisitor = std::function<void(int index, const planpb::Instruction& instruction, const OpContext& op)>;

// Calls `visit` for each kernel instruction of `program` (a program of `rank`), in program order.
// Errors (kBadInput, naming the rank): an unknown op, a buffer id out of range, a bad attribute.
Status forEachKernel(const planpb::RankPlan& rank, const planpb::Program& program, const KernelVisitor& visit);

}  // namespace cleave
