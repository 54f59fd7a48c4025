// Lowering to a plan: one-device graphs (train, eval, infer) become one rank's buffers and programs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/plan.pb.h"
#include "ir/status.h"

namespace cleave {

// One graph to lower into the program of the same name ("train", "eval", "infer").
struct ProgramGraph {
  std::string name;
  const Graph* graph = nullptr;
};

// What lowerToPlan needs: the graphs, which share parameters by name, and the plan's metadata.
struct LoweringInput {
  std::vector<ProgramGraph> programs;
  std::string producer = "cleave";  // e.g. "cleave 0.1.0"
  std::string model_name;
  std::string model_file;
  int64_t global_batch = 0;
  std::string schedule = "gpipe";
};

// True when a parameter holds optimizer state rather than model weights: it is not trainable and
// its name is "step" (the step counter) or contains ".momentum", ".exp_avg" or ".exp_avg_sq"
// (SGD momentum buffers, Adam moments), as the optimizer pass names them.
bool isOptimizerState(std::string_view param_name, bool trainable);

// True when `value_name` is a parameter's gradient as autodiff names it: "<param>.grad", where
// <param> names a parameter of `graph`.
bool isParameterGradient(const Graph& graph, std::string_view value_name);

// True for ops lowered as views: no instruction, the result shares the operand's bytes
// (reshape, flatten, squeeze, unsqueeze, identity).
bool isViewOp(OpId op);

// True for ops whose kernels may write a result over an operand of the same type, so a state
// update may compute its new value in place (elementwise and optimizer ops).
bool allowsInPlaceResult(OpId op);

// Lowers graphs for one device (rank 0, stage 0; dp = tp = pp = 1, one microbatch) into a
// memory-planned, validated plan. Every parameter becomes one persistent buffer shared by all
// programs; every node an instruction, except views, which alias their operand; graph inputs and
// outputs become program inputs and outputs; each state update either writes its new value in
// place over the parameter (an alias) or copies it there at the end of the program. The plan's
// `training` is left empty for the caller. Errors name the program and the value at fault.
Expected<planpb::Plan> lowerToPlan(const LoweringInput& input);

}  // namespace cleave
