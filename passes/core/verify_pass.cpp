// The verify pass: checks the graph with the IR verifier and changes nothing.
#include "ir/verifier.h"
#include "passes/core/pass_manager.h"

namespace cleave {

PassInfo makeVerifyPass() {
  return PassInfo{
      .name = "verify",
      .summary = "check that the graph is well formed (operands, attributes, result types)",
      .options = {},
      .run = [](Graph& graph, const PassOptions&) { return verifyGraph(graph); },
  };
}

}  // namespace cleave
