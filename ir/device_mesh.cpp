// DeviceMesh: rank numbering (row-major over named axes) and the groups collectives run over.
#include "ir/device_mesh.h"

#include <algorithm>

namespace cleave {

int MeshCoord::operator[](std::string_view axis) const {
  for (const auto& [name, index] : entries_)
    if (name == axis) return index;
  return 0;
}

MeshCoord MeshCoord::with(std::string_view axis, int index) const {
  MeshCoord moved = *this;
  for (auto& [name, value] : moved.entries_)
    if (name == axis) {
      value = index;
      return moved;
    }
  moved.entries_.emplace_back(std::string(axis), index);
  return moved;
}

Expected<DeviceMesh> DeviceMesh::create(std::vector<MeshAxis> axes) {
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i].name.empty()) return Status::badInput("mesh axis " + std::to_string(i) + " has no name");
    if (axes[i].size < 1)
      return Status::badInput("mesh axis '" + axes[i].name + "' has size " + std::to_string(axes[i].size) +
                              "; sizes must be at least 1");
    for (size_t j = 0; j < i; ++j)
      if (axes[j].name == axes[i].name) return Status::badInput("mesh axis '" + axes[i].name + "' is named twice");
  }
  return DeviceMesh(std::move(axes));
}

DeviceMesh DeviceMesh::pipelineDataTensor(int pp, int dp, int tp) {
  return DeviceMesh({{std::string(kPipelineAxis), pp}, {std::string(kDataAxis), dp}, {std::string(kTensorAxis), tp}});
}

int DeviceMesh::size() const {
  int devices = 1;
  for (const MeshAxis& axis : axes_) devices *= axis.size;
  return devices;
}

int DeviceMesh::axisIndex(std::string_view axis) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].name == axis) return static_cast<int>(i);
  return -1;
}

int DeviceMesh::axisSize(std::string_view axis) const {
  const int index = axisIndex(axis);
  return index < 0 ? 1 : axes_[index].size;
}

int DeviceMesh::rankOf(const MeshCoord& coord) const {
  int rank = 0;
  for (const MeshAxis& axis : axes_) rank = rank * axis.size + coord[axis.name];
  return rank;
}

MeshCoord DeviceMesh::coord(int rank) const {
  std::vector<int> index(axes_.size());
  for (size_t i = axes_.size(); i-- > 0;) {
    index[i] = rank % axes_[i].size;
    rank /= axes_[i].size;
  }
  MeshCoord coord;
  for (size_t i = 0; i < axes_.size(); ++i) coord = coord.with(axes_[i].name, index[i]);
  return coord;
}

std::vector<int> DeviceMesh::group(const MeshCoord& coord, std::string_view axis) const {
  std::vector<int> ranks;
  for (int i = 0; i < axisSize(axis); ++i) ranks.push_back(rankOf(coord.with(axis, i)));
  return ranks;
}

std::vector<std::vector<int>> DeviceMesh::groups(std::string_view axis) const {
  std::vector<std::vector<int>> all;
  for (int rank = 0; rank < size(); ++rank) {
    MeshCoord c = coord(rank);
    if (c[axis] == 0) all.push_back(group(c, axis));
  }
  return all;
}

}  // namespace cleave
