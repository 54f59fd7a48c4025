// Graphviz drawing of a plan: one program's instructions on every rank, coloured by pipeline stage.
#pragma once

#include <string>
#include <string_view>

#include "ir/plan.pb.h"

namespace cleave {

// What planDot draws.
struct DotOptions {
  // kSummary: one cluster per pipeline stage drawn from its first rank, one node per phase (a
  // microbatch's forward or backward, the step's tail), folding kernels and in-stage collectives into
  // counts; sends and receives between stages drawn. kFull: every instruction of every rank.
  enum class Detail { kSummary, kFull };
  Detail detail = Detail::kSummary;
  // Most nodes drawn. Above it, each run of consecutive compute instructions becomes one node;
  // if that is still too many, ranks are left out (the graph's title says which).
  int max_nodes = 2000;
  int only_rank = -1;  // >= 0: draw that rank only
};

// A Graphviz digraph of `program`. The summary (the default): per stage, its phases in program order
// ("forward of microbatch 2: 120 kernels, 8 all_reduce (0.26 MB)") and the transfers between stages.
// In full: one cluster per rank (titled with its stage and mesh
// coordinates), one node per instruction filled with its stage's colour (communication as
// ellipses), solid edges for data dependencies, dashed edges from each send to its recv, and
// dotted lines joining the members of each collective.
std::string planDot(const planpb::Plan& plan, std::string_view program, const DotOptions& options = {});

}  // namespace cleave
