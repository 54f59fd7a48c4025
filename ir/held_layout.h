// A parameter held in another layout than the model gives it (Param::model): reshaped, or grouped
// for tensor parallelism. Checkpoints, exports and loads convert through it.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/status.h"
#include "ir/tensor_type.h"

namespace cleave {

// How a held tensor's elements sit in the model's tensor.
//  - `parts` empty: the held tensor is the model's reshaped (same row-major order), as a fused
//    projection's weight [in, 3·out] held as [in, 3, out].
//  - `parts` given: the model's dim `axis` is cut into consecutive parts of these sizes (a fused
//    projection's q, k and v of unequal widths: grouped-query attention), each cut into G equal
//    blocks, and the held tensor is [G] + the model's shape with that dim G times smaller: group g
//    holds block g of every part, part after part. A tp split of dim 0 then gives each rank block
//    g of each part (its heads of q, k and v), where the model's layout would give rank 0 all of q.
// `shape` empty: the tensor is held as the model has it.
struct HeldLayout {
  Shape shape;  // the model's shape
  std::vector<int64_t> parts;
  int64_t axis = 0;

  bool grouped() const { return !parts.empty(); }
};

// The held shape of `layout` in G groups; an error when a part does not divide into G blocks or
// the parts do not add up to the model's dim.
Expected<Shape> groupedShape(const HeldLayout& layout, int64_t groups);

// Checks that `held` is a shape `layout` can hold the model's tensor in: any shape of as many
// elements when it is a reshape, groupedShape(held[0]) when grouped.
Status checkHeldShape(const HeldLayout& layout, const Shape& held);

// Copies a whole held tensor (shape `held`) into the model's order, and back.
void heldToModelOrder(const HeldLayout& layout, const Shape& held, const uint8_t* from, uint8_t* to,
                      int64_t element_bytes);
void modelToHeldOrder(const HeldLayout& layout, const Shape& held, const uint8_t* from, uint8_t* to,
                      int64_t element_bytes);
// The same on a whole tensor's bytes, which come back as they are unless the layout is grouped.
std::vector<uint8_t> heldToModelOrder(const HeldLayout& layout, const Shape& held, std::vector<uint8_t> bytes,
                                      int64_t element_bytes);
std::vector<uint8_t> modelToHeldOrder(const HeldLayout& layout, const Shape& held, std::vector<uint8_t> bytes,
                                      int64_t element_bytes);

}  // namespace cleave
