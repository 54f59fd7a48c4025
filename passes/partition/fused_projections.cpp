// Fused projections (a fused QKV) as batched products over their parts (fused_projections.h).
#include "passes/partition/fused_projections.h"

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "ir/appended_nodes.h"
#include "ir/constant_eval.h"
#include "ir/op_table.h"
#include "ir/ops/op_rules.h"

namespace cleave {
namespace {

struct Projection {
  int32_t product = -1;   // the gemm or matmul
  int32_t bias_add = -1;  // matmul's add of the bias, or -1
  int32_t reshape = -1;   // between the product and the cut, or -1
  std::vector<int32_t> cuts;       // the split, or the slices (one per part)
  std::vector<ValueId> parts;      // the parts, in order
  ValueId x = kNoValue, weight = kNoValue, bias = kNoValue;
  bool transposed = false;  // the weight is [S·N, K]
  int64_t part_size = 0, k = 0;  // N, and K
  // Where the cut is: along the last axis in parts of N, or, after a reshape that splits the last
  // dim into [S, ...] (ModernBERT's qkv viewed as [..., 3, heads, head dim]), along that S axis in
  // parts of 1.
  int cut_axis = -1;
  int64_t cut_size = 0;  // each part's size along cut_axis (0: not known yet)
  // Parts of unequal sizes along the last axis (q, k and v of grouped-query attention), held
  // grouped (ir/held_layout.h): their sizes. Empty for equal parts.
  std::vector<int64_t> sizes;
};

OpContext attributesOf(const Node& node) { return OpContext{opDef(node.op), {}, {}, node.attrs}; }

class ProjectionMatcher {
 public:
  ProjectionMatcher(const Graph& graph, int64_t groups)
      : graph_(graph), groups_(groups), users_(graph.computeUsers()), read_after_(graph.valuesReadAfterNodes()) {}

  // The projection whose product is node `product`, or nullopt.
  std::optional<Projection> match(int32_t product) const {
    Projection p;
    p.product = product;
    const Node& node = graph_.nodes[product];
    if (node.op == OpId::gemm) {
      const OpContext attrs = attributesOf(node);
      if (attrs.getFloat("alpha") != 1.0 || attrs.getInt("transpose_a") != 0) return std::nullopt;
      if (node.operands.size() == 3 && attrs.getFloat("beta") != 1.0) return std::nullopt;
      if (node.operands.size() == 3) p.bias = node.operands[2];
    } else if (node.op == OpId::matmul) {
      if (attributesOf(node).getInt("transpose_a") != 0) return std::nullopt;
    } else {
      return std::nullopt;
    }
    p.transposed = attributesOf(node).getInt("transpose_b") != 0;
    p.x = node.operands[0];
    p.weight = node.operands[1];
    const TensorType& w = graph_.values[p.weight].type;
    const TensorType& x = graph_.values[p.x].type;
    if (w.rank() != 2 || x.rank() < 2 || x.dtype != w.dtype || !onlyHere(p.weight, product)) return std::nullopt;
    p.k = p.transposed ? w.shape[1] : w.shape[0];
    const int64_t width = p.transposed ? w.shape[0] : w.shape[1];
    if (x.shape.back() != p.k) return std::nullopt;
    // The product's one reader: matmul's bias add, then a reshape keeping the last dim, then the cut.
    ValueId v = node.results[0];
    int32_t reader = onlyReader(v);
    if (node.op == OpId::matmul && reader >= 0 && graph_.nodes[reader].op == OpId::add) {
      const Node& add = graph_.nodes[reader];
      p.bias = add.operands[0] == v ? add.operands[1] : add.operands[0];
      p.bias_add = reader;
      v = add.results[0];
      reader = onlyReader(v);
    }
    // The bias may be read elsewhere too (torch.export merges equal initializers: nn.MultiheadAttention's
    // zero in_proj biases of every layer are one), unless it is held grouped below.
    const int32_t bias_reader = p.bias_add >= 0 ? p.bias_add : product;
    if (p.bias != kNoValue) {
      const TensorType& b = graph_.values[p.bias].type;
      if (b.shape != Shape{width} || b.dtype != w.dtype || !storedParam(p.bias)) return std::nullopt;
    }
    p.cut_axis = graph_.values[v].type.rank() - 1;
    if (reader >= 0 && graph_.nodes[reader].op == OpId::reshape) {
      const ValueId reshaped = graph_.nodes[reader].results[0];
      const TensorType& type = graph_.values[reshaped].type;
      if (type.rank() < 1) return std::nullopt;
      p.cut_axis = type.rank() - 1;
      if (type.shape.back() != width) {
        // The last dim split into [S, ...]: the dims from S on hold exactly the product's row.
        int64_t row = 1;
        int axis = type.rank();
        while (axis > 0 && row < width) row *= type.shape[static_cast<size_t>(--axis)];
        if (row != width || axis >= type.rank() - 1 || type.shape[static_cast<size_t>(axis)] < 2) return std::nullopt;
        p.cut_axis = axis;
        p.cut_size = 1;
        p.part_size = width / type.shape[static_cast<size_t>(axis)];
      }
      p.reshape = reader;
      v = reshaped;
      reader = onlyReader(v);
    }
    if (read_after_[v]) return std::nullopt;
    if (reader >= 0 && graph_.nodes[reader].op == OpId::split) {
      if (!splitParts(reader, p)) return std::nullopt;
    } else if (reader >= 0 && graph_.nodes[reader].op == OpId::transpose) {
      if (!gatheredParts(reader, p)) return std::nullopt;
    } else if (!sliceParts(v, p)) {
      return std::nullopt;
    }
    if (!p.sizes.empty()) {  // unequal parts: each in `groups` blocks
      if (p.bias != kNoValue && !onlyHere(p.bias, bias_reader)) return std::nullopt;
      for (int64_t size : p.sizes)
        if (size % groups_ != 0) return std::nullopt;
      return p;
    }
    if (p.part_size == 0) p.part_size = p.cut_size;  // cut along the last axis: a part is N columns
    return static_cast<int64_t>(p.parts.size()) * p.part_size == width ? std::optional<Projection>(p) : std::nullopt;
  }

 private:
  // The node that alone reads `v` (once), when it is not read after the nodes; else -1.
  int32_t onlyReader(ValueId v) const {
    return users_[v].size() == 1 && !read_after_[v] ? users_[v][0] : -1;
  }

  // `v` is a parameter with stored data.
  bool storedParam(ValueId v) const {
    const Param* param = graph_.findParam(v);
    return param && param->init.kind == "data" && param->init.data;
  }
  // `v` is a parameter with stored data that node `reader` alone reads (once).
  bool onlyHere(ValueId v, int32_t reader) const {
    return storedParam(v) && users_[v].size() == 1 && users_[v][0] == reader;
  }

  // A split along the cut axis into 2 or more parts: equal, or unequal ones to hold grouped.
  bool splitParts(int32_t split, Projection& p) const {
    const Node& node = graph_.nodes[split];
    const TensorType& cut = graph_.values[node.operands[0]].type;
    if (normalizeAxis(attributesOf(node).getInt("axis"), cut.rank()) != p.cut_axis) return false;
    const std::vector<int64_t> sizes = attributesOf(node).getInts("sizes");
    if (sizes.size() < 2) return false;
    p.cuts = {split};
    p.parts = node.results;
    for (int64_t size : sizes) {
      if (size <= 0) return false;
      if (size != sizes[0]) return unequalParts(sizes, p);
    }
    if (p.cut_size != 0 && sizes[0] != p.cut_size) return false;
    p.cut_size = sizes[0];
    return true;
  }

  // Parts of unequal sizes: held grouped when the product is cut along its last axis itself and
  // there are groups to hold (the tp degree).
  bool unequalParts(const std::vector<int64_t>& sizes, Projection& p) const {
    if (groups_ < 2 || p.cut_size != 0) return false;
    p.sizes = sizes;
    return true;
  }

  // Every reader of `v` a slice along the cut axis, step 1, the slices cutting it into 2 or more
  // consecutive parts (torch.export's q, k, v = qkv[..., :n], qkv[..., n:2n], qkv[..., 2n:]):
  // equal, or unequal ones to hold grouped.
  bool sliceParts(ValueId v, Projection& p) const {
    const TensorType& cut = graph_.values[v].type;
    std::vector<std::tuple<int64_t, int64_t, int32_t>> starts;  // (start, count, slice)
    for (int32_t reader : users_[v]) {
      const Node& node = graph_.nodes[reader];
      if (node.op != OpId::slice) return false;
      const std::vector<TensorType> operands = {cut}, results = {graph_.values[node.results[0]].type};
      const Expected<std::vector<ops::SliceAxis>> sliced =
          ops::resolveSlice(OpContext{opDef(node.op), operands, results, node.attrs});
      if (!sliced || sliced->size() != 1) return false;
      const ops::SliceAxis& along = sliced->front();
      if (along.axis != p.cut_axis || along.step != 1 || along.count <= 0) return false;
      starts.push_back({along.start, along.count, reader});
    }
    std::sort(starts.begin(), starts.end());
    if (starts.size() < 2) return false;
    // Consecutive slices that read all of it.
    int64_t next = 0;
    std::vector<int64_t> sizes;
    for (const auto& [start, count, reader] : starts) {
      if (start != next) return false;
      next += count;
      sizes.push_back(count);
      p.cuts.push_back(reader);
      p.parts.push_back(graph_.nodes[reader].results[0]);
    }
    if (next != cut.shape[static_cast<size_t>(p.cut_axis)]) return false;
    for (int64_t size : sizes)
      if (size != sizes[0]) return unequalParts(sizes, p);
    if (p.cut_size != 0 && sizes[0] != p.cut_size) return false;
    p.cut_size = sizes[0];
    return true;
  }

  // nn.MultiheadAttention's in_proj viewed as [..., 3, E] (p.reshape), its 3 moved first by a transpose
  // that keeps the other dims in order, each part read by a gather of a constant index along it:
  // q, k, v = proj[0], proj[1], proj[2].
  bool gatheredParts(int32_t transpose, Projection& p) const {
    if (p.reshape < 0 || p.cut_size != 1) return false;
    const Node& node = graph_.nodes[transpose];
    const TensorType& input = graph_.values[node.operands[0]].type;
    auto perm = ops::transposePerm(OpContext{opDef(node.op), {&input, 1}, {}, node.attrs});
    if (!perm || perm->empty() || (*perm)[0] != p.cut_axis) return false;
    for (size_t d = 1, expected = 0; d < perm->size(); ++d, ++expected) {
      if (static_cast<int64_t>(expected) == p.cut_axis) ++expected;
      if ((*perm)[d] != static_cast<int64_t>(expected)) return false;
    }
    const ValueId moved = node.results[0];
    const int64_t parts = input.shape[static_cast<size_t>(p.cut_axis)];
    if (read_after_[moved] || static_cast<int64_t>(users_[moved].size()) != parts) return false;
    std::vector<int32_t> by_index(static_cast<size_t>(parts), -1);
    for (int32_t reader : users_[moved]) {
      const Node& gather = graph_.nodes[reader];
      if (gather.op != OpId::gather || gather.operands[0] != moved || attributesOf(gather).getInt("axis") != 0 ||
          graph_.values[gather.operands[1]].type.rank() != 0)
        return false;
      const std::optional<int64_t> index = scalarConstantIndex(graph_, gather.operands[1]);
      if (!index) return false;
      const int64_t at = *index + (*index < 0 ? parts : 0);
      if (at < 0 || at >= parts || by_index[static_cast<size_t>(at)] >= 0) return false;
      by_index[static_cast<size_t>(at)] = reader;
    }
    p.cuts = {transpose};
    for (int32_t reader : by_index) {
      p.cuts.push_back(reader);
      p.parts.push_back(graph_.nodes[reader].results[0]);
    }
    return true;
  }

  const Graph& graph_;
  const int64_t groups_;  // the groups unequal parts are held in; below 2, such parts are left alone
  std::vector<std::vector<int32_t>> users_;
  std::vector<bool> read_after_;
};

// Appends the nodes of one projection's rewrite, at its product's location and named after it.
class Appender {
 public:
  Appender(Graph& graph, const Projection& p)
      : graph_(graph), p_(p), loc_(graph.nodes[p.product].loc), base_(graph.values[graph.nodes[p.product].results[0]].name) {}

  Expected<ValueId> add(OpId op, std::vector<ValueId> operands, AttrMap attrs, const std::string& name) {
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> results,
                            graph_.addNode(op, std::move(operands), std::move(attrs), loc_, {graph_.uniqueName(name)}));
    return results[0];
  }
  Expected<std::vector<ValueId>> addResults(OpId op, std::vector<ValueId> operands, AttrMap attrs) {
    return graph_.addNode(op, std::move(operands), std::move(attrs), loc_);
  }

  // x's rows, as [1, M, K].
  Expected<ValueId> rows() {
    const int64_t count = graph_.values[p_.x].type.numel() / p_.k;
    return add(OpId::reshape, {p_.x}, {{"shape", std::vector<int64_t>{1, count, p_.k}}}, base_ + ".rows");
  }

  // rows() `x3` times `weight` ([batch, K, N], or [batch, N, K] read transposed): [batch, M, N],
  // named base + suffix.
  Expected<ValueId> product(ValueId x3, ValueId weight, const std::string& suffix) {
    AttrMap attrs;
    if (p_.transposed) attrs["transpose_b"] = int64_t{1};
    return add(OpId::matmul, {x3, weight}, std::move(attrs), base_ + suffix);
  }

  // `v` reshaped to part `result`'s shape, written as that value, which its readers keep reading.
  Status writePart(ValueId v, ValueId result) {
    CLEAVE_TRY(add(OpId::reshape, {v}, {{"shape", graph_.values[result].type.shape}}, base_ + ".part").status());
    graph_.nodes.back().results[0] = result;
    return Status::ok();
  }

  const std::string& base() const { return base_; }

 private:
  Graph& graph_;
  const Projection& p_;
  const SourceLoc loc_;
  const std::string base_;
};

// Appends the batched form of `p` (fused_projections.h); its last nodes write the parts' values.
Status appendBatched(Graph& graph, const Projection& p) {
  Appender append(graph, p);
  const int64_t count = static_cast<int64_t>(p.parts.size());
  CLEAVE_ASSIGN_OR_RETURN(ValueId x3, append.rows());
  // The weight by part: [S, N, K] read transposed, or [K, S, N] transposed to [S, K, N].
  const std::string weight_name = graph.values[p.weight].name;  // a copy: adding nodes moves values
  const std::vector<int64_t> held_shape = p.transposed ? std::vector<int64_t>{count, p.part_size, p.k}
                                                       : std::vector<int64_t>{p.k, count, p.part_size};
  CLEAVE_ASSIGN_OR_RETURN(ValueId by_part,
                          append.add(OpId::reshape, {p.weight}, {{"shape", held_shape}}, weight_name + ".parts"));
  if (!p.transposed) {
    CLEAVE_ASSIGN_OR_RETURN(by_part, append.add(OpId::transpose, {by_part}, {{"perm", std::vector<int64_t>{1, 0, 2}}},
                                                weight_name + ".by_part"));
  }
  CLEAVE_ASSIGN_OR_RETURN(ValueId product, append.product(x3, by_part, ".parts"));
  if (p.bias != kNoValue) {
    CLEAVE_ASSIGN_OR_RETURN(ValueId held, append.add(OpId::reshape, {p.bias},
                                                     {{"shape", std::vector<int64_t>{count, 1, p.part_size}}},
                                                     graph.values[p.bias].name + ".parts"));
    CLEAVE_ASSIGN_OR_RETURN(product, append.add(OpId::add, {product, held}, {}, append.base() + ".parts_biased"));
  }
  CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> pieces,
                          append.addResults(OpId::split, {product},
                                            {{"axis", int64_t{0}}, {"sizes", std::vector<int64_t>(count, 1)}}));
  for (size_t s = 0; s < p.parts.size(); ++s) CLEAVE_TRY(append.writePart(pieces[s], p.parts[s]));
  return Status::ok();
}

// Parameter `v` held grouped (ir/held_layout.h): its data in `groups` groups of every part, which
// its value then holds, the model's layout recorded.
Status holdGrouped(Graph& graph, ValueId v, const std::vector<int64_t>& sizes, int64_t axis, int64_t groups) {
  Param& param = *graph.findParam(v);
  const TensorData& model = *param.init.data;
  HeldLayout layout{model.type.shape, sizes, axis};
  CLEAVE_ASSIGN_OR_RETURN(Shape held_shape, groupedShape(layout, groups));
  auto held = std::make_shared<TensorData>(TensorData{TensorType{model.type.dtype, held_shape}, {}});
  held->bytes.resize(model.bytes.size());
  modelToHeldOrder(layout, held_shape, model.bytes.data(), held->bytes.data(), dtypeSize(model.type.dtype));
  param.model = std::move(layout);
  param.init.data = std::move(held);
  graph.values[v].type.shape = held_shape;
  return Status::ok();
}

// Appends the grouped form of `p` (unequal parts, fused_projections.h); its last nodes write the
// parts' values.
Status appendGrouped(Graph& graph, const Projection& p, int64_t groups) {
  Appender append(graph, p);
  CLEAVE_TRY(holdGrouped(graph, p.weight, p.sizes, p.transposed ? 0 : 1, groups));
  CLEAVE_ASSIGN_OR_RETURN(ValueId x3, append.rows());
  CLEAVE_ASSIGN_OR_RETURN(ValueId product, append.product(x3, p.weight, ".groups"));
  const int64_t width = graph.values[product].type.shape[2];  // the columns of a group
  if (p.bias != kNoValue) {
    CLEAVE_TRY(holdGrouped(graph, p.bias, p.sizes, 0, groups));
    CLEAVE_ASSIGN_OR_RETURN(ValueId held, append.add(OpId::reshape, {p.bias},
                                                     {{"shape", std::vector<int64_t>{groups, 1, width}}},
                                                     graph.values[p.bias].name + ".groups"));
    CLEAVE_ASSIGN_OR_RETURN(product, append.add(OpId::add, {product, held}, {}, append.base() + ".groups_biased"));
  }
  int64_t start = 0;
  for (size_t s = 0; s < p.parts.size(); ++s) {
    const int64_t block = p.sizes[s] / groups;
    CLEAVE_ASSIGN_OR_RETURN(ValueId sliced, append.add(OpId::slice, {product},
                                                       {{"axes", std::vector<int64_t>{2}},
                                                        {"starts", std::vector<int64_t>{start}},
                                                        {"ends", std::vector<int64_t>{start + block}}},
                                                       append.base() + ".group_part"));
    CLEAVE_ASSIGN_OR_RETURN(ValueId rows_first, append.add(OpId::transpose, {sliced},
                                                           {{"perm", std::vector<int64_t>{1, 0, 2}}},
                                                           append.base() + ".part_rows"));
    CLEAVE_TRY(append.writePart(rows_first, p.parts[s]));
    start += block;
  }
  return Status::ok();
}

}  // namespace

Expected<int> batchFusedProjections(Graph& graph, int64_t groups) {
  std::vector<Projection> found;
  {
    const ProjectionMatcher matcher(graph, groups);
    for (int32_t i = 0; i < static_cast<int32_t>(graph.nodes.size()); ++i)
      if (auto p = matcher.match(i)) found.push_back(*p);
  }
  if (found.empty()) return 0;
  // The new nodes are appended, then moved to where each projection's first cut was (its operands,
  // x and the parameters, come before); the replaced nodes go.
  AppendedNodes placed(graph);
  for (const Projection& p : found) {
    for (int32_t node : {p.product, p.bias_add, p.reshape})
      if (node >= 0) placed.drop(static_cast<size_t>(node));
    for (int32_t node : p.cuts) placed.drop(static_cast<size_t>(node));
    const size_t begin = graph.nodes.size();
    CLEAVE_TRY(p.sizes.empty() ? appendBatched(graph, p) : appendGrouped(graph, p, groups));
    placed.putBefore(static_cast<size_t>(*std::min_element(p.cuts.begin(), p.cuts.end())), begin, graph.nodes.size());
  }
  placed.apply(graph);
  return static_cast<int>(found.size());
}

}  // namespace cleave
