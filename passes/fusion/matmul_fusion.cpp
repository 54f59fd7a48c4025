// Bias adds and transposes folded into matrix products (fused_matmul's bias operand and its perm_a,
// perm_b and perm_result).
#include "passes/fusion/matmul_fusion.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "ir/ops/op_rules.h"

namespace cleave {
namespace {

bool isProduct(OpId op) { return op == OpId::matmul || op == OpId::fused_matmul; }

// The transpose's permutation when it keeps the last dim of a rank >= 3 tensor in place and moves
// another, else empty.
std::vector<int64_t> foldablePerm(const Graph& graph, const Node& node) {
  if (node.op != OpId::transpose) return {};
  const TensorType& input = graph.values[node.operands[0]].type;
  const int64_t rank = input.rank();
  if (rank < 3) return {};
  auto perm = ops::transposePerm(OpContext{opDef(OpId::transpose), {&input, 1}, {}, node.attrs});
  if (!perm || perm->back() != rank - 1 || ops::isIdentityPermutation(*perm)) return {};
  return std::move(*perm);
}

// The permutation `attr` of a product (the identity of `rank` dims when it has none).
std::vector<int64_t> permOf(const Node& product, const std::string& attr, int64_t rank) {
  if (auto it = product.attrs.find(attr); it != product.attrs.end() && !std::get<std::vector<int64_t>>(it->second).empty())
    return std::get<std::vector<int64_t>>(it->second);
  std::vector<int64_t> identity(static_cast<size_t>(rank));
  std::iota(identity.begin(), identity.end(), int64_t{0});
  return identity;
}

bool keepsLastDim(const std::vector<int64_t>& perm) { return perm.back() == static_cast<int64_t>(perm.size()) - 1; }

// transpose(transpose(x, inner), outer) as one permutation of x: its dim i is x's dim inner[outer[i]].
std::vector<int64_t> composed(const std::vector<int64_t>& inner, const std::vector<int64_t>& outer) {
  std::vector<int64_t> perm(outer.size());
  for (size_t i = 0; i < outer.size(); ++i) perm[i] = inner[static_cast<size_t>(outer[i])];
  return perm;
}

// Checks that a rewritten product still gives `result`'s type (an internal error otherwise).
Status checkResult(const Graph& graph, const Node& product) {
  std::vector<TensorType> operands;
  for (ValueId v : product.operands) operands.push_back(graph.values[v].type);
  auto results = inferResultTypes(opDef(product.op), operands, product.attrs);
  if (!results || (*results)[0] != graph.values[product.results[0]].type)
    return Status::internal("matmul fusion: " + graph.values[product.results[0]].name +
                            " would change type: " + (results ? (*results)[0].str() : results.status().message()));
  return Status::ok();
}

class Folder {
 public:
  Folder(Graph& graph, std::vector<int64_t>* node_group) : graph_(graph), node_group_(node_group) {}

  // add(product, bias) where only the add reads the product and no fusable op reads the sum: the
  // product adds the bias itself.
  Expected<int> foldBiases() {
    start();
    int folded = 0;
    for (int32_t i = 0; i < static_cast<int32_t>(graph_.nodes.size()); ++i) {
      const Node& add = graph_.nodes[i];
      if (add.op != OpId::add || add.operands.size() != 2 || is_root_[add.results[0]]) continue;
      bool fusable_reader = false;
      for (int32_t u : users_[add.results[0]])
        fusable_reader = fusable_reader || opDef(graph_.nodes[u].op).fusable || opDef(graph_.nodes[u].op).fusable_along_last_axis;
      if (fusable_reader) continue;
      for (size_t k = 0; k < 2; ++k) {
        const ValueId sum = add.operands[k], bias = add.operands[1 - k];
        const int32_t p = graph_.values[sum].producer;
        if (p < 0 || dead_[p] || !isProduct(graph_.nodes[p].op) || graph_.nodes[p].operands.size() != 2 ||
            is_root_[sum] || users_[sum].size() != 1 || !sameGroup(p, i))
          continue;
        const TensorType& product_type = graph_.values[sum].type;
        const TensorType& bias_type = graph_.values[bias].type;
        if (graph_.values[add.results[0]].type != product_type || bias_type.dtype != product_type.dtype ||
            product_type.rank() < 2 || bias_type.shape != Shape{product_type.shape.back()} ||
            !keepsLastDim(permOf(graph_.nodes[p], "perm_result", product_type.rank())))
          continue;
        Node product = std::move(graph_.nodes[p]);
        product.op = OpId::fused_matmul;
        product.operands.push_back(bias);
        product.results = graph_.nodes[i].results;
        graph_.nodes[i] = std::move(product);
        CLEAVE_TRY(checkResult(graph_, graph_.nodes[i]));
        graph_.nodes[p].results.clear();
        dead_[p] = true;
        ++folded;
        break;
      }
    }
    finish();
    return folded;
  }

  // Transposes read only by products: the products read the transpose's input.
  Expected<int> foldIntoReaders() {
    start();
    int folded = 0;
    for (int32_t t = 0; t < static_cast<int32_t>(graph_.nodes.size()); ++t) {
      const std::vector<int64_t> perm = foldablePerm(graph_, graph_.nodes[t]);
      const ValueId transposed = graph_.nodes[t].results.empty() ? -1 : graph_.nodes[t].results[0];
      if (perm.empty() || is_root_[transposed] || users_[transposed].empty()) continue;
      bool all_products = true;
      for (int32_t u : users_[transposed]) all_products = all_products && isProduct(graph_.nodes[u].op) && sameGroup(u, t);
      if (!all_products) continue;
      const ValueId input = graph_.nodes[t].operands[0];
      for (int32_t u : users_[transposed]) {
        Node& product = graph_.nodes[u];
        if (product.op == OpId::fused_matmul && product.operands[0] != transposed && product.operands[1] != transposed)
          continue;  // already rewritten (a user listed twice)
        product.op = OpId::fused_matmul;
        for (size_t k = 0; k < 2; ++k) {
          if (product.operands[k] != transposed) continue;
          const std::string attr = k == 0 ? "perm_a" : "perm_b";
          product.attrs[attr] = composed(perm, permOf(product, attr, static_cast<int64_t>(perm.size())));
          product.operands[k] = input;
        }
        CLEAVE_TRY(checkResult(graph_, product));
      }
      dead_[t] = true;
      ++folded;
    }
    finish();
    return folded;
  }

  // Transposes of a product's result that nothing else reads: the product writes the transpose's result.
  Expected<int> foldIntoWriters() {
    start();
    int folded = 0;
    for (int32_t t = 0; t < static_cast<int32_t>(graph_.nodes.size()); ++t) {
      const std::vector<int64_t> perm = foldablePerm(graph_, graph_.nodes[t]);
      if (perm.empty()) continue;
      const ValueId product_result = graph_.nodes[t].operands[0];
      const int32_t p = graph_.values[product_result].producer;
      if (p < 0 || !isProduct(graph_.nodes[p].op) || graph_.nodes[p].results.size() != 1 || is_root_[product_result] ||
          users_[product_result].size() != 1 || !sameGroup(p, t))
        continue;
      Node product = std::move(graph_.nodes[p]);
      product.op = OpId::fused_matmul;
      product.attrs["perm_result"] = composed(permOf(product, "perm_result", static_cast<int64_t>(perm.size())), perm);
      product.results = graph_.nodes[t].results;
      graph_.nodes[t] = std::move(product);
      CLEAVE_TRY(checkResult(graph_, graph_.nodes[t]));
      graph_.nodes[p].results.clear();
      dead_[p] = true;
      ++folded;
    }
    finish();
    return folded;
  }

 private:
  void start() {
    users_ = graph_.computeUsers();
    is_root_.assign(graph_.values.size(), false);
    for (ValueId v : graph_.outputs) is_root_[v] = true;
    for (const StateUpdate& update : graph_.updates) is_root_[update.new_value] = true;
    dead_.assign(graph_.nodes.size(), false);
  }
  void finish() {
    if (std::find(dead_.begin(), dead_.end(), true) != dead_.end()) graph_.eraseNodes(dead_, node_group_);
  }
  bool sameGroup(int32_t a, int32_t b) const {
    return !node_group_ || node_group_->empty() || (*node_group_)[a] == (*node_group_)[b];
  }

  Graph& graph_;
  std::vector<int64_t>* node_group_;
  std::vector<std::vector<int32_t>> users_;
  std::vector<bool> is_root_, dead_;
};

}  // namespace

Expected<int> fuseIntoMatmuls(Graph& graph, std::vector<int64_t>* node_group) {
  if (node_group && !node_group->empty() && node_group->size() != graph.nodes.size())
    return Status::internal("matmul fusion: " + std::to_string(node_group->size()) + " node groups for " +
                            std::to_string(graph.nodes.size()) + " nodes");
  Folder folder(graph, node_group);
  CLEAVE_ASSIGN_OR_RETURN(int biases, folder.foldBiases());
  CLEAVE_ASSIGN_OR_RETURN(int into_readers, folder.foldIntoReaders());
  CLEAVE_ASSIGN_OR_RETURN(int into_writers, folder.foldIntoWriters());
  return biases + into_readers + into_writers;
}

}  // namespace cleave
