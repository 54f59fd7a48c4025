// Harness cases of the shape family (ir/ops/shape_ops.cpp): reshape-likes, transpose, concat,
// split, slice (negative steps, clamping), gather (negative indices), expand, trilu and constant.
#include <memory>

#include "tests/ops/op_cases.h"

namespace cleave::op_harness {

CaseList shapeCases() {
  CaseBuilder b(105);
  using Ints = std::vector<int64_t>;
  for (DType dtype : {DType::kF32, DType::kI64}) {
    const std::string dt(dtypeName(dtype));
    auto tensor = [&](Shape shape) { return dtype == DType::kI64 ? b.integers(dtype, shape, -9, 9) : b.uniform(dtype, shape); };
    const TensorData x = tensor({2, 3, 4, 5});
    b.add(OpId::reshape, dt + " inferred dim", {x}, {{"shape", Ints{6, -1}}});
    b.add(OpId::reshape, dt + " to a scalar", {tensor({1, 1})}, {{"shape", Ints{}}});
    b.add(OpId::flatten, dt + " axis 2", {x}, {{"axis", int64_t{2}}});
    b.add(OpId::flatten, dt + " axis -1", {x}, {{"axis", int64_t{-1}}});
    b.add(OpId::squeeze, dt + " every size-1 dim", {tensor({3, 1, 4})});
    b.add(OpId::squeeze, dt + " one axis", {tensor({1, 3, 1})}, {{"axes", Ints{-1}}});
    b.add(OpId::unsqueeze, dt + " two axes", {x}, {{"axes", Ints{0, 5}}});
    for (const Ints& perm : {Ints{0, 2, 3, 1}, Ints{3, 2, 1, 0}, Ints{}, Ints{1, 0, 2, 3}, Ints{0, 1, 2, 3}})
      b.add(OpId::transpose, dt + " perm " + std::to_string(perm.size()), {x}, {{"perm", perm}});
    b.add(OpId::transpose, dt + " empty dim", {tensor({0, 3})}, {{"perm", Ints{1, 0}}});
    const TensorData a = tensor({2, 1, 5}), c = tensor({2, 4, 5});
    b.add(OpId::concat, dt + " axis 1", {a, c, a}, {{"axis", int64_t{1}}});
    b.add(OpId::concat, dt + " axis 0", {c, c}, {{"axis", int64_t{0}}});
    b.add(OpId::concat, dt + " negative axis, an empty part", {c, tensor({2, 4, 0})}, {{"axis", int64_t{-1}}});
    b.add(OpId::split, dt + " with an empty part", {x}, {{"axis", int64_t{2}}, {"sizes", Ints{1, 0, 3}}});
    b.add(OpId::split, dt + " axis 0", {x}, {{"axis", int64_t{0}}, {"sizes", Ints{1, 1}}});
    b.add(OpId::split, dt + " negative axis", {x}, {{"axis", int64_t{-1}}, {"sizes", Ints{2, 3}}});
    b.add(OpId::slice, dt + " negative step",
          {x}, {{"starts", Ints{1, -1}}, {"ends", Ints{3, 0}}, {"axes", Ints{1, 3}}, {"steps", Ints{1, -2}}});
    b.add(OpId::slice, dt + " clamped end, step 3", {x},
          {{"starts", Ints{0}}, {"ends", Ints{100}}, {"axes", Ints{2}}, {"steps", Ints{3}}});
    b.add(OpId::slice, dt + " default axes", {tensor({6, 4})}, {{"starts", Ints{1, 1}}, {"ends", Ints{5, -1}}});
    b.add(OpId::slice, dt + " empty result", {tensor({6, 4})}, {{"starts", Ints{3}}, {"ends", Ints{3}}});
    const TensorData table = tensor({7, 6});
    b.add(OpId::gather, dt + " negative indices", {table, b.integers(DType::kI64, {3, 4}, -7, 6)});
    b.add(OpId::gather, dt + " i32 indices axis 1", {table, b.integers(DType::kI32, {5}, -6, 5)}, {{"axis", int64_t{1}}});
    b.add(OpId::gather, dt + " last axis", {x, b.integers(DType::kI32, {2, 2}, -5, 4)}, {{"axis", int64_t{3}}});
    b.add(OpId::gather, dt + " scalar index", {table, CaseBuilder::values(DType::kI64, {}, {-1})});
    // An embedding's padding_idx leaves the lookup as it is; its gradient (dy zeroed at the padding
    // row's ids, tests/lit/passes/padding-idx.cir) is on purpose not the finite difference.
    b.addWithoutGradient(OpId::gather, dt + " padding_idx", {table, CaseBuilder::values(DType::kI64, {2, 3}, {0, 2, 2, 6, 0, 1})},
                         {{"axis", int64_t{0}}, {"padding_idx", int64_t{2}}},
                         "padding_idx's row gets no gradient on purpose (nn.Embedding's), unlike the finite difference");
    b.add(OpId::gather_elements, dt + " axis 0, fewer rows, negative indices", {table, b.integers(DType::kI64, {3, 6}, -7, 6)});
    b.add(OpId::gather_elements, dt + " i32 axis 1, narrower indices", {table, b.integers(DType::kI32, {7, 4}, -6, 5)},
          {{"axis", int64_t{1}}});
    b.add(OpId::gather_elements, dt + " 4-D, last axis", {x, b.integers(DType::kI64, {2, 2, 4, 7}, -5, 4)}, {{"axis", int64_t{-1}}});
    b.add(OpId::gather_nd, dt + " pairs of indices", {tensor({4, 5, 3}), b.integers(DType::kI64, {2, 3, 2}, -4, 3)});
    b.add(OpId::gather_nd, dt + " whole rows, i32", {tensor({4, 5, 3}), b.integers(DType::kI32, {6, 1}, -4, 3)});
    b.add(OpId::gather_nd, dt + " batch_dims 1, full tuples",
          {tensor({2, 5, 3}), b.integers(DType::kI64, {2, 4, 2}, 0, 2)}, {{"batch_dims", int64_t{1}}});
    // scatter: distinct targets for the gradient check (duplicates make reduction none order-dependent).
    const TensorData rows_permuted = CaseBuilder::values(DType::kI64, {2, 6}, {3, 0, 6, -1, 2, 4, 1, 5, -7, 0, 4, 2});
    b.add(OpId::scatter_elements, dt + " axis 0, distinct rows", {table, rows_permuted, tensor({2, 6})});
    b.add(OpId::scatter_elements, dt + " i32 axis 1, add", {table, b.integers(DType::kI32, {7, 4}, -6, 5), tensor({7, 4})},
          {{"axis", int64_t{1}}, {"reduction", std::string("add")}});
    b.add(OpId::scatter_nd, dt + " distinct rows", {tensor({4, 5, 3}), CaseBuilder::values(DType::kI64, {2, 1}, {2, -4}), tensor({2, 5, 3})});
    b.add(OpId::scatter_nd, dt + " pairs, add", {tensor({4, 5, 3}), b.integers(DType::kI64, {3, 2}, -4, 3), tensor({3, 3})},
          {{"reduction", std::string("add")}});
    for (const char* reduction : {"mul", "max", "min"})
      b.addWithoutGradient(OpId::scatter_elements, dt + " reduction " + reduction,
                           {table, b.integers(DType::kI64, {3, 6}, -7, 6), tensor({3, 6})},
                           {{"reduction", std::string(reduction)}}, "mul, max and min have no gradient rule");
    b.add(OpId::expand, dt + " new and size-1 dims", {tensor({3, 1})}, {{"shape", Ints{2, 3, 4}}});
    b.add(OpId::expand, dt + " keeps dims given as 1", {tensor({2, 3})}, {{"shape", Ints{1, 3}}});
    const TensorData square = tensor({2, 5, 6});
    for (int64_t upper : {0, 1})
      for (int64_t k : {-2, 0, 3, 100})
        b.add(OpId::trilu, dt + " upper " + std::to_string(upper) + " k " + std::to_string(k), {square},
              {{"upper", upper}, {"k", k}});
  }
  auto value = std::make_shared<const TensorData>(b.uniform(DType::kF32, {3, 2}));
  b.add(OpId::constant, "f32 [3,2]", {}, {{"value", std::shared_ptr<const TensorData>(value)}});
  auto ints = std::make_shared<const TensorData>(b.integers(DType::kI64, {4}, -5, 5));
  b.add(OpId::constant, "i64 [4]", {}, {{"value", std::shared_ptr<const TensorData>(ints)}});
  b.add(OpId::transpose, "large (perf)", {b.uniform(DType::kF32, {1024, 1024})}, {{"perm", Ints{1, 0}}}).perf = true;
  return b.take();
}

}  // namespace cleave::op_harness
