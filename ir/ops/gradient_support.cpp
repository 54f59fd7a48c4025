// Building blocks the op families' gradient rules share (see gradient_support.h).
#include "ir/ops/gradient_support.h"

namespace cleave::ops {

OpContext forwardAttrs(const GradientContext& g) { return OpContext{opDef(g.node.op), {}, {}, g.node.attrs}; }

AttrMap copyAttrs(const GradientContext& g, std::initializer_list<const char*> names) {
  AttrMap copied;
  for (const char* name : names) {
    auto it = g.node.attrs.find(name);
    if (it != g.node.attrs.end()) copied.emplace(name, it->second);
  }
  return copied;
}

ValueId zeros(GradientContext& g, TensorType type) {
  return g.emit(OpId::expand, {g.scalar(0.0, type.dtype)}, {{"shape", type.shape}});
}

ValueId reshapeTo(GradientContext& g, ValueId v, const Shape& shape) {
  if (v == kNoValue || shapeOf(g, v) == shape) return v;
  return g.emit(OpId::reshape, {v}, {{"shape", shape}});
}

}  // namespace cleave::ops
