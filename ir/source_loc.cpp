// SourceLoc: text form for diagnostics.
#include "ir/source_loc.h"

namespace cleave {

std::string SourceLoc::str() const {
  std::string s = file.empty() ? std::string() : file;
  if (line > 0) s += ":" + std::to_string(line) + ":" + std::to_string(col);
  if (!node_name.empty()) s += (s.empty() ? "" : " ") + std::string("(node '") + node_name + "')";
  return s.empty() ? "<unknown>" : s;
}

}  // namespace cleave
