// Chains of views as one reshape, one transpose and one reshape (view_chains.h).
#include "passes/partition/view_chains.h"

#include <string>
#include <utility>
#include <vector>

#include "ir/appended_nodes.h"
#include "ir/op_table.h"
#include "ir/ops/op_rules.h"

namespace cleave {
namespace {

bool isView(const Node& node) {
  return node.operands.size() == 1 && node.results.size() == 1 &&
         (node.op == OpId::transpose || opDef(node.op).reshape_like);
}

// A chain's values as runs of atoms: dims no step of the chain splits further. Unit dims hold none.
class Atoms {
 public:
  explicit Atoms(const Shape& shape) {
    for (int64_t d : shape) current_.push_back(d > 1 ? std::vector<int>{newAtom(d)} : std::vector<int>{});
    input_ = current_;
  }

  void transpose(const std::vector<int64_t>& perm) {
    std::vector<std::vector<int>> permuted;
    for (int64_t d : perm) permuted.push_back(current_[static_cast<size_t>(d)]);
    current_ = std::move(permuted);
  }

  // The current value regrouped into `shape`, splitting atoms a dim of it ends inside; false when
  // a dim does not consist of whole parts of atoms.
  bool reshape(const Shape& shape) {
    std::vector<int> sequence = flat(current_);
    std::vector<std::vector<int>> next;
    size_t at = 0;
    for (int64_t size : shape) {
      std::vector<int> dim;
      int64_t covered = 1;
      while (covered < size) {
        if (at >= sequence.size() || size % covered != 0) return false;
        const int64_t needed = size / covered;
        int atom = sequence[at];
        if (sizes_[atom] > needed) {  // the dim ends inside this atom: split it, its major part here
          if (sizes_[atom] % needed != 0) return false;
          const auto [major, minor] = split(atom, needed);
          sequence[at] = major;
          sequence.insert(sequence.begin() + static_cast<std::ptrdiff_t>(at) + 1, minor);
          atom = major;
        }
        dim.push_back(atom);
        covered *= sizes_[atom];
        ++at;
      }
      if (covered != size) return false;
      next.push_back(std::move(dim));
    }
    if (at != sequence.size()) return false;
    current_ = std::move(next);
    return true;
  }

  // The atoms' sizes in the input's order, and where each of the result's atoms is in it.
  Shape inputAtoms() const {
    Shape shape;
    for (int atom : flat(input_)) shape.push_back(sizes_[atom]);
    return shape;
  }
  std::vector<int64_t> permutation() const {
    const std::vector<int> in = flat(input_), out = flat(current_);
    std::vector<int64_t> perm;
    for (int atom : out)
      for (size_t i = 0; i < in.size(); ++i)
        if (in[i] == atom) perm.push_back(static_cast<int64_t>(i));
    return perm;
  }

 private:
  int newAtom(int64_t size) {
    sizes_.push_back(size);
    return static_cast<int>(sizes_.size()) - 1;
  }
  static std::vector<int> flat(const std::vector<std::vector<int>>& dims) {
    std::vector<int> atoms;
    for (const auto& dim : dims) atoms.insert(atoms.end(), dim.begin(), dim.end());
    return atoms;
  }
  // Atom `atom` as (major of size `major`, minor) wherever it is.
  std::pair<int, int> split(int atom, int64_t major) {
    const int64_t minor_size = sizes_[atom] / major;
    const int high = newAtom(major), low = newAtom(minor_size);
    for (auto* dims : {&input_, &current_})
      for (auto& dim : *dims)
        for (size_t i = 0; i < dim.size(); ++i)
          if (dim[i] == atom) {
            dim[i] = high;
            dim.insert(dim.begin() + static_cast<std::ptrdiff_t>(i) + 1, low);
            break;
          }
    return {high, low};
  }

  std::vector<int64_t> sizes_;  // by atom
  std::vector<std::vector<int>> input_, current_;
};

}  // namespace

Expected<int> canonicalizeViewChains(Graph& graph) {
  const std::vector<std::vector<int32_t>> users = graph.computeUsers();
  const std::vector<bool> read_after = graph.valuesReadAfterNodes();
  AppendedNodes placed(graph);  // each chain's new nodes go where its last node was
  int rewritten = 0;
  for (size_t i = 0; i < placed.original(); ++i) {
    if (!isView(graph.nodes[i])) continue;
    // A chain starts at a view whose operand no single-reader view makes, and not at a weight (the
    // partitioner lays weights out through their views).
    const ValueId x = graph.nodes[i].operands[0];
    const int32_t producer = graph.values[x].producer;
    if (producer >= 0 && isView(graph.nodes[producer]) && users[x].size() == 1 && !read_after[x]) continue;
    if (graph.findParam(x)) continue;
    std::vector<size_t> chain = {i};
    for (;;) {
      const ValueId r = graph.nodes[chain.back()].results[0];
      if (read_after[r] || users[r].size() != 1 || !isView(graph.nodes[users[r][0]])) break;
      chain.push_back(static_cast<size_t>(users[r][0]));
    }
    if (chain.size() < 2) continue;

    Atoms atoms(graph.values[x].type.shape);
    bool expressible = true;
    for (size_t c : chain) {
      const Node& node = graph.nodes[c];
      if (node.op == OpId::transpose) {
        const TensorType& input = graph.values[node.operands[0]].type;
        auto perm = ops::transposePerm(OpContext{opDef(node.op), {&input, 1}, {}, node.attrs});
        if (!perm) return perm.status();
        atoms.transpose(*perm);
      } else if (!atoms.reshape(graph.values[node.results[0]].type.shape)) {
        expressible = false;
        break;
      }
    }
    if (!expressible) continue;
    const Shape in_shape = graph.values[x].type.shape, atom_shape = atoms.inputAtoms();
    const ValueId result = graph.nodes[chain.back()].results[0];
    const Shape out_shape = graph.values[result].type.shape;  // a copy: adding nodes moves values
    const std::vector<int64_t> perm = atoms.permutation();
    Shape permuted;
    for (int64_t p : perm) permuted.push_back(atom_shape[static_cast<size_t>(p)]);
    const bool moves = !ops::isIdentityPermutation(perm);
    const size_t steps = moves ? (in_shape != atom_shape) + 1 + (permuted != out_shape) : 1;
    if (steps >= chain.size()) continue;

    // The new nodes, the last one writing the chain's result.
    const SourceLoc loc = graph.nodes[chain.back()].loc;
    const std::string base = graph.values[result].name;
    const size_t begin = graph.nodes.size();
    ValueId value = x;
    if (moves) {
      if (in_shape != atom_shape) {
        CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> r, graph.addNode(OpId::reshape, {value}, {{"shape", atom_shape}}, loc,
                                                                      {graph.uniqueName(base + ".atoms")}));
        value = r[0];
      }
      CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> t, graph.addNode(OpId::transpose, {value}, {{"perm", perm}}, loc,
                                                                    {graph.uniqueName(base + ".moved")}));
      value = t[0];
    }
    if (!moves || permuted != out_shape) {
      CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> r, graph.addNode(OpId::reshape, {value}, {{"shape", out_shape}}, loc,
                                                                    {graph.uniqueName(base + ".view")}));
      value = r[0];
    }
    if (graph.values[value].type != graph.values[result].type)
      return Status::internal("view-chains: " + base + " would become " + graph.values[value].type.str());
    graph.nodes.back().results[0] = result;  // the chain's result, its value and name
    for (size_t c : chain) placed.drop(c);
    placed.putBefore(chain.back(), begin, graph.nodes.size());
    ++rewritten;
  }
  if (rewritten == 0) return 0;
  placed.apply(graph);
  return rewritten;
}

}  // namespace cleave
