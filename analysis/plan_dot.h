// Graphviz drawing of a plan: one program's instructions on every rank, coloured by pipeline stage.
#pragma once

#include <string>
#include <string_view>

#include "ir/plan.pb.h"

namespace cleave {

// What planDot draws.
struct DotOptions {
  // Most nodes drawn. Above it, each run of consecutive compute instructions becomes one node;
  // if that is still too many, ranks are left out (the graph's title says which).
  int max_nodes = 2000;
  int only_rank = -1;  // >= 0: draw that rank only
};

// A Graphviz digraph of `program`: one cluster per rank (titled with its stage and mesh
// coordinates), one node per instruction filled with its stage's colour (communication as
// ellipses), solid edges for data dependencies, dashed edges from each send to its recv, and
// dotted lines joining the members of each collective.
std::string planDot(const planpb::Plan& plan, std::string_view program, const DotOptions& options = {});

}  // namespace cleave
