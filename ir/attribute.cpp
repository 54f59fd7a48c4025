// Node attributes: names of kinds and structural equality.
#include "ir/attribute.h"

#include <cstring>

namespace cleave {

const char* attrKindName(AttrKind kind) {
  switch (kind) {
    case AttrKind::kInt: return "int";
    case AttrKind::kFloat: return "float";
    case AttrKind::kString: return "string";
    case AttrKind::kInts: return "ints";
    case AttrKind::kFloats: return "floats";
    case AttrKind::kTensor: return "tensor";
  }
  return "?";
}

bool attrEquals(const Attribute& a, const Attribute& b) {
  if (a.index() != b.index()) return false;
  if (attrKind(a) == AttrKind::kTensor) {
    const auto& ta = std::get<std::shared_ptr<const TensorData>>(a);
    const auto& tb = std::get<std::shared_ptr<const TensorData>>(b);
    return ta == tb || (ta && tb && *ta == *tb);
  }
  return a == b;
}

TensorData dataBlock(const TensorData& whole, const Shape& start, const Shape& size) {
  TensorData block{TensorType{whole.type.dtype, size}, {}};
  block.bytes.resize(static_cast<size_t>(block.type.bytes()));
  const Shape& shape = whole.type.shape;
  const size_t rank = shape.size(), element = static_cast<size_t>(dtypeSize(whole.type.dtype));
  if (rank == 0 || block.bytes.empty()) return block;
  // Copy one innermost row at a time; `index` walks the block's outer dims.
  const size_t row_bytes = static_cast<size_t>(size.back()) * element;
  Shape index(rank, 0);
  for (size_t copied = 0; copied < block.bytes.size(); copied += row_bytes) {
    int64_t source = 0;
    for (size_t d = 0; d < rank; ++d) source = source * shape[d] + start[d] + index[d];
    std::memcpy(block.bytes.data() + copied, whole.bytes.data() + static_cast<size_t>(source) * element, row_bytes);
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < size[d]) break;
      index[d] = 0;
    }
  }
  return block;
}

}  // namespace cleave
