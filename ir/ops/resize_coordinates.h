// Where resize reads: the one coordinate rule of ONNX Resize (nearest, linear and cubic), shared by the reference, CPU and CUDA kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "ir/ops/host_device.h"
#include "ir/tensor_type.h"

namespace cleave {

// coordinate_transformation_mode and nearest_mode as numbers (the attributes' strings map to them once).
enum class ResizeCoordinates : int {
  kHalfPixel,
  kPytorchHalfPixel,
  kAlignCorners,
  kAsymmetric,
  kTfHalfPixelForNn,
  kHalfPixelSymmetric
};
enum class ResizeNearest : int { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil };

enum class ResizeMode : int { kNearest, kLinear, kCubic };

// The input positions an output position reads along one dim and their weights: value =
// sum of weight[t] · in[index[t]]. Nearest reads one, linear two (one at an edge), cubic four
// (one where the position falls on an input).
struct ResizeTaps {
  int count = 0;
  int64_t index[4] = {};
  double weight[4] = {};
};

// How a resize samples along one dim: the interpolation, the coordinate transform, nearest's
// rounding, and cubic's coefficient A and exclude_outside.
struct ResizeSampling {
  ResizeMode mode = ResizeMode::kNearest;
  ResizeCoordinates coordinates = ResizeCoordinates::kHalfPixel;
  ResizeNearest nearest = ResizeNearest::kRoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
};

// Output position `out` of a dim resized from `in_size` to `out_size` with scale `scale` (the given
// scale, or out_size / in_size; with a given scale, out_size is in_size · scale unrounded, as ONNX's
// align_corners and pytorch_half_pixel take it): ONNX's coordinate transform, then nearest rounding,
// the two linear neighbours or the four cubic ones, read at the input's edge beyond it (as ONNX and
// PyTorch do; cubic's exclude_outside instead drops them and renormalises the other weights).
CLEAVE_HOST_DEVICE inline ResizeTaps resizeTaps(int64_t out, int64_t in_size, int64_t out_count, double out_size,
                                                double scale, const ResizeSampling& s) {
  double x = 0;
  switch (s.coordinates) {
    case ResizeCoordinates::kHalfPixel: x = (static_cast<double>(out) + 0.5) / scale - 0.5; break;
    case ResizeCoordinates::kPytorchHalfPixel: x = out_size > 1 ? (static_cast<double>(out) + 0.5) / scale - 0.5 : 0; break;
    case ResizeCoordinates::kAlignCorners:
      x = out_size > 1 ? static_cast<double>(out) * static_cast<double>(in_size - 1) / (out_size - 1) : 0;
      break;
    case ResizeCoordinates::kAsymmetric: x = static_cast<double>(out) / scale; break;
    case ResizeCoordinates::kTfHalfPixelForNn: x = (static_cast<double>(out) + 0.5) / scale; break;
    case ResizeCoordinates::kHalfPixelSymmetric: {
      const double adjustment = static_cast<double>(out_count) / out_size;
      const double center = static_cast<double>(in_size) / 2;
      x = center * (1 - adjustment) + (static_cast<double>(out) + 0.5) / scale - 0.5;
      break;
    }
  }
  const auto clamped = [in_size](int64_t i) { return i < 0 ? int64_t{0} : i >= in_size ? in_size - 1 : i; };
  ResizeTaps taps;
  taps.count = 1;
  taps.weight[0] = 1;
  if (s.mode == ResizeMode::kNearest) {
    double r = 0;
    switch (s.nearest) {
      case ResizeNearest::kRoundPreferFloor: r = x == std::floor(x) + 0.5 ? std::floor(x) : std::round(x); break;
      case ResizeNearest::kRoundPreferCeil: r = x == std::floor(x) + 0.5 ? std::ceil(x) : std::round(x); break;
      case ResizeNearest::kFloor: r = std::floor(x); break;
      case ResizeNearest::kCeil: r = std::ceil(x); break;
    }
    taps.index[0] = clamped(static_cast<int64_t>(r));
    return taps;
  }
  if (s.mode == ResizeMode::kLinear) {
    const double last = static_cast<double>(in_size - 1);
    x = x < 0 ? 0 : x > last ? last : x;
    const int64_t low = static_cast<int64_t>(std::floor(x));
    taps.index[0] = low;
    if (low + 1 < in_size) {
      const double weight = x - static_cast<double>(low);
      taps.count = 2;
      taps.index[1] = low + 1;
      taps.weight[0] = 1 - weight;
      taps.weight[1] = weight;
    }
    return taps;
  }
  // Cubic: the four inputs around x, from the one left of x (at an input, x itself has weight 1).
  const double floor_x = std::floor(x);
  if (x == floor_x && x >= 0 && x < static_cast<double>(in_size)) {
    taps.index[0] = static_cast<int64_t>(x);
    return taps;
  }
  const int64_t left = static_cast<int64_t>(x == floor_x ? floor_x - 1 : floor_x);
  const double t = x == floor_x ? 1.0 : x - floor_x, u = 1 - t, a = s.cubic_a;
  // Keys' cubic convolution kernel at distances 1 + t, t, 1 - t and 2 - t.
  const double weights[4] = {((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
                             ((a + 2) * t - (a + 3)) * t * t + 1, ((a + 2) * u - (a + 3)) * u * u + 1,
                             ((a * (u + 1) - 5 * a) * (u + 1) + 8 * a) * (u + 1) - 4 * a};
  double total = 0;
  taps.count = 4;
  for (int k = 0; k < 4; ++k) {
    const int64_t i = left - 1 + k;
    const bool outside = i < 0 || i >= in_size;
    taps.index[k] = clamped(i);
    taps.weight[k] = s.exclude_outside && outside ? 0.0 : weights[k];
    total += taps.weight[k];
  }
  if (s.exclude_outside)
    for (int k = 0; k < 4; ++k) taps.weight[k] /= total;
  return taps;
}

// The attributes' strings as the enums above (an unknown string gives the first; shape rules reject it before).
inline ResizeCoordinates resizeCoordinatesFrom(std::string_view mode) {
  if (mode == "pytorch_half_pixel") return ResizeCoordinates::kPytorchHalfPixel;
  if (mode == "align_corners") return ResizeCoordinates::kAlignCorners;
  if (mode == "asymmetric") return ResizeCoordinates::kAsymmetric;
  if (mode == "tf_half_pixel_for_nn") return ResizeCoordinates::kTfHalfPixelForNn;
  if (mode == "half_pixel_symmetric") return ResizeCoordinates::kHalfPixelSymmetric;
  return ResizeCoordinates::kHalfPixel;
}
inline ResizeMode resizeModeFrom(std::string_view mode) {
  if (mode == "linear") return ResizeMode::kLinear;
  if (mode == "cubic") return ResizeMode::kCubic;
  return ResizeMode::kNearest;
}
inline ResizeNearest resizeNearestFrom(std::string_view mode) {
  if (mode == "round_prefer_ceil") return ResizeNearest::kRoundPreferCeil;
  if (mode == "floor") return ResizeNearest::kFloor;
  if (mode == "ceil") return ResizeNearest::kCeil;
  return ResizeNearest::kRoundPreferFloor;
}

// A resize of `rank` dims (at most kMaxResizeDims), as kernels take it: each dim's input and output
// size and scale, and how it samples.
inline constexpr int kMaxResizeDims = 8;
struct ResizeGeometry {
  int rank = 0;
  int64_t in[kMaxResizeDims] = {}, out[kMaxResizeDims] = {};
  double scale[kMaxResizeDims] = {};
  double out_length[kMaxResizeDims] = {};  // out, or in · scale when a scale is given
  ResizeSampling sampling;
};

struct OpContext;
// The geometry of a resize (or resize_grad) node from its attributes, input and output shapes.
ResizeGeometry resizeGeometry(const OpContext& op, const Shape& in, const Shape& out);

// Calls visit(input_offset, weight) for every input element output element `index` reads (the
// product of its dims' taps, the first dim with several taps varying fastest).
template <class Visit>
CLEAVE_HOST_DEVICE inline void forEachResizeSource(const ResizeGeometry& g, int64_t index, Visit visit) {
  ResizeTaps taps[kMaxResizeDims];
  int64_t rest = index;
  for (int d = g.rank - 1; d >= 0; --d) {
    const int64_t coordinate = rest % g.out[d];
    rest /= g.out[d];
    taps[d] = resizeTaps(coordinate, g.in[d], g.out[d], g.out_length[d], g.scale[d], g.sampling);
  }
  int varying[kMaxResizeDims];
  int count = 0;
  for (int d = 0; d < g.rank; ++d)
    if (taps[d].count > 1) varying[count++] = d;
  int chosen[kMaxResizeDims] = {};  // per varying dim, its tap
  for (;;) {
    double weight = 1;
    int64_t offset = 0;
    for (int d = 0, v = 0; d < g.rank; ++d) {
      int tap = 0;
      if (v < count && varying[v] == d) {
        tap = chosen[v++];
        weight *= taps[d].weight[tap];
      }
      offset = offset * g.in[d] + taps[d].index[tap];
    }
    visit(offset, weight);
    int v = 0;
    while (v < count && ++chosen[v] == taps[varying[v]].count) chosen[v++] = 0;
    if (v == count) return;
  }
}

}  // namespace cleave
