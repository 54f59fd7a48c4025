// Freezing parameters by name (see parameter_freezing.h).
#include "passes/training/parameter_freezing.h"

#include <fnmatch.h>

namespace cleave {
namespace {

// "a, b, c and 4 more" of the first `shown` names.
std::string someNames(const std::vector<std::string>& names, size_t shown) {
  std::string text;
  for (size_t i = 0; i < names.size() && i < shown; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > shown) text += " and " + std::to_string(names.size() - shown) + " more";
  return text;
}

}  // namespace

Expected<int> freezeParameters(Graph& graph, const std::vector<std::string>& patterns) {
  std::vector<std::string> names;
  for (const Param& param : graph.params) names.push_back(graph.values[param.value].name);
  for (const std::string& pattern : patterns)
    if (pattern.empty()) return Status::usage("freeze: an empty pattern names no parameter");
  for (const std::string& pattern : patterns) {
    bool matched = false;
    for (size_t i = 0; i < names.size(); ++i) {
      if (fnmatch(pattern.c_str(), names[i].c_str(), 0) != 0) continue;
      graph.params[i].trainable = false;
      matched = true;
    }
    if (!matched)
      return Status::usage("freeze: '" + pattern + "' matches no parameter of the model (" +
                           (names.empty() ? std::string("it has none") : "it has " + someNames(names, 6)) + ")");
  }
  int frozen = 0;
  for (const Param& param : graph.params) frozen += param.trainable ? 0 : 1;
  return frozen;
}

std::string frozenParametersSummary(const Graph& graph, size_t shown) {
  std::vector<std::string> names;
  int64_t elements = 0;
  for (const Param& param : graph.params) {
    if (param.trainable) continue;
    names.push_back(graph.values[param.value].name);
    elements += graph.values[param.value].type.numel();
  }
  if (names.empty()) return "";
  return std::to_string(names.size()) + " parameter" + (names.size() == 1 ? "" : "s") + " (" +
         std::to_string(elements) + " element" + (elements == 1 ? "" : "s") + "): " + someNames(names, shown);
}

}  // namespace cleave
