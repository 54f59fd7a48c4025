// TensorType: a dtype and a static shape, e.g. f32[128,784]; f32[] is a scalar.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace cleave {

using Shape = std::vector<int64_t>;

// The type of a value: element type and static shape.
struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  // Number of elements (1 for a scalar).
  int64_t numel() const;
  // Size in bytes.
  int64_t bytes() const { return numel() * dtypeSize(dtype); }
  // Text form, e.g. "f32[128,784]".
  std::string str() const;
  bool operator==(const TensorType&) const = default;
};

// Text form of a shape, e.g. "[128,784]".
std::string shapeStr(const Shape& shape);
// Numpy-style broadcast of two shapes; false when they do not broadcast.
bool broadcastShapes(const Shape& a, const Shape& b, Shape& out);
// Normalises a possibly negative axis against `rank`; -1 when out of range.
int64_t normalizeAxis(int64_t axis, int64_t rank);

}  // namespace cleave
