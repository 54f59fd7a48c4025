// Fused projections (a fused QKV) as batched products over their parts (fused_projections.h).
#include "passes/partition/fused_projections.h"

#include <optional>
#include <string>
#include <vector>

#include "ir/op_table.h"
#include "passes/fusion/single_reader_chain.h"

namespace cleave {
namespace {

struct Projection {
  int32_t product = -1;  // the gemm or matmul
  int32_t bias_add = -1;  // matmul's add of the bias, or -1
  int32_t reshape = -1;   // between the product and the split, or -1
  int32_t split = -1;
  ValueId x = kNoValue, weight = kNoValue, bias = kNoValue;
  bool transposed = false;  // the weight is [S·N, K]
  int64_t parts = 0, part_size = 0, k = 0;
};

OpContext attributesOf(const Node& node) { return OpContext{opDef(node.op), {}, {}, node.attrs}; }

class ProjectionMatcher {
 public:
  explicit ProjectionMatcher(const Graph& graph) : graph_(graph), chain_(graph), users_(graph.computeUsers()) {}

  // The projection whose split is node `split`, or nullopt.
  std::optional<Projection> match(int32_t split) const {
    const Node& node = graph_.nodes[split];
    if (node.op != OpId::split) return std::nullopt;
    Projection p;
    p.split = split;
    const TensorType& cut = graph_.values[node.operands[0]].type;
    if (cut.rank() < 1 || normalizeAxis(attributesOf(node).getInt("axis"), cut.rank()) != cut.rank() - 1)
      return std::nullopt;
    const std::vector<int64_t> sizes = attributesOf(node).getInts("sizes");
    p.parts = static_cast<int64_t>(sizes.size());
    if (p.parts < 2) return std::nullopt;
    p.part_size = sizes[0];
    for (int64_t size : sizes)
      if (size != p.part_size || size <= 0) return std::nullopt;
    // The split's operand: the product (+ bias), or a reshape of it that keeps the last dim.
    ValueId produced = node.operands[0];
    if (const int32_t reshape = chain_.producerReadOnlyBy(produced, OpId::reshape, split); reshape >= 0) {
      const ValueId before = graph_.nodes[reshape].operands[0];
      if (graph_.values[before].type.rank() < 1 || graph_.values[before].type.shape.back() != cut.shape.back())
        return std::nullopt;
      p.reshape = reshape;
      produced = before;
    }
    const int32_t reader = p.reshape >= 0 ? p.reshape : split;
    if (const int32_t gemm = chain_.producerReadOnlyBy(produced, OpId::gemm, reader); gemm >= 0) {
      const Node& g = graph_.nodes[gemm];
      const OpContext attrs = attributesOf(g);
      if (attrs.getFloat("alpha") != 1.0 || attrs.getInt("transpose_a") != 0) return std::nullopt;
      if (g.operands.size() == 3 && attrs.getFloat("beta") != 1.0) return std::nullopt;
      p.product = gemm;
      p.transposed = attrs.getInt("transpose_b") != 0;
      if (g.operands.size() == 3) p.bias = g.operands[2];
    } else {
      int32_t matmul = chain_.producerReadOnlyBy(produced, OpId::matmul, reader);
      if (const int32_t add = chain_.producerReadOnlyBy(produced, OpId::add, reader); add >= 0) {
        const Node& a = graph_.nodes[add];
        for (size_t o = 0; o < 2 && matmul < 0; ++o) {
          matmul = chain_.producerReadOnlyBy(a.operands[o], OpId::matmul, add);
          if (matmul >= 0) p.bias = a.operands[1 - o];
        }
        p.bias_add = add;
      }
      if (matmul < 0) return std::nullopt;
      const OpContext attrs = attributesOf(graph_.nodes[matmul]);
      if (attrs.getInt("transpose_a") != 0) return std::nullopt;
      p.product = matmul;
      p.transposed = attrs.getInt("transpose_b") != 0;
    }
    const Node& product = graph_.nodes[p.product];
    p.x = product.operands[0];
    p.weight = product.operands[1];
    // The weight [K, S·N] (or [S·N, K]) and the bias [S·N]: imported data this product alone reads.
    const TensorType& w = graph_.values[p.weight].type;
    const int64_t width = p.parts * p.part_size;
    if (w.rank() != 2 || (p.transposed ? w.shape[0] : w.shape[1]) != width || !onlyHere(p.weight, p.product))
      return std::nullopt;
    p.k = p.transposed ? w.shape[1] : w.shape[0];
    const TensorType& x = graph_.values[p.x].type;
    if (x.rank() < 2 || x.shape.back() != p.k || x.dtype != w.dtype) return std::nullopt;
    if (p.bias != kNoValue) {
      const int32_t bias_reader = p.bias_add >= 0 ? p.bias_add : p.product;
      const TensorType& b = graph_.values[p.bias].type;
      if (b.shape != Shape{width} || b.dtype != w.dtype || !onlyHere(p.bias, bias_reader)) return std::nullopt;
    }
    return p;
  }

 private:
  // `v` is a parameter with stored data that node `reader` alone reads (once).
  bool onlyHere(ValueId v, int32_t reader) const {
    const Param* param = graph_.findParam(v);
    return param && param->init.kind == "data" && param->init.data && users_[v].size() == 1 && users_[v][0] == reader;
  }

  const Graph& graph_;
  SingleReaderChain chain_;
  std::vector<std::vector<int32_t>> users_;
};

// Appends the batched form of `p` (fused_projections.h); its last nodes write the split's results.
Status appendBatched(Graph& graph, const Projection& p) {
  const Node split = graph.nodes[p.split];  // copies: adding nodes moves them
  const SourceLoc loc = graph.nodes[p.product].loc;
  const std::string base = graph.values[split.operands[0]].name;
  const int64_t rows = graph.values[p.x].type.numel() / p.k;
  auto add = [&](OpId op, std::vector<ValueId> operands, AttrMap attrs, const std::string& name) -> Expected<ValueId> {
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> results,
                            graph.addNode(op, std::move(operands), std::move(attrs), loc, {graph.uniqueName(name)}));
    return results[0];
  };
  CLEAVE_ASSIGN_OR_RETURN(ValueId x3, add(OpId::reshape, {p.x}, {{"shape", std::vector<int64_t>{1, rows, p.k}}},
                                          base + ".rows"));
  ValueId product;
  if (p.transposed) {
    CLEAVE_ASSIGN_OR_RETURN(ValueId held, add(OpId::reshape, {p.weight},
                                              {{"shape", std::vector<int64_t>{p.parts, p.part_size, p.k}}},
                                              graph.values[p.weight].name + ".parts"));
    CLEAVE_ASSIGN_OR_RETURN(product, add(OpId::matmul, {x3, held}, {{"transpose_b", int64_t{1}}}, base + ".parts"));
  } else {
    CLEAVE_ASSIGN_OR_RETURN(ValueId held, add(OpId::reshape, {p.weight},
                                              {{"shape", std::vector<int64_t>{p.k, p.parts, p.part_size}}},
                                              graph.values[p.weight].name + ".parts"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId by_part, add(OpId::transpose, {held}, {{"perm", std::vector<int64_t>{1, 0, 2}}},
                                                 graph.values[p.weight].name + ".by_part"));
    CLEAVE_ASSIGN_OR_RETURN(product, add(OpId::matmul, {x3, by_part}, {}, base + ".parts"));
  }
  if (p.bias != kNoValue) {
    CLEAVE_ASSIGN_OR_RETURN(ValueId held, add(OpId::reshape, {p.bias},
                                              {{"shape", std::vector<int64_t>{p.parts, 1, p.part_size}}},
                                              graph.values[p.bias].name + ".parts"));
    CLEAVE_ASSIGN_OR_RETURN(product, add(OpId::add, {product, held}, {}, base + ".parts_biased"));
  }
  CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> pieces,
                          graph.addNode(OpId::split, {product},
                                        {{"axis", int64_t{0}}, {"sizes", std::vector<int64_t>(p.parts, 1)}}, loc));
  for (int64_t s = 0; s < p.parts; ++s) {
    const ValueId result = split.results[static_cast<size_t>(s)];
    CLEAVE_ASSIGN_OR_RETURN(ValueId part, add(OpId::reshape, {pieces[static_cast<size_t>(s)]},
                                              {{"shape", graph.values[result].type.shape}}, base + ".part"));
    graph.nodes.back().results[0] = result;  // the split's result, which its readers keep reading
    (void)part;
  }
  return Status::ok();
}

}  // namespace

Expected<int> batchFusedProjections(Graph& graph) {
  std::vector<Projection> found;
  {
    const ProjectionMatcher matcher(graph);
    for (int32_t i = 0; i < static_cast<int32_t>(graph.nodes.size()); ++i)
      if (auto p = matcher.match(i)) found.push_back(*p);
  }
  if (found.empty()) return 0;
  // The new nodes are appended, then moved to where each split was; the replaced nodes go.
  const size_t original = graph.nodes.size();
  std::vector<int32_t> replaced_by(original, -1);  // split node -> its projection
  std::vector<bool> dropped(original, false);
  std::vector<std::pair<size_t, size_t>> appended;  // per projection: its new nodes [begin, end)
  for (size_t f = 0; f < found.size(); ++f) {
    const Projection& p = found[f];
    for (int32_t node : {p.product, p.bias_add, p.reshape, p.split})
      if (node >= 0) dropped[static_cast<size_t>(node)] = true;
    replaced_by[static_cast<size_t>(p.split)] = static_cast<int32_t>(f);
    const size_t begin = graph.nodes.size();
    CLEAVE_TRY(appendBatched(graph, p));
    appended.emplace_back(begin, graph.nodes.size());
  }
  std::vector<Node> ordered;
  ordered.reserve(graph.nodes.size());
  for (size_t i = 0; i < original; ++i) {
    if (replaced_by[i] >= 0) {
      const auto [begin, end] = appended[static_cast<size_t>(replaced_by[i])];
      for (size_t n = begin; n < end; ++n) ordered.push_back(std::move(graph.nodes[n]));
    }
    if (!dropped[i]) ordered.push_back(std::move(graph.nodes[i]));
  }
  graph.nodes = std::move(ordered);
  graph.compact();
  return static_cast<int>(found.size());
}

}  // namespace cleave
