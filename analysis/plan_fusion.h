// The fused nodes of a plan's programs and the memory traffic their fusion saves, for inspect.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/plan.pb.h"
#include "ir/status.h"

namespace cleave {

// One fused kernel instruction of a program: a fused node, or a weight gradient's product folded into
// its SGD update (sgd_matmul_update).
struct FusedNodeReport {
  int instruction = 0;      // its index in the program
  std::string op;           // fused or sgd_matmul_update
  std::string body;         // a fused node's steps (ir/ops/fused_body.h); empty for sgd_matmul_update
  std::string source;       // the model node it ends (file:line:col)
  double bytes = 0;         // bytes it reads and writes per run
  double bytes_saved = 0;   // bytes its steps would move as separate kernels, less `bytes`
};

// The bytes every kernel instruction of program `program` of `rank` reads and writes per run, by
// the op table's cost rules (the memory traffic fusion reduces). Errors as fusedNodes.
Expected<double> kernelBytes(const planpb::RankPlan& rank, std::string_view program);

// Every fused node and sgd_matmul_update of program `program` of `rank`, in program order (none
// when it has no such program). Errors: an instruction naming an unknown op or buffer.
Expected<std::vector<FusedNodeReport>> fusedNodes(const planpb::RankPlan& rank, std::string_view program);

}  // namespace cleave
