// Unit tests of DeviceMesh: named axes of any number, row-major rank numbering, coordinates and
// the groups collectives run over; the partitioner on meshes with axes beyond dp and tp.
#include "ir/device_mesh.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "frontend/model_generators.h"
#include "ir/text_format.h"
#include "passes/partition/spmd_partitioner.h"

namespace cleave {
namespace {

using Groups = std::vector<std::vector<int>>;

DeviceMesh meshOf(std::vector<MeshAxis> axes) {
  auto mesh = DeviceMesh::create(std::move(axes));
  EXPECT_TRUE(mesh.hasValue()) << mesh.status().message();
  return *mesh;
}

TEST(DeviceMesh, PipelineDataTensorKeepsTheRankNumbering) {
  for (int pp : {1, 2, 3})
    for (int dp : {1, 2, 4})
      for (int tp : {1, 2, 3}) {
        const DeviceMesh mesh = DeviceMesh::pipelineDataTensor(pp, dp, tp);
        ASSERT_EQ(mesh.size(), pp * dp * tp);
        EXPECT_EQ(mesh.pp(), pp);
        EXPECT_EQ(mesh.dp(), dp);
        EXPECT_EQ(mesh.tp(), tp);
        for (int s = 0; s < pp; ++s)
          for (int d = 0; d < dp; ++d)
            for (int t = 0; t < tp; ++t) {
              const int rank = (s * dp + d) * tp + t;
              const MeshCoord c = mesh.coord(rank);
              EXPECT_EQ(c.stage(), s);
              EXPECT_EQ(c[kDataAxis], d);
              EXPECT_EQ(c[kTensorAxis], t);
              EXPECT_EQ(mesh.rankOf(c), rank);
              EXPECT_EQ(mesh.rankOf(MeshCoord().with(kPipelineAxis, s).with(kDataAxis, d).with(kTensorAxis, t)), rank);
              std::vector<int> dp_group, tp_group;
              for (int i = 0; i < dp; ++i) dp_group.push_back((s * dp + i) * tp + t);
              for (int i = 0; i < tp; ++i) tp_group.push_back((s * dp + d) * tp + i);
              EXPECT_EQ(mesh.group(c, kDataAxis), dp_group);
              EXPECT_EQ(mesh.group(c, kTensorAxis), tp_group);
            }
      }
}

TEST(DeviceMesh, ThreeAxesNumberRowMajorWithTheLastFastest) {
  const DeviceMesh mesh = meshOf({{"dp", 2}, {"sp", 3}, {"tp", 2}});
  ASSERT_EQ(mesh.size(), 12);
  EXPECT_EQ(mesh.numAxes(), 3);
  EXPECT_EQ(mesh.axisIndex("sp"), 1);
  EXPECT_EQ(mesh.axisSize("sp"), 3);
  EXPECT_EQ(mesh.pp(), 1);  // no pipeline axis: one stage

  // rank = (d * 3 + s) * 2 + t
  const MeshCoord c = mesh.coord(11);
  EXPECT_EQ(c[kDataAxis], 1);
  EXPECT_EQ(c["sp"], 2);
  EXPECT_EQ(c[kTensorAxis], 1);
  EXPECT_EQ(c.stage(), 0);
  EXPECT_EQ(mesh.rankOf(MeshCoord().with("tp", 1).with("dp", 1).with("sp", 1)), 9);  // entry order does not matter
  const MeshCoord c7 = mesh.coord(7);
  EXPECT_EQ(c7.entries(), (std::vector<std::pair<std::string, int>>{{"dp", 1}, {"sp", 0}, {"tp", 1}}));

  EXPECT_EQ(mesh.group(mesh.coord(7), "sp"), (std::vector<int>{7, 9, 11}));
  EXPECT_EQ(mesh.groups("dp"), (Groups{{0, 6}, {1, 7}, {2, 8}, {3, 9}, {4, 10}, {5, 11}}));
  EXPECT_EQ(mesh.groups("sp"), (Groups{{0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}}));
  EXPECT_EQ(mesh.groups("tp"), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}}));
}

TEST(DeviceMesh, FourAxesGroupsPartitionTheDevices) {
  const DeviceMesh mesh = meshOf({{"pp", 2}, {"dp", 2}, {"sp", 2}, {"tp", 3}});
  ASSERT_EQ(mesh.size(), 24);
  for (int rank = 0; rank < mesh.size(); ++rank) {
    const MeshCoord c = mesh.coord(rank);
    EXPECT_EQ(rank, ((c.stage() * 2 + c["dp"]) * 2 + c["sp"]) * 3 + c["tp"]);
    EXPECT_EQ(mesh.rankOf(c), rank);
  }
  EXPECT_EQ(mesh.group(mesh.coord(13), "pp"), (std::vector<int>{1, 13}));
  EXPECT_EQ(mesh.group(mesh.coord(13), "sp"), (std::vector<int>{13, 16}));
  for (const MeshAxis& axis : mesh.axes()) {
    const Groups groups = mesh.groups(axis.name);
    ASSERT_EQ(static_cast<int>(groups.size()), mesh.size() / axis.size) << axis.name;
    std::set<int> seen;
    for (const std::vector<int>& group : groups) {
      ASSERT_EQ(static_cast<int>(group.size()), axis.size) << axis.name;
      for (size_t i = 0; i < group.size(); ++i) {
        EXPECT_TRUE(seen.insert(group[i]).second) << "rank " << group[i] << " in two groups of " << axis.name;
        // Members differ only along the group's axis, where they count up from 0.
        const MeshCoord member = mesh.coord(group[i]);
        EXPECT_EQ(member[axis.name], static_cast<int>(i));
        for (const MeshAxis& other : mesh.axes())
          if (other.name != axis.name) {
            EXPECT_EQ(member[other.name], mesh.coord(group[0])[other.name]);
          }
      }
    }
    EXPECT_EQ(static_cast<int>(seen.size()), mesh.size());
  }
}

TEST(DeviceMesh, AnAbsentAxisHasSizeOne) {
  const DeviceMesh mesh = meshOf({{"dp", 2}, {"tp", 2}});
  EXPECT_EQ(mesh.axisIndex("ep"), -1);
  EXPECT_EQ(mesh.axisSize("ep"), 1);
  EXPECT_EQ(mesh.group(mesh.coord(3), "ep"), (std::vector<int>{3}));
  EXPECT_EQ(mesh.groups("ep").size(), 4u);
  const DeviceMesh single;
  EXPECT_EQ(single.size(), 1);
  EXPECT_EQ(single.rankOf(MeshCoord()), 0);
  EXPECT_EQ(single.group(MeshCoord(), kDataAxis), (std::vector<int>{0}));
}

TEST(DeviceMesh, CreateRejectsBadAxes) {
  EXPECT_FALSE(DeviceMesh::create({{"dp", 2}, {"dp", 2}}).hasValue());
  EXPECT_FALSE(DeviceMesh::create({{"dp", 0}}).hasValue());
  EXPECT_FALSE(DeviceMesh::create({{"", 2}}).hasValue());
  EXPECT_TRUE(DeviceMesh::create({}).hasValue());
}

// The partitioner splits over dp and tp wherever they sit in the mesh; another axis leaves the
// device's graph as on the dp x tp mesh (its devices hold replicas).
TEST(DeviceMesh, PartitionerIndexesAnyAxisCount) {
  auto model = generateMlp(MlpSpec{.input = 16, .hidden = {32, 32}, .classes = 8, .batch = 8, .seed = 1});
  ASSERT_TRUE(model.hasValue()) << model.status().message();
  const DeviceMesh two = DeviceMesh::pipelineDataTensor(1, 2, 2);
  const DeviceMesh four = meshOf({{"ep", 3}, {"tp", 2}, {"sp", 2}, {"dp", 2}});
  for (int rank = 0; rank < four.size(); ++rank) {
    const MeshCoord c = four.coord(rank);
    auto expected = partitionForDevice(*model, two, c);
    auto actual = partitionForDevice(*model, four, c);
    ASSERT_TRUE(expected.hasValue()) << expected.status().message();
    ASSERT_TRUE(actual.hasValue()) << actual.status().message();
    EXPECT_EQ(printGraph(*actual), printGraph(*expected)) << "rank " << rank;
  }
}

}  // namespace
}  // namespace cleave
