// What the recognition passes (rms_norm.h, gelu_recognition.h) ask of a graph while matching a
// decomposed op: which node makes a value that one node alone reads, so the chain can be replaced.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace cleave {

class SingleReaderChain {
 public:
  explicit SingleReaderChain(const Graph& graph);

  // The node producing `v` when it is an `op` whose one result only `reader` reads (not a graph
  // output nor a state update's new value); else -1.
  int32_t producerReadOnlyBy(ValueId v, OpId op, int32_t reader) const;

 private:
  const Graph& graph_;
  std::vector<std::vector<int32_t>> users_;
  std::vector<bool> is_root_;
};

}  // namespace cleave
