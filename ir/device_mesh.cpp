// DeviceMesh: rank numbering and the groups collectives run over.
#include "ir/device_mesh.h"

namespace cleave {

std::string_view meshAxisName(MeshAxis axis) { return axis == MeshAxis::kDp ? "dp" : "tp"; }

std::vector<int> DeviceMesh::group(MeshCoord c, MeshAxis axis) const {
  std::vector<int> ranks;
  for (int i = 0; i < axisSize(axis); ++i) {
    MeshCoord member = c;
    (axis == MeshAxis::kDp ? member.dp : member.tp) = i;
    ranks.push_back(rankOf(member));
  }
  return ranks;
}

}  // namespace cleave
