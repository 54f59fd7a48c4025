// SourceLoc: where a node came from (text file line and column, or an ONNX node name).
#pragma once

#include <string>

namespace cleave {

// The origin of a node, carried into every diagnostic about it.
struct SourceLoc {
  std::string file;       // model file path; empty when the node was made by a pass or generator
  int line = 0;           // 1-based line in a text file; 0 when unknown
  int col = 0;            // 1-based column; 0 when unknown
  std::string node_name;  // name in the source model (ONNX node name); empty when none

  bool known() const { return !file.empty() || !node_name.empty(); }
  // "file:line:col" when a line is known, else "file (node 'name')", else "<unknown>".
  std::string str() const;
};

}  // namespace cleave
