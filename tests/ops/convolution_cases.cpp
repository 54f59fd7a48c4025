// Harness cases of the convolution family (ir/ops/convolution.cpp): conv2d with strides, pads,
// dilations and groups (depthwise, 1x1, kernels wider than the image), NCHW and NHWC, max/avg pools
// with ceil_mode and padding (max_pool2d NHWC too), global_avg_pool.
#include <limits>

#include "tests/ops/op_cases.h"

namespace cleave::op_harness {

CaseList convolutionCases() {
  CaseBuilder b(104);
  using Ints = std::vector<int64_t>;
  struct Conv {
    Shape x, w;
    Ints strides, pads, dilations;
    int64_t groups;
    const char* what;
  };
  const std::vector<Conv> convs = {
      {{2, 3, 7, 6}, {4, 3, 3, 2}, {2, 1}, {1, 0, 2, 1}, {1, 2}, 1, "strides, asymmetric pads, dilation"},
      {{2, 4, 6, 5}, {6, 2, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2, "groups"},
      {{2, 3, 6, 6}, {3, 1, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 3, "depthwise"},
      {{1, 2, 5, 6}, {4, 1, 2, 3}, {1, 2}, {0, 1, 1, 0}, {2, 1}, 2, "depthwise with a channel multiplier"},
      {{2, 1, 6, 5}, {3, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, "one input channel"},
      {{2, 6, 4, 5}, {3, 6, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, "1x1"},
      {{2, 4, 3, 4}, {6, 2, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 2, "grouped 1x1"},
      {{2, 3, 5, 5}, {2, 3, 1, 1}, {2, 2}, {1, 0, 0, 1}, {1, 1}, 1, "1x1 with stride and padding"},
      {{2, 3, 6, 7}, {9, 3, 3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}, 1, "width-keeping with dilation"},
      {{1, 2, 5, 6}, {9, 2, 4, 4}, {1, 1}, {2, 1, 1, 2}, {1, 1}, 1, "even kernel, asymmetric pads"},
      {{2, 2, 4, 3}, {8, 2, 1, 7}, {1, 1}, {0, 3, 0, 3}, {1, 1}, 1, "kernel wider than the image"},
      {{2, 4, 1, 1}, {3, 4, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, "1x1 image, padded 3x3"},
      {{1, 2, 2, 1}, {3, 2, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, "padding wider than the image"},
      {{2, 4, 7, 8}, {6, 4, 3, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, "defaults"},
      {{2, 4, 7, 8}, {6, 2, 3, 3}, {1, 2}, {0, 1, 2, 0}, {1, 1}, 2, "groups with asymmetric pads"},
      {{3, 5, 5, 5}, {4, 5, 3, 3}, {2, 2}, {1, 0, 1, 1}, {2, 2}, 1, "output planes of 2x1 (one matmul over the batch)"},
  };
  for (const Conv& c : convs) {
    const AttrMap attrs = {{"strides", c.strides}, {"pads", c.pads}, {"dilations", c.dilations}, {"groups", c.groups}};
    for (DType dtype : {DType::kF32, DType::kF64}) {
      const std::string label = std::string(c.what) + " " + std::string(dtypeName(dtype));
      const TensorData x = b.uniform(dtype, c.x), w = b.uniform(dtype, c.w);
      b.add(OpId::conv2d, label, {x, w}, attrs);
      b.add(OpId::conv2d, label + " with bias", {x, w, b.uniform(dtype, {c.w[0]})}, attrs);
    }
  }
  // NHWC images (the channels-last pass's layout): f32 on oneDNN, f64 through NCHW copies. No
  // gradient: NHWC convolutions are only in graphs that do not train.
  for (const Conv& c : convs) {
    AttrMap attrs = {{"strides", c.strides}, {"pads", c.pads}, {"dilations", c.dilations}, {"groups", c.groups},
                     {"layout", std::string("NHWC")}};
    for (DType dtype : {DType::kF32, DType::kF64}) {
      const std::string label = std::string(c.what) + " NHWC " + std::string(dtypeName(dtype));
      const TensorData x = b.uniform(dtype, {c.x[0], c.x[2], c.x[3], c.x[1]}), w = b.uniform(dtype, c.w);
      b.addWithoutGradient(OpId::conv2d, label, {x, w, b.uniform(dtype, {c.w[0]})}, attrs, "NHWC has no gradient rule");
    }
  }
  // fused_conv2d: the bias, then + residual, then relu; NCHW and NHWC; f32 on oneDNN's post-ops
  // (the 2x1 planes: the batched matmul, then the epilogue), f64 on the conv2d then the epilogue.
  for (const Conv& c : {convs[0], convs[2], convs[5], convs.back()})
    for (const char* layout : {"NCHW", "NHWC"})
      for (DType dtype : {DType::kF32, DType::kF64})
        for (bool residual : {false, true})
          for (const char* activation : {"none", "relu"}) {
            if (!residual && std::string(activation) == "none") continue;  // that is conv2d
            const bool nhwc = std::string(layout) == "NHWC";
            const Shape x_shape = nhwc ? Shape{c.x[0], c.x[2], c.x[3], c.x[1]} : c.x;
            const AttrMap attrs = {{"strides", c.strides}, {"pads", c.pads}, {"dilations", c.dilations},
                                   {"groups", c.groups}, {"layout", std::string(layout)},
                                   {"activation", std::string(activation)}};
            std::vector<TensorData> operands = {b.uniform(dtype, x_shape), b.uniform(dtype, c.w),
                                                b.uniform(dtype, {c.w[0]})};
            const std::string label = std::string(c.what) + " " + layout + " " + std::string(dtypeName(dtype)) +
                                      (residual ? " + residual" : "") + " " + activation;
            if (residual) {
              const OpDef& def = opDef(OpId::fused_conv2d);
              const std::vector<TensorType> types = {operands[0].type, operands[1].type, operands[2].type};
              operands.push_back(b.uniform(dtype, (*def.shape(OpContext{def, types, {}, attrs}))[0].shape));
            }
            b.addWithoutGradient(OpId::fused_conv2d, label, operands, attrs, "fused_conv2d has no gradient rule");
          }
  // allow_winograd (inference graphs' 3x3 stride-1 convolutions): oneDNN's Winograd where the output
  // plane has 14x14 pixels or more (F(2x2,3x3) and F(4x4,3x3) on AVX-512), the direct algorithm on
  // smaller planes and other CPUs; f64 ignores it. Winograd's transforms round differently: each
  // output is within 2e-5 (5e-6 seen here; outputs up to about 0.5), not the direct sum's 2e-6.
  struct WinogradCase {
    Shape x, w;  // x NCHW
    const char* what;
  };
  for (const WinogradCase& c : {WinogradCase{{1, 32, 16, 16}, {32, 32, 3, 3}, "16x16 plane"},
                                WinogradCase{{2, 24, 14, 15}, {40, 24, 3, 3}, "14x15 plane, channels not a multiple of 16"},
                                WinogradCase{{2, 16, 8, 8}, {16, 16, 3, 3}, "8x8 plane (direct)"}})
    for (const char* layout : {"NCHW", "NHWC"})
      for (DType dtype : {DType::kF32, DType::kF64})
        for (OpId op : {OpId::conv2d, OpId::fused_conv2d}) {
          const bool nhwc = std::string(layout) == "NHWC";
          AttrMap attrs = {{"pads", Ints{1, 1, 1, 1}}, {"layout", std::string(layout)}, {"allow_winograd", int64_t{1}}};
          std::vector<TensorData> operands = {b.uniform(dtype, nhwc ? Shape{c.x[0], c.x[2], c.x[3], c.x[1]} : c.x),
                                              b.uniform(dtype, c.w), b.uniform(dtype, {c.w[0]})};
          if (op == OpId::fused_conv2d) {  // + residual, relu
            attrs["activation"] = std::string("relu");
            const Shape y = nhwc ? Shape{c.x[0], c.x[2], c.x[3], c.w[0]} : Shape{c.x[0], c.w[0], c.x[2], c.x[3]};
            operands.push_back(b.uniform(dtype, y));
          }
          const std::string label = std::string("allow_winograd ") + c.what + " " + layout + " " +
                                    std::string(dtypeName(dtype)) + (op == OpId::fused_conv2d ? " + residual relu" : "");
          b.addWithoutGradient(op, label, operands, attrs, "allow_winograd is set only in graphs that do not train")
              .tolerance = dtype == DType::kF32 ? std::optional<Tolerance>(Tolerance{1e-4, 2e-5}) : std::nullopt;
        }
  // f32 sums of 400 and 576 products.
  b.add(OpId::conv2d, "large image",
        {b.uniform(DType::kF32, {2, 16, 32, 32}), b.uniform(DType::kF32, {4, 16, 5, 5}), b.uniform(DType::kF32, {4})},
        {{"pads", Ints{2, 2, 2, 2}}})
      .tolerance = Tolerance{1e-4, 2e-5};
  OpCase& resnet = b.add(OpId::conv2d, "resnet block (perf)",
                         {b.uniform(DType::kF32, {8, 64, 28, 28}), b.uniform(DType::kF32, {64, 64, 3, 3})},
                         {{"pads", Ints{1, 1, 1, 1}}});
  resnet.perf = true;
  resnet.tolerance = Tolerance{1e-4, 2e-5};

  struct Pool {
    Shape x;
    AttrMap attrs;
  };
  const std::vector<Pool> pools = {
      {{2, 3, 8, 8}, {{"kernel", Ints{2, 2}}}},
      {{1, 2, 7, 9}, {{"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}, {"ceil_mode", int64_t{1}}}},
      {{2, 1, 6, 7}, {{"kernel", Ints{3, 2}}, {"strides", Ints{2, 3}}, {"pads", Ints{1, 0, 0, 1}}, {"ceil_mode", int64_t{1}}}},
      {{1, 2, 5, 5}, {{"kernel", Ints{2, 3}}, {"strides", Ints{1, 1}}, {"pads", Ints{1, 1, 0, 1}}}},
      {{2, 3, 9, 8}, {{"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}},
      {{2, 3, 9, 8}, {{"kernel", Ints{3, 2}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 0, 0, 1}}, {"ceil_mode", int64_t{1}}}},
  };
  for (const Pool& p : pools)
    for (DType dtype : {DType::kF32, DType::kF64}) {
      const std::string label = shapeStr(p.x) + " " + std::string(dtypeName(dtype));
      const TensorData x = b.uniform(dtype, p.x);
      b.add(OpId::max_pool2d, label, {x}, p.attrs);
      b.add(OpId::avg_pool2d, label, {x}, p.attrs);
      AttrMap with_pad = p.attrs;
      with_pad["count_include_pad"] = int64_t{1};
      b.add(OpId::avg_pool2d, label + " count_include_pad", {x}, with_pad);
    }
  for (const Pool& p : pools)
    for (DType dtype : {DType::kF32, DType::kF64}) {
      AttrMap attrs = p.attrs;
      attrs["layout"] = std::string("NHWC");
      b.addWithoutGradient(OpId::max_pool2d, shapeStr(p.x) + " NHWC " + std::string(dtypeName(dtype)),
                           {b.uniform(dtype, {p.x[0], p.x[2], p.x[3], p.x[1]})}, attrs, "NHWC has no gradient rule");
    }
  TensorData tie = b.uniform(DType::kF32, {1, 1, 4, 4});
  reinterpret_cast<float*>(tie.bytes.data())[1] = reinterpret_cast<float*>(tie.bytes.data())[0] = 2.0f;
  b.addWithoutGradient(OpId::max_pool2d, "tie", {tie}, {{"kernel", Ints{2, 2}}}, "a tie has no derivative");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  b.add(OpId::max_pool2d, "NaN propagates", {CaseBuilder::values(DType::kF32, {1, 1, 2, 2}, {1, nan, 3, 2})},
        {{"kernel", Ints{2, 2}}});
  b.add(OpId::max_pool2d, "2x2 windows on odd sizes", {b.uniform(DType::kF32, {2, 3, 7, 9})}, {{"kernel", Ints{2, 2}}});
  b.addWithoutGradient(OpId::max_pool2d, "NaN in 2x2 windows",
                       {CaseBuilder::values(DType::kF32, {1, 1, 2, 4}, {nan, 1, 0, 2, 3, 4, 1, nan})}, {{"kernel", Ints{2, 2}}},
                       "NaN has no finite differences");
  std::vector<double> wide(4 * 10);  // rows wide enough for the vectorised 2x2 kernel, a NaN in one row pair
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = static_cast<double>((i * 5) % 7);
  wide[27] = nan;
  b.addWithoutGradient(OpId::max_pool2d, "NaN in wide 2x2 rows", {CaseBuilder::values(DType::kF32, {1, 1, 4, 10}, wide)},
                       {{"kernel", Ints{2, 2}}}, "NaN has no finite differences");
  b.addWithoutGradient(OpId::max_pool2d, "NaN in padded 3x3 windows",
                       {CaseBuilder::values(DType::kF32, {1, 1, 3, 4}, {1, 2, 3, 4, 5, nan, 7, 8, 9, 10, 11, nan})},
                       {{"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}},
                       "NaN has no finite differences");
  b.addWithoutGradient(OpId::max_pool2d, "NaN in padded 3x3 windows NHWC",
                       {CaseBuilder::values(DType::kF32, {1, 3, 2, 2}, {1, 2, 3, nan, 5, 6, 7, 8, 9, 10, nan, 12})},
                       {{"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}},
                        {"layout", std::string("NHWC")}},
                       "NaN has no finite differences");
  for (const Shape& shape : {Shape{3, 5, 17, 13}, Shape{2, 3, 4, 5}, Shape{1, 2, 1, 1}})
    for (DType dtype : {DType::kF32, DType::kF64}) b.add(OpId::global_avg_pool, shapeStr(shape), {b.uniform(dtype, shape)});

  // resize: nearest, linear and cubic, up and down, each coordinate transform (nearest's finite
  // differences are exact: it copies); cubic also with exclude_outside and another A (the ONNX
  // conformance cases check its weights against onnx's reference).
  using Strings = std::vector<std::string>;
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const std::string dt(dtypeName(dtype));
    const TensorData image = b.uniform(dtype, {2, 3, 4, 5});
    for (const std::string coordinates : Strings{"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"}) {
      b.add(OpId::resize, dt + " linear up " + coordinates, {image},
            {{"sizes", Ints{2, 3, 8, 9}}, {"mode", std::string("linear")}, {"coordinate_transformation_mode", coordinates}});
      b.add(OpId::resize, dt + " linear down " + coordinates, {image},
            {{"sizes", Ints{2, 3, 3, 2}}, {"mode", std::string("linear")}, {"coordinate_transformation_mode", coordinates}});
    }
    for (const std::string coordinates : Strings{"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"}) {
      b.add(OpId::resize, dt + " cubic up " + coordinates, {image},
            {{"sizes", Ints{2, 3, 8, 9}}, {"mode", std::string("cubic")}, {"coordinate_transformation_mode", coordinates}});
      b.add(OpId::resize, dt + " cubic down " + coordinates, {image},
            {{"sizes", Ints{2, 3, 3, 2}}, {"mode", std::string("cubic")}, {"coordinate_transformation_mode", coordinates}});
    }
    b.add(OpId::resize, dt + " cubic up, exclude_outside, A -0.5", {image},
          {{"sizes", Ints{2, 3, 7, 11}}, {"mode", std::string("cubic")}, {"cubic_coeff_a", -0.5},
           {"exclude_outside", int64_t{1}}});
    for (const std::string nearest : Strings{"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"})
      b.add(OpId::resize, dt + " nearest x2 " + nearest, {image},
            {{"sizes", Ints{2, 3, 8, 10}}, {"nearest_mode", nearest}, {"coordinate_transformation_mode", std::string("asymmetric")}});
    b.add(OpId::resize, dt + " nearest with scales, 1-D", {b.uniform(dtype, {2, 3, 7})},
          {{"sizes", Ints{2, 3, 10}}, {"scales", std::vector<double>{1, 1, 1.5}}});
    b.add(OpId::resize, dt + " trilinear", {b.uniform(dtype, {1, 2, 3, 4, 2})},
          {{"sizes", Ints{1, 2, 5, 3, 4}}, {"mode", std::string("linear")}});
    b.add(OpId::resize_grad, dt + " linear", {b.uniform(dtype, {2, 3, 8, 9})},
          {{"input_shape", Ints{2, 3, 4, 5}}, {"mode", std::string("linear")}});
    b.add(OpId::resize_grad, dt + " nearest", {b.uniform(dtype, {2, 3, 8, 10})}, {{"input_shape", Ints{2, 3, 4, 5}}});
    b.add(OpId::resize_grad, dt + " cubic", {b.uniform(dtype, {2, 3, 8, 9})},
          {{"input_shape", Ints{2, 3, 4, 5}}, {"mode", std::string("cubic")}});
  }
  return b.take();
}

}  // namespace cleave::op_harness
