// nn.Embedding's padding_idx on the lookups of a model that lost it: ONNX's Gather has no such
// attribute, and the TorchScript exporter records nothing (torch.export's exports do; the importer
// reads them). With padding_idx p a gather gives row p's lookups their value but no gradient.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// The embedding tables named by a glob (fnmatch(3): `*` matches dots too) and their padding row.
struct EmbeddingPadding {
  std::string table;
  int64_t padding_idx = -1;
};

// Parses "GLOB=ID" (ID >= 0); a usage error naming the text otherwise.
Expected<EmbeddingPadding> parseEmbeddingPadding(const std::string& text);

// Sets padding_idx on every gather along axis 0 whose data operand is a parameter matching a spec's
// table. Returns the number of lookups set. Errors (kUsage): a spec that matches no such lookup
// (naming the parameters that are looked up), a padding_idx outside its table's rows.
Expected<int> setEmbeddingPadding(Graph& graph, const std::vector<EmbeddingPadding>& specs);

}  // namespace cleave
