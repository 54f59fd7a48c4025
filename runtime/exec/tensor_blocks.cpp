// Blocks of row-major tensors: copying a box of one tensor into a box of another (shards, gathers).
#include "runtime/exec/tensor_blocks.h"

#include <cstring>

namespace cleave::runtime {

bool boxInside(const Shape& shape, const Shape& start, const Shape& extent) {
  if (start.size() != shape.size() || extent.size() != shape.size()) return false;
  for (size_t d = 0; d < shape.size(); ++d)
    if (start[d] < 0 || extent[d] < 0 || start[d] > shape[d] - extent[d]) return false;
  return true;
}

void copyBox(const void* source, const Shape& source_shape, const Shape& source_start, void* target,
             const Shape& target_shape, const Shape& target_start, const Shape& extent, int64_t element_bytes) {
  const auto* from = static_cast<const uint8_t*>(source);
  auto* to = static_cast<uint8_t*>(target);
  forEachBoxRun(source_shape, source_start, target_shape, target_start, extent,
                [&](int64_t source_element, int64_t target_element, int64_t count) {
                  std::memcpy(to + target_element * element_bytes, from + source_element * element_bytes,
                              static_cast<size_t>(count * element_bytes));
                });
}

}  // namespace cleave::runtime
