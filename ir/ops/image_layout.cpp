#include "ir/ops/image_layout.h"

#include "ir/op_table.h"

namespace cleave {

bool isChannelsLast(const OpContext& op) {
  return op.def.findAttr("layout") && op.getString("layout") == kChannelsLast;
}

Shape asNchw(const Shape& shape, bool channels_last) {
  if (!channels_last || shape.size() != 4) return shape;
  return {shape[0], shape[3], shape[1], shape[2]};
}

Shape asNhwc(const Shape& nchw) {
  if (nchw.size() != 4) return nchw;
  return {nchw[0], nchw[2], nchw[3], nchw[1]};
}

const std::vector<int64_t>& toChannelsLastPerm() {
  static const std::vector<int64_t> perm = {0, 2, 3, 1};
  return perm;
}

const std::vector<int64_t>& toChannelsFirstPerm() {
  static const std::vector<int64_t> perm = {0, 3, 1, 2};
  return perm;
}

}  // namespace cleave
