// The freeze pass: parameters named by globs stop training (see passes/training/parameter_freezing.h).
#include "passes/core/pass_manager.h"
#include "passes/training/parameter_freezing.h"

namespace cleave {
namespace {

Status freeze(Graph& graph, const PassOptions& options) {
  return freezeParameters(graph, optionList(options.getString("params"))).status();
}

}  // namespace

PassInfo makeFreezePass() {
  return PassInfo{
      .name = "freeze",
      .summary = "parameters whose names match one of the globs (freeze{params=a.*|b}) become frozen: no gradient, "
                 "no optimizer state, kept as loaded (cleave compile --freeze); a glob that matches none is an error",
      .options = {{"params", std::string(), "globs on parameter names, separated by '|'"}},
      .run = freeze,
  };
}

}  // namespace cleave
