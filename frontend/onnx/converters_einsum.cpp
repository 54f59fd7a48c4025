// ONNX converter of Einsum: the equation lowered to transposes, reshapes, reductions and batched matmuls.
#include <algorithm>
#include <map>
#include <set>

#include "frontend/onnx/onnx_converters.h"

namespace cleave {
namespace {

// One operand of the contraction: its ONNX name and one letter per dim.
struct Term {
  std::string name;
  std::string letters;
};

// The equation's input terms and output letters, '...' replaced by capital letters (one per broadcast
// dim, right-aligned as numpy does) and the implicit output (letters used once, sorted) made explicit.
Expected<std::pair<std::vector<std::string>, std::string>> parseEquation(OnnxImportContext& ctx,
                                                                         const onnx::NodeProto& node,
                                                                         const std::vector<int64_t>& ranks) {
  std::string equation;
  for (char ch : stringAttr(node, "equation", ""))
    if (ch != ' ') equation += ch;
  const size_t arrow = equation.find("->");
  std::string left = equation.substr(0, arrow);
  std::vector<std::string> inputs;
  for (size_t start = 0;;) {
    const size_t comma = left.find(',', start);
    inputs.push_back(left.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (inputs.size() != ranks.size())
    return ctx.nodeError(node, "equation '" + equation + "' has " + std::to_string(inputs.size()) + " terms for " +
                                   std::to_string(ranks.size()) + " inputs");
  // 1. Each input's '...' stands for its dims beyond its letters; they share capital letters from the right.
  int64_t ellipsis_rank = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const size_t dots = inputs[i].find("...");
    const int64_t named = static_cast<int64_t>(inputs[i].size()) - (dots == std::string::npos ? 0 : 3);
    if (dots == std::string::npos ? named != ranks[i] : named > ranks[i])
      return ctx.nodeError(node, "term '" + inputs[i] + "' does not fit input " + std::to_string(i) + " of rank " +
                                     std::to_string(ranks[i]));
    if (dots != std::string::npos) ellipsis_rank = std::max(ellipsis_rank, ranks[i] - named);
  }
  auto expand = [&](std::string term, int64_t rank) -> std::string {
    const size_t dots = term.find("...");
    if (dots == std::string::npos) return term;
    std::string broadcast;
    for (int64_t d = ellipsis_rank - rank; d < ellipsis_rank; ++d) broadcast += static_cast<char>('A' + d);
    return term.replace(dots, 3, broadcast);
  };
  for (size_t i = 0; i < inputs.size(); ++i)
    inputs[i] = expand(inputs[i], ranks[i] - (static_cast<int64_t>(inputs[i].size()) - 3));
  // 2. The output: explicit, or '...' then the letters used once, sorted.
  std::string output;
  if (arrow != std::string::npos) {
    output = equation.substr(arrow + 2);
    output = expand(output, ellipsis_rank);
  } else {
    std::map<char, int> uses;
    for (const auto& term : inputs)
      for (char ch : term) ++uses[ch];
    for (int64_t d = 0; d < ellipsis_rank; ++d) output += static_cast<char>('A' + d);
    for (const auto& [ch, count] : uses)
      if (count == 1 && !(ch >= 'A' && ch <= 'A' + ellipsis_rank - 1)) output += ch;
  }
  for (const auto& term : inputs)
    for (size_t a = 0; a < term.size(); ++a)
      if (term.find(term[a], a + 1) != std::string::npos)
        return ctx.nodeError(node, "equation '" + equation + "' repeats '" + std::string(1, term[a]) +
                                       "' in one term (a diagonal), which is not supported");
  return std::make_pair(inputs, output);
}

// Lowers one Einsum node; every step's result is named <output>/<n>.
class EinsumLowering {
 public:
  EinsumLowering(OnnxImportContext& ctx, const onnx::NodeProto& node) : ctx_(ctx), node_(node) {}

  Status run() {
    std::vector<int64_t> ranks;
    for (const auto& input : node_.input()) {
      CLEAVE_ASSIGN_OR_RETURN(TensorType type, ctx_.typeOf(node_, input));
      ranks.push_back(type.rank());
    }
    CLEAVE_ASSIGN_OR_RETURN(auto parsed, parseEquation(ctx_, node_, ranks));
    auto& [letters, output] = parsed;
    std::vector<Term> terms;
    for (int i = 0; i < node_.input_size(); ++i) {
      CLEAVE_ASSIGN_OR_RETURN(TensorType type, ctx_.typeOf(node_, node_.input(i)));
      for (size_t d = 0; d < letters[i].size(); ++d) {
        auto [it, fresh] = sizes_.emplace(letters[i][d], type.shape[d]);
        if (!fresh && it->second != type.shape[d])
          return ctx_.nodeError(node_, "'" + std::string(1, letters[i][d]) + "' has sizes " + std::to_string(it->second) +
                                           " and " + std::to_string(type.shape[d]) + " (broadcasting is not supported)");
      }
      terms.push_back({node_.input(i), letters[i]});
    }
    // 1. Contract left to right, keeping the letters the output or a later term needs.
    Term result = terms[0];
    for (size_t i = 1; i < terms.size(); ++i) {
      std::set<char> needed(output.begin(), output.end());
      for (size_t j = i + 1; j < terms.size(); ++j) needed.insert(terms[j].letters.begin(), terms[j].letters.end());
      CLEAVE_ASSIGN_OR_RETURN(result, contract(result, terms[i], needed));
    }
    // 2. Sum the letters the output lacks, then order the rest as the output.
    CLEAVE_ASSIGN_OR_RETURN(result, sumAway(result, std::set<char>(output.begin(), output.end())));
    if (result.letters.size() != output.size())
      return ctx_.nodeError(node_, "the output names a letter no input has");
    CLEAVE_ASSIGN_OR_RETURN(result, permute(result, output));
    return ctx_.emit(node_, OpId::identity, {result.name}, {});
  }

 private:
  std::string nextName() { return node_.output(0) + "/" + std::to_string(step_++); }

  Expected<Term> step(OpId op, const std::vector<std::string>& inputs, AttrMap attrs, std::string letters) {
    Term out{nextName(), std::move(letters)};
    CLEAVE_TRY(ctx_.emitTo(node_, op, inputs, std::move(attrs), {out.name}));
    return out;
  }

  // `term` with only the letters in `keep` (the others summed).
  Expected<Term> sumAway(const Term& term, const std::set<char>& keep) {
    std::vector<int64_t> axes;
    std::string kept;
    for (size_t d = 0; d < term.letters.size(); ++d) {
      if (keep.count(term.letters[d])) kept += term.letters[d];
      else axes.push_back(static_cast<int64_t>(d));
    }
    if (axes.empty()) return term;
    return step(OpId::reduce_sum, {term.name}, {{"axes", axes}, {"keepdims", int64_t{0}}}, kept);
  }

  // `term` transposed to the letter order `order` (a permutation of its letters).
  Expected<Term> permute(const Term& term, const std::string& order) {
    if (term.letters == order) return term;
    std::vector<int64_t> perm;
    for (char ch : order) perm.push_back(static_cast<int64_t>(term.letters.find(ch)));
    return step(OpId::transpose, {term.name}, {{"perm", perm}}, order);
  }

  Expected<Term> reshaped(const Term& term, const std::vector<int64_t>& shape) {
    return step(OpId::reshape, {term.name}, {{"shape", shape}}, "");
  }

  int64_t product(const std::string& letters) const {
    int64_t n = 1;
    for (char ch : letters) n *= sizes_.at(ch);
    return n;
  }

  // a·b over their shared letters as one batched matmul: [batch, M, K] x [batch, K, N].
  Expected<Term> contract(Term a, Term b, const std::set<char>& needed) {
    std::set<char> in_a(a.letters.begin(), a.letters.end()), in_b(b.letters.begin(), b.letters.end());
    // Letters only one side has and nothing needs are summed first.
    std::set<char> keep_a = needed, keep_b = needed;
    keep_a.insert(in_b.begin(), in_b.end());
    keep_b.insert(in_a.begin(), in_a.end());
    CLEAVE_ASSIGN_OR_RETURN(a, sumAway(a, keep_a));
    CLEAVE_ASSIGN_OR_RETURN(b, sumAway(b, keep_b));
    std::string batch, contracted, a_only, b_only;
    for (char ch : a.letters) {
      if (b.letters.find(ch) == std::string::npos) a_only += ch;
      else if (needed.count(ch)) batch += ch;
      else contracted += ch;
    }
    for (char ch : b.letters)
      if (a.letters.find(ch) == std::string::npos) b_only += ch;
    CLEAVE_ASSIGN_OR_RETURN(a, permute(a, batch + a_only + contracted));
    CLEAVE_ASSIGN_OR_RETURN(b, permute(b, batch + contracted + b_only));
    std::vector<int64_t> batch_dims;
    for (char ch : batch) batch_dims.push_back(sizes_.at(ch));
    auto with = [&](std::vector<int64_t> dims, std::initializer_list<int64_t> tail) {
      dims.insert(dims.end(), tail);
      return dims;
    };
    CLEAVE_ASSIGN_OR_RETURN(Term a3, reshaped(a, with(batch_dims, {product(a_only), product(contracted)})));
    CLEAVE_ASSIGN_OR_RETURN(Term b3, reshaped(b, with(batch_dims, {product(contracted), product(b_only)})));
    CLEAVE_ASSIGN_OR_RETURN(Term product_term, step(OpId::matmul, {a3.name, b3.name}, {}, ""));
    std::vector<int64_t> out_dims = batch_dims;
    for (char ch : a_only + b_only) out_dims.push_back(sizes_.at(ch));
    CLEAVE_ASSIGN_OR_RETURN(Term out, reshaped(product_term, out_dims));
    out.letters = batch + a_only + b_only;
    return out;
  }

  OnnxImportContext& ctx_;
  const onnx::NodeProto& node_;
  std::map<char, int64_t> sizes_;
  int step_ = 0;
};

Status convertEinsum(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  if (node.input_size() < 1) return ctx.nodeError(node, "Einsum needs at least one input");
  return EinsumLowering(ctx, node).run();
}

constexpr OnnxConverter kEinsumConverters[] = {
    {"Einsum", convertEinsum},
};

}  // namespace

std::span<const OnnxConverter> einsumConverters() { return kEinsumConverters; }

}  // namespace cleave
