// Harness cases of the linear algebra family (ir/ops/linear_algebra.cpp): matmul with batch
// broadcasting and transposes, gemm with scaling and broadcast c, in floats and integers; fused_matmul
// with attention's head transposes and bias rows folded in.
#include "tests/ops/op_cases.h"

namespace cleave::op_harness {

CaseList linearAlgebraCases() {
  CaseBuilder b(102);
  struct Product {
    Shape a, b;
    int64_t transpose_a, transpose_b;
  };
  const std::vector<Product> products = {{{5, 7}, {7, 3}, 0, 0},          {{2, 5, 7}, {7, 3}, 0, 0},
                                         {{2, 1, 5, 7}, {3, 7, 4}, 0, 0}, {{4, 7, 5}, {4, 7, 3}, 1, 0},
                                         {{4, 5, 7}, {1, 3, 7}, 0, 1},    {{7, 5}, {2, 3, 7}, 1, 1},
                                         {{3, 65, 33}, {33, 17}, 0, 0},   {{3, 4, 0}, {0, 5}, 0, 0},
                                         {{0, 4, 6}, {6, 2}, 0, 0},
                                         // batch dims a and b share (attention's products)
                                         {{2, 3, 5, 7}, {2, 3, 7, 4}, 0, 0}, {{2, 3, 5, 7}, {2, 3, 4, 7}, 0, 1},
                                         {{3, 7, 5}, {3, 4, 7}, 1, 1}};
  for (const Product& p : products) {
    const AttrMap attrs = {{"transpose_a", p.transpose_a}, {"transpose_b", p.transpose_b}};
    const std::string label = shapeStr(p.a) + " x " + shapeStr(p.b) + " t" + std::to_string(p.transpose_a) +
                              std::to_string(p.transpose_b);
    b.add(OpId::matmul, label, {b.uniform(DType::kF32, p.a), b.uniform(DType::kF32, p.b)}, attrs).tolerance = Tolerance{1e-5, 1e-5};
    b.add(OpId::matmul, label, {b.uniform(DType::kF64, p.a), b.uniform(DType::kF64, p.b)}, attrs);
    b.add(OpId::matmul, "i64 " + label, {b.integers(DType::kI64, p.a, -9, 9), b.integers(DType::kI64, p.b, -9, 9)}, attrs);
  }
  OpCase& large = b.add(OpId::matmul, "large (perf)", {b.uniform(DType::kF32, {512, 512}), b.uniform(DType::kF32, {512, 512})});
  large.perf = true;
  large.tolerance = Tolerance{1e-4, 2e-5};  // f32 sums of 512 products

  const int64_t m = 5, k = 4, n = 3;
  for (DType dtype : {DType::kF32, DType::kF64, DType::kI64, DType::kI32}) {
    const bool integer = dtype == DType::kI64 || dtype == DType::kI32;
    auto operand = [&](Shape shape) { return integer ? b.integers(dtype, shape, -5, 5) : b.uniform(dtype, shape); };
    const double alpha = integer ? 3 : 0.75, beta = integer ? -2 : 1.5;
    for (int64_t ta : {0, 1})
      for (int64_t tb : {0, 1}) {
        const TensorData a = operand(ta ? Shape{k, m} : Shape{m, k}), bm = operand(tb ? Shape{n, k} : Shape{k, n});
        const AttrMap attrs = {{"alpha", alpha}, {"beta", beta}, {"transpose_a", ta}, {"transpose_b", tb}};
        const std::string label = std::string(dtypeName(dtype)) + " t" + std::to_string(ta) + std::to_string(tb);
        b.add(OpId::gemm, label + " without c", {a, bm}, attrs);
        for (const Shape& c_shape : {Shape{}, Shape{n}, Shape{m, 1}, Shape{m, n}, Shape{1, n}})
          b.add(OpId::gemm, label + " c " + shapeStr(c_shape), {a, bm, operand(c_shape)}, attrs);
      }
  }
  b.add(OpId::gemm, "defaults", {b.uniform(DType::kF32, {6, 9}), b.uniform(DType::kF32, {9, 4})});
  b.add(OpId::gemm, "beta 0", {b.uniform(DType::kF32, {6, 9}), b.uniform(DType::kF32, {9, 4}), b.uniform(DType::kF32, {6, 4})},
        {{"beta", 0.0}});

  // fused_matmul: attention's products with the head transposes ([batch, seq, heads, dim] <->
  // [batch, heads, seq, dim]) folded in, as the fusion pass makes them; f32 runs through oneDNN in
  // place, the rest (and a weight broadcast over the batch) through transposed copies.
  const Shape heads = {2, 5, 3, 4}, scores = {2, 3, 5, 5};
  const std::vector<int64_t> swap_heads = {0, 2, 1, 3};
  struct Folded {
    std::string label;
    Shape a, b;
    AttrMap attrs;
    int64_t bias = 0;  // columns of a bias row, 0: none
  };
  const std::vector<Folded> folded = {
      {"q k^T scores", heads, heads, {{"perm_a", swap_heads}, {"perm_b", swap_heads}, {"transpose_b", int64_t{1}}}},
      {"probs v, merged heads", scores, heads, {{"perm_b", swap_heads}, {"perm_result", swap_heads}}},
      {"dv = probs^T dcontext", scores, heads,
       {{"transpose_a", int64_t{1}}, {"perm_b", swap_heads}, {"perm_result", swap_heads}}},
      {"dprobs = dcontext v^T", heads, heads, {{"perm_a", swap_heads}, {"perm_b", swap_heads}, {"transpose_b", int64_t{1}}}},
      {"a permuted in its last dims", {2, 3, 4, 5}, {2, 3, 5, 4}, {{"perm_a", std::vector<int64_t>{0, 1, 3, 2}}, {"transpose_a", int64_t{1}}}},
      {"weight broadcast over the batch", heads, {4, 6}, {{"perm_a", swap_heads}, {"perm_result", std::vector<int64_t>{1, 0, 2, 3}}}},
      {"no permutation", {3, 4, 5}, {3, 5, 2}, {}},
      {"linear layer + bias (batch folded into rows)", {2, 5, 6}, {4, 6}, {{"transpose_b", int64_t{1}}}, 4},
      {"batched + bias", {3, 4, 5}, {3, 5, 2}, {}, 2},
      {"merged heads + bias", scores, heads, {{"perm_b", swap_heads}, {"perm_result", swap_heads}}, 4},
  };
  for (const Folded& f : folded)
    for (DType dtype : {DType::kF32, DType::kF64, DType::kI64}) {
      const bool integer = dtype == DType::kI64;
      auto operand = [&](const Shape& shape) { return integer ? b.integers(dtype, shape, -9, 9) : b.uniform(dtype, shape); };
      std::vector<TensorData> operands = {operand(f.a), operand(f.b)};
      if (f.bias > 0) operands.push_back(operand({f.bias}));
      OpCase& c = b.addWithoutGradient(OpId::fused_matmul, std::string(dtypeName(dtype)) + " " + f.label,
                                       std::move(operands), f.attrs, "fused_matmul has no gradient rule");
      if (dtype == DType::kF32) c.tolerance = Tolerance{1e-5, 1e-5};
    }
  return b.take();
}

}  // namespace cleave::op_harness
