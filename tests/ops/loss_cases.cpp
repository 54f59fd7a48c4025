// Harness cases of the loss family (ir/ops/loss.cpp): softmax_cross_entropy (ignore_index, i32
// labels, wide rows, large logits), softmax_cross_entropy_and_grad and mse.
#include "tests/ops/op_cases.h"

namespace cleave::op_harness {

CaseList lossCases() {
  CaseBuilder b(106);
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const std::string dt(dtypeName(dtype));
    TensorData labels = b.integers(DType::kI64, {4, 6}, 0, 10);
    reinterpret_cast<int64_t*>(labels.bytes.data())[3] = -100;
    reinterpret_cast<int64_t*>(labels.bytes.data())[7] = -100;
    b.add(OpId::softmax_cross_entropy, dt + " ignored labels", {b.uniform(dtype, {4, 6, 11}, -4, 4), labels});
    b.add(OpId::softmax_cross_entropy, dt + " i32 labels",
          {b.uniform(dtype, {4, 6, 11}, -4, 4), b.integers(DType::kI32, {4, 6}, 0, 10)});
    b.add(OpId::softmax_cross_entropy, dt + " wide rows",
          {b.uniform(dtype, {3, 1000}, -4, 4), b.integers(DType::kI64, {3}, 0, 999)});
    b.add(OpId::softmax_cross_entropy, dt + " small, ignore_index 2",
          {b.uniform(dtype, {2, 3, 5}, -3, 3), CaseBuilder::values(DType::kI64, {2, 3}, {0, 4, 2, 2, 2, 1})},
          {{"ignore_index", int64_t{2}}});
    b.add(OpId::softmax_cross_entropy, dt + " large logits",
          {CaseBuilder::values(dtype, {2, 3}, {500, 1, -2, 0.5, 3, 2}), CaseBuilder::values(DType::kI32, {2}, {1, 0})});
    b.addWithoutGradient(OpId::softmax_cross_entropy, dt + " every label ignored (NaN)",
                         {b.uniform(dtype, {3, 4}), CaseBuilder::values(DType::kI64, {3}, {-100, -100, -100})}, {},
                         "the loss is NaN");
    // The loss and its gradient in one pass, as the fusion pass makes it: ignored labels, i32
    // labels, wide rows, more rows than one block of the loss's sum, every label ignored.
    const TensorData dloss = b.uniform(DType::kF32, {}, 0.5, 2);
    const std::string made_after_autodiff = "made by the fusion pass, after autodiff";
    b.addWithoutGradient(OpId::softmax_cross_entropy_and_grad, dt + " ignored labels",
                         {b.uniform(dtype, {4, 6, 11}, -4, 4), labels, dloss}, {}, made_after_autodiff);
    b.addWithoutGradient(OpId::softmax_cross_entropy_and_grad, dt + " wide rows, i32 labels",
                         {b.uniform(dtype, {3, 1000}, -4, 4), b.integers(DType::kI32, {3}, 0, 999), dloss}, {},
                         made_after_autodiff);
    b.addWithoutGradient(OpId::softmax_cross_entropy_and_grad, dt + " 150 rows, ignore_index 2",
                         {b.uniform(dtype, {150, 7}, -3, 3), b.integers(DType::kI64, {150}, 0, 6), dloss},
                         {{"ignore_index", int64_t{2}}}, made_after_autodiff);
    b.addWithoutGradient(OpId::softmax_cross_entropy_and_grad, dt + " every label ignored (NaN loss, zero gradient)",
                         {b.uniform(dtype, {3, 4}), CaseBuilder::values(DType::kI64, {3}, {-100, -100, -100}), dloss}, {},
                         made_after_autodiff);
    for (const Shape& shape : {Shape{5}, Shape{7, 3}, Shape{3, 1001}, Shape{}})
      b.add(OpId::mse, dt + " " + shapeStr(shape), {b.uniform(dtype, shape), b.uniform(dtype, shape)});
  }
  b.add(OpId::mse, "large", {b.uniform(DType::kF32, {300, 700}), b.uniform(DType::kF32, {300, 700})});
  return b.take();
}

}  // namespace cleave::op_harness
