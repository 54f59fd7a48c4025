// Attention over [batch, heads, ...] instead of [batch·heads, ...] (unmerge_heads.h).
#include "passes/partition/unmerge_heads.h"

#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ir/op_table.h"
#include "ir/ops/op_rules.h"

namespace cleave {
namespace {

// The factors of a merged dim: a·b rows, held as [a, b].
struct Rows {
  int64_t a = 0, b = 0;
  bool operator==(const Rows&) const = default;
};

// The rows of a reshape merging its operand's two leading dims ([a, b, t...] -> [a·b, t...]).
std::optional<Rows> mergedRows(const Graph& graph, const Node& node) {
  if (node.op != OpId::reshape) return std::nullopt;
  const Shape& in = graph.values[node.operands[0]].type.shape;
  const Shape& out = graph.values[node.results[0]].type.shape;
  if (in.size() < 3 || out.size() + 1 != in.size() || in[1] < 2 || out[0] != in[0] * in[1]) return std::nullopt;
  for (size_t d = 2; d < in.size(); ++d)
    if (in[d] != out[d - 1]) return std::nullopt;
  return Rows{in[0], in[1]};
}

// `shape` ([a·b, t...] or [1, t...]) with its dim 0 as [a, b] (or [1, 1]).
Shape unmergedShape(const Shape& shape, const Rows& rows) {
  Shape result = shape[0] == 1 ? Shape{1, 1} : Shape{rows.a, rows.b};
  result.insert(result.end(), shape.begin() + 1, shape.end());
  return result;
}

class Unmerger {
 public:
  explicit Unmerger(Graph& graph) : graph_(graph), read_after_(graph.valuesReadAfterNodes()) {}

  Expected<int> run() {
    const size_t original = graph_.nodes.size();
    std::vector<Node> ordered;
    ordered.reserve(original);
    int rewritten = 0;
    for (size_t i = 0; i < original; ++i) {
      Node node = graph_.nodes[i];  // a copy: the reshapes this pass adds are appended to graph_.nodes
      if (auto rows = mergedRows(graph_, node); rows && !read_after_[node.results[0]]) {
        // A merge: its readers may read its operand instead. It stays for the others.
        forms_[node.results[0]] = Form{node.operands[0], *rows, graph_.values[node.results[0]].type.shape};
      } else {
        CLEAVE_ASSIGN_OR_RETURN(bool lifted, lift(node, ordered));
        if (lifted) {
          ++rewritten;
        } else {
          CLEAVE_TRY(keepMerged(node, ordered));
        }
      }
      ordered.push_back(std::move(node));
    }
    // The merges no node reads any more go.
    std::unordered_set<ValueId> read;
    for (const Node& node : ordered) read.insert(node.operands.begin(), node.operands.end());
    std::erase_if(ordered, [&](const Node& node) {
      return node.op == OpId::reshape && forms_.count(node.results[0]) &&
             forms_.at(node.results[0]).unmerged == node.operands[0] && !read.count(node.results[0]);
    });
    graph_.nodes = std::move(ordered);
    graph_.compact();
    return rewritten;
  }

 private:
  // A value of merged rows: the value holding it as [a, b, ...] (the value itself when a lifted
  // node's result was retyped; a merge's operand), and its merged shape.
  struct Form {
    ValueId unmerged = kNoValue;
    Rows rows;
    Shape merged_shape;
  };

  // Appends reshape(v) to `shape` to `ordered`.
  Expected<ValueId> appendReshape(ValueId v, Shape shape, const std::string& suffix, const Node& user,
                                  std::vector<Node>& ordered) {
    const std::string name = graph_.uniqueName(graph_.values[v].name + suffix);
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> results,
                            graph_.addNode(OpId::reshape, {v}, {{"shape", std::move(shape)}}, user.loc, {name}));
    ordered.push_back(std::move(graph_.nodes.back()));
    graph_.nodes.pop_back();
    return results[0];
  }

  // `node` computed over [a, b, ...]: true when it was rewritten, false (untouched) when it does
  // not treat the merged rows as a batch dim.
  Expected<bool> lift(Node& node, std::vector<Node>& ordered) {
    std::optional<Rows> rows;
    size_t rank = 0;  // of the merged values it reads
    for (ValueId v : node.operands) {
      auto it = forms_.find(v);
      if (it == forms_.end()) continue;
      if (rows && (!(*rows == it->second.rows) || rank != it->second.merged_shape.size())) return false;
      rows = it->second.rows;
      rank = it->second.merged_shape.size();
    }
    if (!rows) return false;
    const int64_t merged = rows->a * rows->b;
    const OpDef& def = opDef(node.op);
    const OpContext attrs{def, {}, {}, node.attrs};
    AttrMap new_attrs = node.attrs;
    Rows result_rows = *rows;  // of its results
    bool widens_others = true;  // operands of the merged rank become [a, b, ...] ([1, 1, ...])
    if (node.op == OpId::softmax || node.op == OpId::log_softmax || node.op == OpId::gather_elements) {
      const int64_t axis = normalizeAxis(attrs.getInt("axis"), static_cast<int64_t>(rank));
      if (axis <= 0) return false;  // over the merged rows, or out of range
      new_attrs["axis"] = axis + 1;
    } else if (node.op == OpId::transpose) {
      TensorType input = graph_.values[node.operands[0]].type;  // as merged
      input.shape = forms_.at(node.operands[0]).merged_shape;
      auto perm = ops::transposePerm(OpContext{def, {&input, 1}, {}, node.attrs});
      if (!perm || perm->empty() || (*perm)[0] != 0) return false;
      std::vector<int64_t> widened = {0, 1};
      for (size_t d = 1; d < perm->size(); ++d) widened.push_back((*perm)[d] + 1);
      new_attrs["perm"] = widened;
    } else if (node.op == OpId::concat) {
      const int64_t axis = normalizeAxis(attrs.getInt("axis"), static_cast<int64_t>(rank));
      if (axis < 0) return false;
      if (axis == 0) {
        // Along the merged rows (DeBERTa's relative positions tiled over the batch): every operand
        // holds [a, b, ...] rows; the result [n·a, b, ...].
        for (ValueId v : node.operands)
          if (!forms_.count(v)) return false;
        result_rows.a *= static_cast<int64_t>(node.operands.size());
      } else {
        new_attrs["axis"] = axis + 1;
      }
    } else if (node.op == OpId::expand) {
      std::vector<int64_t> shape = attrs.getInts("shape");
      if (shape.size() > rank) return false;
      if (shape.size() == rank) {
        if (shape[0] != 1 && shape[0] != merged) return false;
        shape = unmergedShape(shape, *rows);
      }
      new_attrs["shape"] = shape;
    } else if (node.op == OpId::matmul) {
      if (rank < 3) return false;
    } else if (node.op == OpId::reshape) {
      widens_others = false;
    } else if (def.family != OpFamily::kElementwise) {
      return false;
    }

    // The operands' new values: merged ones read unmerged; others of the merged rank widened.
    std::vector<TensorType> operand_types;
    std::vector<std::optional<Shape>> widen(node.operands.size());
    for (size_t k = 0; k < node.operands.size(); ++k) {
      const ValueId v = node.operands[k];
      TensorType type = graph_.values[v].type;
      if (auto it = forms_.find(v); it != forms_.end()) {
        type = graph_.values[it->second.unmerged].type;
      } else if (widens_others && type.rank() == static_cast<int64_t>(rank)) {
        if (type.shape[0] != merged && type.shape[0] != 1) return false;
        widen[k] = unmergedShape(type.shape, *rows);
        type.shape = *widen[k];
      } else if (type.rank() > static_cast<int64_t>(rank)) {
        return false;
      }
      operand_types.push_back(std::move(type));
    }
    // The results: those of merged rows as [a, b, ...]; a reshape's others as they were.
    std::vector<Shape> expected;
    for (ValueId r : node.results) {
      const Shape& shape = graph_.values[r].type.shape;
      if (node.op == OpId::reshape) {
        const bool back_to_unmerged = shape.size() >= 2 && shape[0] == rows->a && shape[1] == rows->b;
        expected.push_back(!back_to_unmerged && !shape.empty() && shape[0] == merged ? unmergedShape(shape, *rows)
                                                                                     : shape);
        new_attrs["shape"] = expected.back();  // explicit dims: 0 and -1 would read the new operand's
      } else {
        if (shape.size() != rank || shape[0] != result_rows.a * result_rows.b) return false;
        expected.push_back(unmergedShape(shape, result_rows));
      }
    }
    auto types = inferResultTypes(def, operand_types, new_attrs);
    if (!types) return false;
    for (size_t r = 0; r < types->size(); ++r) {
      if ((*types)[r].shape != expected[r]) return false;
      // A value read after the nodes (an output) keeps its type.
      if (read_after_[node.results[r]] && expected[r] != graph_.values[node.results[r]].type.shape) return false;
    }

    // Rewrite.
    for (size_t k = 0; k < node.operands.size(); ++k) {
      const ValueId v = node.operands[k];
      if (auto it = forms_.find(v); it != forms_.end()) {
        node.operands[k] = it->second.unmerged;
      } else if (widen[k]) {
        auto cached = widened_.find(v);
        if (cached == widened_.end() || graph_.values[cached->second].type.shape != *widen[k]) {
          CLEAVE_ASSIGN_OR_RETURN(ValueId reshaped, appendReshape(v, *widen[k], ".heads", node, ordered));
          cached = widened_.insert_or_assign(v, reshaped).first;
        }
        node.operands[k] = cached->second;
      }
    }
    node.attrs = std::move(new_attrs);
    for (size_t r = 0; r < node.results.size(); ++r) {
      const ValueId result = node.results[r];
      Shape merged_shape = graph_.values[result].type.shape;
      graph_.values[result].type = (*types)[r];
      if (merged_shape != (*types)[r].shape) forms_[result] = Form{result, result_rows, std::move(merged_shape)};
    }
    return true;
  }

  // `node` reads the merged form of each value a lifted node retyped: that value reshaped back.
  Status keepMerged(Node& node, std::vector<Node>& ordered) {
    for (ValueId& v : node.operands) {
      auto it = forms_.find(v);
      if (it == forms_.end() || it->second.unmerged != v) continue;  // a merge's result is merged still
      auto cached = remerged_.find(v);
      if (cached == remerged_.end()) {
        CLEAVE_ASSIGN_OR_RETURN(ValueId reshaped, appendReshape(v, it->second.merged_shape, ".merged", node, ordered));
        cached = remerged_.emplace(v, reshaped).first;
      }
      v = cached->second;
    }
    return Status::ok();
  }

  Graph& graph_;
  const std::vector<bool> read_after_;
  std::unordered_map<ValueId, Form> forms_;         // values of merged rows (by their merged id)
  std::unordered_map<ValueId, ValueId> widened_;    // another operand -> its last [a, b, ...] reshape
  std::unordered_map<ValueId, ValueId> remerged_;   // a retyped value -> its merged reshape
};

}  // namespace

Expected<int> unmergeHeads(Graph& graph) { return Unmerger(graph).run(); }

}  // namespace cleave
