// Held layouts of parameters and the copies between them and the model's (held_layout.h).
#include "ir/held_layout.h"

#include <cstring>
#include <numeric>
#include <string>

namespace cleave {
namespace {

int64_t product(const Shape& shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t d = begin; d < end; ++d) n *= shape[d];
  return n;
}

// Walks the grouped layout: for each (group, outer index, held column) the model's column; calls
// copy(held element offset, model element offset, inner elements).
template <typename Copy>
void forEachRun(const HeldLayout& layout, const Shape& held, Copy copy) {
  const size_t axis = static_cast<size_t>(layout.axis);
  const int64_t groups = held[0];
  const int64_t outer = product(layout.shape, 0, axis);
  const int64_t width = layout.shape[axis];
  const int64_t inner = product(layout.shape, axis + 1, layout.shape.size());
  const int64_t held_width = width / groups;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t o = 0; o < outer; ++o) {
      int64_t model_start = 0, held_start = 0;
      for (int64_t part : layout.parts) {
        const int64_t block = part / groups;
        const int64_t held_at = ((g * outer + o) * held_width + held_start) * inner;
        const int64_t model_at = (o * width + model_start + g * block) * inner;
        copy(held_at, model_at, block * inner);
        model_start += part;
        held_start += block;
      }
    }
}

}  // namespace

Expected<Shape> groupedShape(const HeldLayout& layout, int64_t groups) {
  if (layout.axis < 0 || layout.axis >= static_cast<int64_t>(layout.shape.size()))
    return Status::badInput("the parts' axis " + std::to_string(layout.axis) + " is not a dim of the model's shape " +
                            shapeStr(layout.shape));
  if (groups < 1) return Status::badInput("a grouped layout needs at least 1 group");
  int64_t total = 0;
  for (int64_t part : layout.parts) {
    if (part <= 0 || part % groups != 0)
      return Status::badInput("part " + std::to_string(part) + " of " + shapeStr(layout.shape) +
                              " does not divide into " + std::to_string(groups) + " groups");
    total += part;
  }
  if (total != layout.shape[static_cast<size_t>(layout.axis)])
    return Status::badInput("the parts " + shapeStr(Shape(layout.parts.begin(), layout.parts.end())) + " add up to " +
                            std::to_string(total) + ", not dim " + std::to_string(layout.axis) + " of " +
                            shapeStr(layout.shape));
  Shape held = layout.shape;
  held[static_cast<size_t>(layout.axis)] /= groups;
  held.insert(held.begin(), groups);
  return held;
}

Status checkHeldShape(const HeldLayout& layout, const Shape& held) {
  if (!layout.grouped()) {
    if (TensorType{DType::kF32, layout.shape}.numel() != TensorType{DType::kF32, held}.numel())
      return Status::badInput("the model shape " + shapeStr(layout.shape) + " holds another number of elements than " +
                              shapeStr(held));
    return Status::ok();
  }
  if (held.empty()) return Status::badInput("a grouped layout holds the groups in dim 0, and " + shapeStr(held) + " has none");
  CLEAVE_ASSIGN_OR_RETURN(Shape expected, groupedShape(layout, held[0]));
  if (expected != held)
    return Status::badInput("the model shape " + shapeStr(layout.shape) + " in " + std::to_string(held[0]) +
                            " groups is held as " + shapeStr(expected) + ", not " + shapeStr(held));
  return Status::ok();
}

namespace {

// The copy between the two orders: into the model's (to_model) or into the held one.
void copyOrder(const HeldLayout& layout, const Shape& held, const uint8_t* from, uint8_t* to, int64_t element_bytes,
               bool to_model) {
  if (!layout.grouped()) {
    std::memcpy(to, from, static_cast<size_t>(TensorType{DType::kF32, held}.numel() * element_bytes));
    return;
  }
  forEachRun(layout, held, [&](int64_t held_at, int64_t model_at, int64_t count) {
    const int64_t source = to_model ? held_at : model_at, target = to_model ? model_at : held_at;
    std::memcpy(to + target * element_bytes, from + source * element_bytes, static_cast<size_t>(count * element_bytes));
  });
}

}  // namespace

void heldToModelOrder(const HeldLayout& layout, const Shape& held, const uint8_t* from, uint8_t* to,
                      int64_t element_bytes) {
  copyOrder(layout, held, from, to, element_bytes, /*to_model=*/true);
}

void modelToHeldOrder(const HeldLayout& layout, const Shape& held, const uint8_t* from, uint8_t* to,
                      int64_t element_bytes) {
  copyOrder(layout, held, from, to, element_bytes, /*to_model=*/false);
}

std::vector<uint8_t> heldToModelOrder(const HeldLayout& layout, const Shape& held, std::vector<uint8_t> bytes,
                                      int64_t element_bytes) {
  if (!layout.grouped()) return bytes;
  std::vector<uint8_t> model(bytes.size());
  copyOrder(layout, held, bytes.data(), model.data(), element_bytes, /*to_model=*/true);
  return model;
}

std::vector<uint8_t> modelToHeldOrder(const HeldLayout& layout, const Shape& held, std::vector<uint8_t> bytes,
                                      int64_t element_bytes) {
  if (!layout.grouped()) return bytes;
  std::vector<uint8_t> ordered(bytes.size());
  copyOrder(layout, held, bytes.data(), ordered.data(), element_bytes, /*to_model=*/false);
  return ordered;
}

}  // namespace cleave
