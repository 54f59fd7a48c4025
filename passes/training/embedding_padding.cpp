// nn.Embedding's padding_idx set by name on a graph's lookups (see embedding_padding.h).
#include "passes/training/embedding_padding.h"

#include <fnmatch.h>

#include <charconv>

#include "ir/op_table.h"

namespace cleave {

Expected<EmbeddingPadding> parseEmbeddingPadding(const std::string& text) {
  const size_t equals = text.rfind('=');
  EmbeddingPadding spec;
  if (equals != std::string::npos && equals > 0) {
    spec.table = text.substr(0, equals);
    const char* first = text.data() + equals + 1;
    const char* last = text.data() + text.size();
    auto [end, error] = std::from_chars(first, last, spec.padding_idx);
    if (error == std::errc() && end == last && first != last && spec.padding_idx >= 0) return spec;
  }
  return Status::usage("padding-idx: expected TABLE=ID (a glob on an embedding table's parameter name and a row "
                       "number >= 0), got '" + text + "'");
}

Expected<int> setEmbeddingPadding(Graph& graph, const std::vector<EmbeddingPadding>& specs) {
  int set = 0;
  for (const EmbeddingPadding& spec : specs) {
    std::vector<std::string> tables;  // every parameter a lookup reads, for the error
    int matched = 0;
    for (Node& node : graph.nodes) {
      if (node.op != OpId::gather || !graph.findParam(node.operands[0])) continue;
      if (OpContext{opDef(node.op), {}, {}, node.attrs}.getInt("axis") != 0) continue;
      const Value& table = graph.values[node.operands[0]];
      tables.push_back(table.name);
      if (fnmatch(spec.table.c_str(), table.name.c_str(), 0) != 0) continue;
      if (table.type.rank() == 0 || spec.padding_idx >= table.type.shape[0])
        return Status::usage("padding-idx: row " + std::to_string(spec.padding_idx) + " is outside '" + table.name +
                             "' (" + table.type.str() + ")");
      node.attrs["padding_idx"] = spec.padding_idx;
      ++matched;
    }
    if (matched == 0) {
      std::string names;
      for (size_t i = 0; i < tables.size() && i < 6; ++i) names += (i ? ", " : "") + tables[i];
      return Status::usage("padding-idx: '" + spec.table + "' names no embedding lookup's table (" +
                           (tables.empty() ? std::string("the model looks up no parameter") : "tables: " + names) + ")");
    }
    set += matched;
  }
  return set;
}

}  // namespace cleave
