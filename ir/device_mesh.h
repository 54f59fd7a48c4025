// DeviceMesh: the devices of a plan as a 3-D grid (pp stages x dp replicas x tp shards) and its rank numbering.
#pragma once

#include <string_view>
#include <vector>

namespace cleave {

// A mesh axis a collective runs over (pipeline stages talk by send/recv, not collectives).
enum class MeshAxis : int8_t { kDp = 0, kTp = 1 };
constexpr int kNumMeshAxes = 2;

// "dp" / "tp": the names communication ops carry in their `axis` attribute.
std::string_view meshAxisName(MeshAxis axis);

// A device's position on the mesh.
struct MeshCoord {
  int stage = 0;
  int dp = 0;
  int tp = 0;
};

// The device grid. Ranks count tp fastest, then dp, then stages: rank = (stage * dp + d) * tp + t.
struct DeviceMesh {
  int dp = 1;
  int tp = 1;
  int pp = 1;

  int size() const { return dp * tp * pp; }
  int axisSize(MeshAxis axis) const { return axis == MeshAxis::kDp ? dp : tp; }
  int rankOf(MeshCoord c) const { return (c.stage * dp + c.dp) * tp + c.tp; }
  MeshCoord coordOf(int rank) const { return MeshCoord{rank / (dp * tp), (rank / tp) % dp, rank % tp}; }
  // This device's index along `axis`.
  static int indexOn(MeshCoord c, MeshAxis axis) { return axis == MeshAxis::kDp ? c.dp : c.tp; }
  // The ranks that share every coordinate of `c` but `axis`, in order along the axis.
  std::vector<int> group(MeshCoord c, MeshAxis axis) const;
};

}  // namespace cleave
