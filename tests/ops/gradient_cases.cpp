// Harness cases of the gradient family (ir/ops/gradient_ops.cpp): the backward ops autodiff emits,
// with forward results (softmax's y, pool shapes) computed from the forward op's reference.
#include <limits>

#include "tests/ops/op_cases.h"

namespace cleave::op_harness {
namespace {

using Ints = std::vector<int64_t>;

// The first reference result of `op` on `operands` (the forward value a gradient op reads).
TensorData forwardValue(OpId op, std::vector<TensorData> operands, const AttrMap& attrs) {
  OpCase c;
  c.op = op;
  c.operands = std::move(operands);
  c.attrs = attrs;
  auto types = resultTypes(c);
  auto results = referenceResults(op, attrs, c.operands, types.value());
  return (*results).value()[0];
}

// The shape of `op`'s first result on operands of `types`.
Shape forwardShape(OpId op, std::vector<TensorType> types, const AttrMap& attrs) {
  return inferResultTypes(opDef(op), types, attrs).value()[0].shape;
}

}  // namespace

CaseList gradientCases() {
  CaseBuilder b(107);
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const std::string dt(dtypeName(dtype));
    for (const Shape& shape : {Shape{7}, Shape{4, 37}, Shape{3, 5, 7}, Shape{0, 3}}) {
      const std::string label = dt + " " + shapeStr(shape);
      const TensorData dy = b.uniform(dtype, shape), x = b.uniform(dtype, shape, -3, 3);
      for (OpId op : {OpId::relu_grad, OpId::gelu_grad}) b.add(op, label, {dy, x});
      b.add(OpId::gelu_grad, label + " tanh approximation", {dy, x}, {{"approximate", std::string("tanh")}});
      b.add(OpId::tanh_grad, label, {dy, forwardValue(OpId::tanh, {x}, {})});
      b.add(OpId::sigmoid_grad, label, {dy, forwardValue(OpId::sigmoid, {x}, {})});
      for (int64_t axis : {int64_t{0}, int64_t{-1}}) {
        const AttrMap attrs = {{"axis", axis}};
        b.add(OpId::softmax_grad, label + " axis " + std::to_string(axis), {dy, forwardValue(OpId::softmax, {x}, attrs)}, attrs);
        b.add(OpId::log_softmax_grad, label + " axis " + std::to_string(axis),
              {dy, forwardValue(OpId::log_softmax, {x}, attrs)}, attrs);
      }
    }
    const TensorData dy = b.uniform(dtype, {6, 4, 33}), x = b.uniform(dtype, {6, 4, 33});
    const std::optional<Tolerance> layer_norm_device =
        dtype == DType::kF32 ? std::optional<Tolerance>(Tolerance{1e-4, 1e-4}) : std::nullopt;
    b.add(OpId::layer_norm_grad, dt + " axis -1", {dy, x, b.uniform(dtype, {33})}).device_tolerance = layer_norm_device;
    b.add(OpId::layer_norm_grad, dt + " axis 1", {dy, x, b.uniform(dtype, {4, 33})}, {{"axis", int64_t{1}}})
        .device_tolerance = layer_norm_device;
    b.add(OpId::layer_norm_grad, dt + " epsilon 1e-2", {b.uniform(dtype, {3, 4, 6}), b.uniform(dtype, {3, 4, 6}, -2, 2),
                                                        b.uniform(dtype, {6})},
          {{"epsilon", 1e-2}});

    b.add(OpId::rms_norm_grad, dt + " axis -1", {dy, x, b.uniform(dtype, {33})}).device_tolerance = layer_norm_device;
    b.add(OpId::rms_norm_grad, dt + " axis 1", {dy, x, b.uniform(dtype, {4, 33})}, {{"axis", int64_t{1}}})
        .device_tolerance = layer_norm_device;
    b.add(OpId::rms_norm_grad, dt + " epsilon 1e-2, many rows",
          {b.uniform(dtype, {70, 6}), b.uniform(dtype, {70, 6}, -2, 2), b.uniform(dtype, {6})}, {{"epsilon", 1e-2}});

    // Convolution gradients: dy of the forward result's shape.
    struct Conv {
      Shape x, w;
      AttrMap attrs;
    };
    const std::vector<Conv> convs = {
        {{2, 4, 7, 8}, {6, 4, 3, 3}, {}},
        {{2, 4, 7, 8}, {6, 4, 3, 3}, {{"pads", Ints{1, 1, 1, 1}}}},
        {{2, 4, 7, 8}, {6, 4, 3, 3}, {{"strides", Ints{2, 2}}, {"dilations", Ints{2, 1}}, {"pads", Ints{2, 1, 2, 1}}}},
        {{2, 4, 7, 8}, {6, 2, 3, 3}, {{"groups", int64_t{2}}, {"pads", Ints{1, 1, 1, 1}}}},
        {{2, 4, 7, 8}, {6, 4, 3, 3}, {{"pads", Ints{0, 1, 2, 0}}, {"strides", Ints{1, 2}}}},
        {{2, 3, 6, 6}, {3, 1, 3, 3}, {{"groups", int64_t{3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}},
        {{2, 2, 4, 3}, {8, 2, 1, 7}, {{"pads", Ints{0, 3, 0, 3}}}},
    };
    for (const Conv& c : convs) {
      const Shape y = forwardShape(OpId::conv2d, {{dtype, c.x}, {dtype, c.w}}, c.attrs);
      const std::string label = dt + " x " + shapeStr(c.x) + " w " + shapeStr(c.w) + " dy " + shapeStr(y);
      AttrMap input_attrs = c.attrs, weight_attrs = c.attrs;
      input_attrs["input_shape"] = c.x;
      weight_attrs["weight_shape"] = c.w;
      b.add(OpId::conv2d_grad_input, label, {b.uniform(dtype, y), b.uniform(dtype, c.w)}, input_attrs);
      OpCase& weight = b.add(OpId::conv2d_grad_weight, label, {b.uniform(dtype, y), b.uniform(dtype, c.x)}, weight_attrs);
      if (dtype == DType::kF32) {
        weight.tolerance = Tolerance{1e-5, 1e-5};
        weight.device_tolerance = Tolerance{1e-4, 1e-4};
      }
    }

    // Pool gradients.
    const std::vector<AttrMap> pools = {
        {{"kernel", Ints{2, 2}}},
        {{"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}},
        {{"kernel", Ints{3, 2}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 0, 0, 1}}, {"ceil_mode", int64_t{1}}},
        {{"kernel", Ints{2, 3}}, {"strides", Ints{1, 1}}, {"pads", Ints{1, 1, 0, 1}}}};
    for (const AttrMap& attrs : pools) {
      const Shape x_shape = {2, 3, 9, 8};
      TensorData x = b.uniform(dtype, x_shape);
      const Shape y = forwardShape(OpId::max_pool2d, {{dtype, x_shape}}, attrs);
      const std::string label = dt + " dy " + shapeStr(y);
      b.add(OpId::max_pool2d_grad, label, {b.uniform(dtype, y), x}, attrs);
      for (int64_t count_include_pad : {0, 1}) {
        AttrMap avg_attrs = attrs;
        avg_attrs["input_shape"] = x_shape;
        avg_attrs["count_include_pad"] = count_include_pad;
        b.add(OpId::avg_pool2d_grad, label + " count_include_pad " + std::to_string(count_include_pad),
              {b.uniform(dtype, y)}, avg_attrs);
      }
    }
    TensorData tie = b.uniform(dtype, {1, 1, 4, 4});
    const TensorData dy_tie = b.uniform(dtype, {1, 1, 2, 2});
    b.add(OpId::max_pool2d_grad, dt + " tie goes to the first maximum",
          {dy_tie, CaseBuilder::values(dtype, {1, 1, 4, 4}, {1, 1, 0, 0, 0, 1, 0, 2, 3, 0, 2, 2, 0, 0, 2, 2})},
          {{"kernel", Ints{2, 2}}});
    const double nan = std::numeric_limits<double>::quiet_NaN();
    b.add(OpId::max_pool2d_grad, dt + " the last NaN of a window takes its gradient",
          {dy_tie, CaseBuilder::values(dtype, {1, 1, 4, 4}, {nan, 1, 0, nan, nan, nan, 5, 0, 3, 0, 2, 9, 0, 0, 9, nan})},
          {{"kernel", Ints{2, 2}}});
    // Rows wide enough for the vectorised 2x2 kernel (4 windows a step, then a scalar tail): windows
    // whose maximum is shared by each pair and triple of their elements, and the same with a NaN in
    // the second row pair only.
    const std::vector<double> ties = {2, 2, 0, 1, 1, 1, 3, 0, 5, 5,   //
                                      1, 0, 1, 1, 0, 1, 3, 3, 5, 5,   //
                                      0, 0, 0, 4, 1, 0, 0, 2, 7, 1,   //
                                      3, 3, 4, 0, 0, 1, 2, 2, 0, 7};
    std::vector<double> with_nan = ties;
    with_nan[27] = with_nan[33] = nan;
    const TensorData dy_wide = b.uniform(dtype, {1, 1, 2, 5});
    b.add(OpId::max_pool2d_grad, dt + " ties in wide rows", {dy_wide, CaseBuilder::values(dtype, {1, 1, 4, 10}, ties)},
          {{"kernel", Ints{2, 2}}});
    b.add(OpId::max_pool2d_grad, dt + " a NaN in wide rows", {dy_wide, CaseBuilder::values(dtype, {1, 1, 4, 10}, with_nan)},
          {{"kernel", Ints{2, 2}}});

    // gather_grad and slice_grad.
    b.add(OpId::gather_grad, dt + " repeated negative indices",
          {b.uniform(dtype, {3, 4, 6}), b.integers(DType::kI64, {3, 4}, -7, 6)}, {{"data_shape", Ints{7, 6}}});
    b.add(OpId::gather_grad, dt + " i32 indices axis 1", {b.uniform(dtype, {7, 5}), b.integers(DType::kI32, {5}, -6, 5)},
          {{"data_shape", Ints{7, 6}}, {"axis", int64_t{1}}});
    b.add(OpId::gather_elements_grad, dt + " repeated negative indices",
          {b.uniform(dtype, {3, 6}), b.integers(DType::kI64, {3, 6}, -7, 6)}, {{"data_shape", Ints{7, 6}}});
    b.add(OpId::gather_elements_grad, dt + " i32 indices axis 1",
          {b.uniform(dtype, {7, 4}), b.integers(DType::kI32, {7, 4}, -6, 5)}, {{"data_shape", Ints{7, 6}}, {"axis", int64_t{1}}});
    b.add(OpId::gather_nd_grad, dt + " repeated tuples",
          {b.uniform(dtype, {2, 3, 3}), b.integers(DType::kI64, {2, 3, 2}, -2, 1)}, {{"data_shape", Ints{4, 2, 3}}});
    b.add(OpId::gather_nd_grad, dt + " batch_dims 1",
          {b.uniform(dtype, {2, 4}), b.integers(DType::kI32, {2, 4, 2}, 0, 2)},
          {{"data_shape", Ints{2, 5, 3}}, {"batch_dims", int64_t{1}}});
    const AttrMap slice_attrs = {{"starts", Ints{1, -1}}, {"ends", Ints{3, 0}}, {"axes", Ints{1, 3}}, {"steps", Ints{1, -2}}};
    AttrMap slice_grad_attrs = slice_attrs;
    slice_grad_attrs["input_shape"] = Ints{2, 3, 4, 5};
    b.add(OpId::slice_grad, dt + " negative step",
          {b.uniform(dtype, forwardShape(OpId::slice, {{dtype, {2, 3, 4, 5}}}, slice_attrs))}, slice_grad_attrs);
    const AttrMap clamped = {{"input_shape", Ints{6, 4}}, {"starts", Ints{-100}}, {"ends", Ints{100}}, {"steps", Ints{2}}};
    b.add(OpId::slice_grad, dt + " clamped, step 2", {b.uniform(dtype, {3, 4})}, clamped);

    // softmax_cross_entropy_grad.
    TensorData labels = b.integers(DType::kI64, {4, 6}, 0, 10);
    reinterpret_cast<int64_t*>(labels.bytes.data())[3] = -100;
    const TensorData dloss = b.uniform(DType::kF32, {}, 0.5, 2);
    b.add(OpId::softmax_cross_entropy_grad, dt + " ignored labels", {dloss, b.uniform(dtype, {4, 6, 11}, -4, 4), labels});
    b.add(OpId::softmax_cross_entropy_grad, dt + " wide, i32 labels",
          {dloss, b.uniform(dtype, {3, 1000}, -4, 4), b.integers(DType::kI32, {3}, 0, 999)});
    b.add(OpId::softmax_cross_entropy_grad, dt + " ignore_index 7",
          {dloss, b.uniform(dtype, {2, 3, 5}, -3, 3), CaseBuilder::values(DType::kI32, {2, 3}, {0, 4, 7, 2, 2, 1})},
          {{"ignore_index", int64_t{7}}});
  }
  return b.take();
}

}  // namespace cleave::op_harness
