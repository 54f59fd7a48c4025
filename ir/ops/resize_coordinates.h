// Where resize reads: the one coordinate rule of ONNX Resize (nearest and linear), shared by the reference, CPU and CUDA kernels.
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

// The two input positions an output position reads along one dim and the weight of the second:
// value = (1 - weight) · in[low] + weight · in[high]. Nearest mode reads one (low = high, weight 0).
struct ResizeTap {
  int64_t low = 0, high = 0;
  double weight = 0;
};

// Output position `out` of a dim resized from `in_size` to `out_size` with scale `scale` (the given
// scale, or out_size / in_size; with a given scale, out_size is in_size · scale unrounded, as ONNX's
// align_corners and pytorch_half_pixel take it): ONNX's coordinate transform, then nearest rounding or the two linear
// neighbours, clamped to the input (linear reads the edge beyond it, as ONNX and PyTorch do).
CLEAVE_HOST_DEVICE inline ResizeTap resizeTap(int64_t out, int64_t in_size, int64_t out_count, double out_size,
                                                     double scale, ResizeCoordinates coordinates, bool linear,
                                                     ResizeNearest nearest) {
  double x = 0;
  switch (coordinates) {
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
  ResizeTap tap;
  if (!linear) {
    double r = 0;
    switch (nearest) {
      case ResizeNearest::kRoundPreferFloor: r = x == std::floor(x) + 0.5 ? std::floor(x) : std::round(x); break;
      case ResizeNearest::kRoundPreferCeil: r = x == std::floor(x) + 0.5 ? std::ceil(x) : std::round(x); break;
      case ResizeNearest::kFloor: r = std::floor(x); break;
      case ResizeNearest::kCeil: r = std::ceil(x); break;
    }
    int64_t i = static_cast<int64_t>(r);
    i = i < 0 ? 0 : i >= in_size ? in_size - 1 : i;
    tap.low = tap.high = i;
    return tap;
  }
  const double last = static_cast<double>(in_size - 1);
  x = x < 0 ? 0 : x > last ? last : x;
  tap.low = static_cast<int64_t>(std::floor(x));
  tap.high = tap.low + 1 < in_size ? tap.low + 1 : tap.low;
  tap.weight = x - static_cast<double>(tap.low);
  return tap;
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
inline ResizeNearest resizeNearestFrom(std::string_view mode) {
  if (mode == "round_prefer_ceil") return ResizeNearest::kRoundPreferCeil;
  if (mode == "floor") return ResizeNearest::kFloor;
  if (mode == "ceil") return ResizeNearest::kCeil;
  return ResizeNearest::kRoundPreferFloor;
}

// A resize of `rank` dims (at most kMaxResizeDims), as kernels take it: each dim's input and output
// size and scale, the modes, and which dims interpolate (their taps can differ).
inline constexpr int kMaxResizeDims = 8;
struct ResizeGeometry {
  int rank = 0;
  int64_t in[kMaxResizeDims] = {}, out[kMaxResizeDims] = {};
  double scale[kMaxResizeDims] = {};
  double out_length[kMaxResizeDims] = {};  // out, or in · scale when a scale is given
  bool linear = false;
  ResizeCoordinates coordinates = ResizeCoordinates::kHalfPixel;
  ResizeNearest nearest = ResizeNearest::kRoundPreferFloor;
};

struct OpContext;
// The geometry of a resize (or resize_grad) node from its attributes, input and output shapes.
ResizeGeometry resizeGeometry(const OpContext& op, const Shape& in, const Shape& out);

// Calls visit(input_offset, weight) for every input element output element `index` reads (2 per
// linear dim whose neighbours differ, 1 otherwise).
template <class Visit>
CLEAVE_HOST_DEVICE inline void forEachResizeSource(const ResizeGeometry& g, int64_t index, Visit visit) {
  ResizeTap taps[kMaxResizeDims];
  int64_t rest = index;
  for (int d = g.rank - 1; d >= 0; --d) {
    const int64_t coordinate = rest % g.out[d];
    rest /= g.out[d];
    taps[d] = resizeTap(coordinate, g.in[d], g.out[d], g.out_length[d], g.scale[d], g.coordinates, g.linear, g.nearest);
  }
  int varying[kMaxResizeDims];
  int count = 0;
  for (int d = 0; d < g.rank; ++d)
    if (taps[d].high != taps[d].low) varying[count++] = d;
  for (int corner = 0; corner < (1 << count); ++corner) {
    double weight = 1;
    int64_t offset = 0;
    for (int d = 0, v = 0; d < g.rank; ++d) {
      int64_t position = taps[d].low;
      if (v < count && varying[v] == d) {
        const bool high = (corner >> v) & 1;
        position = high ? taps[d].high : taps[d].low;
        weight *= high ? taps[d].weight : 1 - taps[d].weight;
        ++v;
      }
      offset = offset * g.in[d] + position;
    }
    visit(offset, weight);
  }
}

}  // namespace cleave
