// Small helpers the op family files share to write their reference computations (OpDef::reference):
// tensors as vectors of doubles, row-major index arithmetic, and the dtypes a reference reads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "ir/attribute.h"
#include "ir/op_table.h"

namespace cleave::ops {

// The elements of `tensor` as doubles (f32, f64, i64, i32, bool).
std::vector<double> referenceValues(const TensorData& tensor);
// A tensor of `type` holding `values` converted to its dtype (integers truncate toward zero and wrap).
TensorData referenceTensor(const TensorType& type, const std::vector<double>& values);
// Whether every operand and result of `ctx` is f32, f64, i64, i32 or bool (what referenceValues reads).
bool referenceReadsAllDTypes(const OpContext& ctx);
// The row-major multi-index of element `flat` of `shape`.
std::vector<int64_t> unravelIndex(int64_t flat, const Shape& shape);
// The flat offset in `operand` (numpy-broadcast against a result of rank index.size()) of the result
// element at `index`.
int64_t broadcastOffsetOf(const std::vector<int64_t>& index, const Shape& operand);

// The rows × axis × inner decomposition of `shape` around `axis` (for per-axis ops such as softmax).
struct AxisSplit {
  int64_t outer = 1, length = 1, inner = 1;
};
// `shape` split around the normalised `axis`.
AxisSplit splitAroundAxis(const Shape& shape, int64_t axis);

// Calls tap(y, x, w) for every multiply-add of conv2d (NCHW x, OIHW w, result y of shape `y_shape`),
// with the flat offsets of the output, input and weight elements; padded taps are skipped.
template <class Tap>
void forEachConvTap(const Shape& x_shape, const Shape& w_shape, const Shape& y_shape, const OpContext& ctx, Tap&& tap) {
  const std::vector<int64_t>& strides = ctx.getInts("strides");
  const std::vector<int64_t>& pads = ctx.getInts("pads");
  const std::vector<int64_t>& dilations = ctx.getInts("dilations");
  const int64_t groups = ctx.getInt("groups");
  const int64_t channels = x_shape[1], height = x_shape[2], width = x_shape[3];
  const int64_t cg = channels / groups, og = w_shape[0] / groups, kh = w_shape[2], kw = w_shape[3];
  const int64_t count = y_shape[0] * y_shape[1] * y_shape[2] * y_shape[3];
  for (int64_t y = 0; y < count; ++y) {
    const std::vector<int64_t> idx = unravelIndex(y, y_shape);  // n, o, oh, ow
    const int64_t g = idx[1] / og;
    for (int64_t ci = 0; ci < cg; ++ci)
      for (int64_t ki = 0; ki < kh; ++ki)
        for (int64_t kj = 0; kj < kw; ++kj) {
          const int64_t ih = idx[2] * strides[0] - pads[0] + ki * dilations[0];
          const int64_t iw = idx[3] * strides[1] - pads[1] + kj * dilations[1];
          if (ih < 0 || ih >= height || iw < 0 || iw >= width) continue;
          tap(y, ((idx[0] * channels + g * cg + ci) * height + ih) * width + iw, ((idx[1] * cg + ci) * kh + ki) * kw + kj);
        }
  }
}

// One pooling window of an NCHW input, as PyTorch defines it: [h_first, h_last) × [w_first, w_last)
// inside the image, and `padded_count` elements inside the padded image (count_include_pad's divisor).
struct PoolWindow {
  int64_t plane = 0;  // offset of the window's N·C plane in the input
  int64_t h_first = 0, h_last = 0, w_first = 0, w_last = 0;
  int64_t padded_count = 0;
  int64_t width = 0;  // input width, for offsets plane + ih·width + iw
};

// Calls window(y, PoolWindow) for every output element y of a pool (attributes kernel, strides, pads).
template <class Visit>
void forEachPoolWindow(const Shape& x_shape, const Shape& y_shape, const OpContext& ctx, Visit&& window) {
  const std::vector<int64_t>& kernel = ctx.getInts("kernel");
  const std::vector<int64_t>& strides = ctx.getInts("strides").empty() ? kernel : ctx.getInts("strides");
  const std::vector<int64_t>& pads = ctx.getInts("pads");
  const int64_t h = x_shape[2], w = x_shape[3];
  const int64_t count = y_shape[0] * y_shape[1] * y_shape[2] * y_shape[3];
  for (int64_t y = 0; y < count; ++y) {
    const std::vector<int64_t> idx = unravelIndex(y, y_shape);
    const int64_t h0 = idx[2] * strides[0] - pads[0], w0 = idx[3] * strides[1] - pads[1];
    const int64_t h1 = std::min(h0 + kernel[0], h + pads[2]), w1 = std::min(w0 + kernel[1], w + pads[3]);
    PoolWindow p;
    p.plane = (idx[0] * x_shape[1] + idx[1]) * h * w;
    p.h_first = std::max<int64_t>(h0, 0);
    p.h_last = std::min(h1, h);
    p.w_first = std::max<int64_t>(w0, 0);
    p.w_last = std::min(w1, w);
    p.padded_count = (h1 - h0) * (w1 - w0);
    p.width = w;
    window(y, p);
  }
}

// The input offset of a window's maximum: the first strict maximum, or the last NaN (PyTorch's
// rule); -1 for an empty window.
int64_t poolWindowArgmax(const std::vector<double>& x, const PoolWindow& p);

}  // namespace cleave::ops
