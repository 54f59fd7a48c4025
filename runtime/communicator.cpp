// Communicator: the collectives and point-to-point transfers ranks of a plan use, over explicit groups.
#include "runtime/communicator.h"

namespace cleave::runtime {

Expected<ReduceOp> parseReduceOp(std::string_view name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "mean") return ReduceOp::kMean;
  if (name == "max") return ReduceOp::kMax;
  return Status::badInput("unknown reduce op '" + std::string(name) + "' (sum, mean, max)");
}

std::string_view reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMean: return "mean";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

std::string groupText(std::span<const int> group) {
  std::string text = "{";
  for (size_t i = 0; i < group.size(); ++i) text += (i ? "," : "") + std::to_string(group[i]);
  return text + "}";
}

}  // namespace cleave::runtime
