// Node attributes: names of kinds and structural equality.
#include "ir/attribute.h"

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

}  // namespace cleave
