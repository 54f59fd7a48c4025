// The partition pass: replaces a graph by one device's graph of it on a dp x tp mesh (for inspection and lit tests).
#include "passes/core/pass_manager.h"
#include "passes/partition/spmd_partitioner.h"

namespace cleave {
namespace {

Status partition(Graph& graph, const PassOptions& options) {
  const DeviceMesh mesh =
      DeviceMesh::pipelineDataTensor(1, static_cast<int>(options.getInt("dp")), static_cast<int>(options.getInt("tp")));
  CLEAVE_ASSIGN_OR_RETURN(graph, partitionForDevice(graph, mesh, mesh.coord(static_cast<int>(options.getInt("rank"))),
                                                    nullptr, {}, options.getInt("sequence-parallel") != 0));
  return Status::ok();
}

Status checkMesh(const PassOptions& options) {
  int64_t dp = options.getInt("dp"), tp = options.getInt("tp"), rank = options.getInt("rank");
  if (dp < 1 || tp < 1) return Status::usage("partition: dp and tp must be at least 1");
  if (rank < 0 || rank >= dp * tp)
    return Status::usage("partition: rank " + std::to_string(rank) + " is not on a " + std::to_string(dp) + " x " +
                         std::to_string(tp) + " mesh");
  return Status::ok();
}

}  // namespace

PassInfo makePartitionPass() {
  return PassInfo{
      .name = "partition",
      .summary = "replace the graph by the graph of one device of a dp x tp mesh (data inputs split over dp, "
                 "Megatron-style tp splits, collectives where layouts change)",
      .options = {{"dp", int64_t{1}, "data-parallel degree"},
                  {"tp", int64_t{1}, "tensor-parallel degree"},
                  {"rank", int64_t{0}, "the device: rank = dp_index * tp + tp_index"},
                  {"sequence-parallel", int64_t{0}, "1: activations between tp regions split along the sequence"}},
      .run = partition,
      .check_options = checkMesh,
  };
}

}  // namespace cleave
