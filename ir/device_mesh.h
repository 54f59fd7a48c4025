// DeviceMesh: the devices of a plan as a grid of named axes (as JAX's Mesh, Shardy's sdy.mesh) and its rank numbering.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/status.h"

namespace cleave {

// The well-known axis names: pipeline stages (the outermost axis; stages talk by send/recv, not
// collectives), data-parallel replicas and tensor-parallel shards. Communication ops name the
// axis they run over in their `axis` attribute.
inline constexpr std::string_view kPipelineAxis = "pp";
inline constexpr std::string_view kDataAxis = "dp";
inline constexpr std::string_view kTensorAxis = "tp";

// One axis of a mesh: its name and how many devices lie along it.
struct MeshAxis {
  std::string name;
  int size = 1;
  bool operator==(const MeshAxis&) const = default;
};

// A device's position on a mesh: its index along each named axis (0 along any axis it does not name).
class MeshCoord {
 public:
  MeshCoord() = default;  // index 0 along every axis

  // The index along `axis` (0 when the coordinate does not name it).
  int operator[](std::string_view axis) const;
  // This coordinate with the index along `axis` set to `index`.
  MeshCoord with(std::string_view axis, int index) const;
  // The index along the pipeline axis.
  int stage() const { return (*this)[kPipelineAxis]; }
  // The (axis name, index) entries, in the order they were set.
  const std::vector<std::pair<std::string, int>>& entries() const { return entries_; }
  bool operator==(const MeshCoord&) const = default;

 private:
  std::vector<std::pair<std::string, int>> entries_;
};

// The device grid: an ordered list of named axes. Ranks are numbered row-major, the last axis
// fastest. A mesh without some axis behaves as one where that axis has size 1 (one group, index 0).
class DeviceMesh {
 public:
  DeviceMesh() = default;  // one device, no axes

  // A mesh of the given axes; names must be non-empty and distinct, sizes at least 1.
  static Expected<DeviceMesh> create(std::vector<MeshAxis> axes);
  // The pipeline x data x tensor mesh: axes (pp, dp, tp), so rank = (stage * dp + d) * tp + t.
  // Degrees must be at least 1.
  static DeviceMesh pipelineDataTensor(int pp, int dp, int tp);

  const std::vector<MeshAxis>& axes() const { return axes_; }
  int numAxes() const { return static_cast<int>(axes_.size()); }
  // The number of devices: the product of the axis sizes.
  int size() const;
  // The position of `axis` in axes(), or -1 when the mesh has no such axis.
  int axisIndex(std::string_view axis) const;
  // The size of `axis` (1 when the mesh has no such axis).
  int axisSize(std::string_view axis) const;
  // The degrees along the well-known axes.
  int pp() const { return axisSize(kPipelineAxis); }
  int dp() const { return axisSize(kDataAxis); }
  int tp() const { return axisSize(kTensorAxis); }

  // The rank at `coord` (its indices must lie within the axes' sizes; axes it does not name count as 0).
  int rankOf(const MeshCoord& coord) const;
  // The coordinate of `rank` (0 <= rank < size()), naming every axis of the mesh.
  MeshCoord coord(int rank) const;
  // The ranks that share every coordinate of `coord` but `axis`, in order along the axis (just
  // `coord`'s rank when the mesh has no such axis).
  std::vector<int> group(const MeshCoord& coord, std::string_view axis) const;
  // Every group of `axis`, ordered by their first rank.
  std::vector<std::vector<int>> groups(std::string_view axis) const;

 private:
  explicit DeviceMesh(std::vector<MeshAxis> axes) : axes_(std::move(axes)) {}

  std::vector<MeshAxis> axes_;
};

}  // namespace cleave
