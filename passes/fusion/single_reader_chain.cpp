// Single-reader steps of a decomposed op's chain.
#include "passes/fusion/single_reader_chain.h"

namespace cleave {

SingleReaderChain::SingleReaderChain(const Graph& graph)
    : graph_(graph), users_(graph.computeUsers()), is_root_(graph.valuesReadAfterNodes()) {}

int32_t SingleReaderChain::producerReadOnlyBy(ValueId v, OpId op, int32_t reader) const {
  const int32_t p = graph_.values[v].producer;
  if (p < 0 || graph_.nodes[p].op != op || is_root_[v] || users_[v].size() != 1 || users_[v][0] != reader) return -1;
  return p;
}

}  // namespace cleave
