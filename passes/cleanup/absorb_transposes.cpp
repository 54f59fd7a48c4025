// Transposes absorbed by matmul and gemm (transpose_a, transpose_b).
#include "passes/cleanup/absorb_transposes.h"

#include <string>
#include <utility>

#include "ir/ops/op_rules.h"

namespace cleave {

Expected<int> absorbTransposesIntoProducts(Graph& graph) {
  const std::vector<std::vector<int32_t>> users = graph.computeUsers();
  const std::vector<bool> is_root = graph.valuesReadAfterNodes();  // outputs and updated state: types stay
  int rewritten = 0;
  for (Node& product : graph.nodes) {
    if (product.op != OpId::matmul && product.op != OpId::gemm) continue;
    for (size_t k = 0; k < 2; ++k) {
      const ValueId operand = product.operands[k];
      const int32_t producer = graph.values[operand].producer;
      if (producer < 0 || graph.nodes[producer].op != OpId::transpose) continue;
      Node& transpose = graph.nodes[producer];
      const TensorType& input = graph.values[transpose.operands[0]].type;
      const int64_t rank = input.rank();
      if (rank < 2) continue;
      auto perm = ops::transposePerm(OpContext{opDef(OpId::transpose), {&input, 1}, {}, transpose.attrs});
      if (!perm || (*perm)[rank - 2] != rank - 1) continue;
      std::vector<int64_t> swapped = std::move(*perm);
      std::swap(swapped[rank - 2], swapped[rank - 1]);
      bool identity = true;
      for (int64_t d = 0; d < rank; ++d) identity = identity && swapped[d] == d;
      const std::string flag = k == 0 ? "transpose_a" : "transpose_b";
      const int64_t was = OpContext{opDef(product.op), {}, {}, product.attrs}.getInt(flag);
      if (identity) {
        product.operands[k] = transpose.operands[0];
      } else {
        // The transpose's result changes: only when this product alone reads it, once.
        if (users[operand].size() != 1 || is_root[operand]) continue;
        transpose.attrs["perm"] = swapped;
        Shape& shape = graph.values[operand].type.shape;
        std::swap(shape[rank - 2], shape[rank - 1]);
      }
      product.attrs[flag] = int64_t{1 - was};
      ++rewritten;
    }
  }
  return rewritten;
}

}  // namespace cleave
