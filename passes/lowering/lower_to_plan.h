// Lowering to a plan: each device's graphs (train, eval, infer) become its rank's buffers and programs.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "ir/plan.pb.h"
#include "ir/status.h"
#include "ir/device_mesh.h"

namespace cleave {

// One graph to lower into the program of the same name ("train", "eval", "infer").
struct ProgramGraph {
  ProgramGraph(std::string program_name, const Graph* program_graph)
      : name(std::move(program_name)), graph(program_graph) {}

  std::string name;
  const Graph* graph = nullptr;
  // Pipeline plans: per node, the microbatch it serves (-1: none) and whether it is backward work
  // (both empty otherwise); recorded on the node's instruction for timelines.
  std::vector<int> node_microbatch;
  std::vector<bool> node_backward;
};

// One device's graphs on a multi-device mesh.
struct RankGraphs {
  MeshCoord coord;
  std::vector<ProgramGraph> programs;
  // Inputs and outputs whose dim 0 holds this device's block of the global batch's rows.
  std::set<std::string> batch_split;
};

// What lowerToPlan needs: the graphs, which share parameters by name, and the plan's metadata.
struct LoweringInput {
  std::vector<ProgramGraph> programs;  // one device: its programs (when `ranks` is empty)
  std::vector<RankGraphs> ranks;       // several devices: one entry per rank of `mesh`, in rank order
  DeviceMesh mesh;
  int microbatches = 1;
  std::string producer = "cleave";  // e.g. "cleave 0.1.0"
  std::string model_name;
  std::string model_file;
  int64_t global_batch = 0;
  std::string schedule = "gpipe";
  // Ranks given the very same graphs as an earlier rank (the ranks of a stage) name its programs
  // (RankPlan.same_program_as) instead of holding a copy: the plan grows with distinct programs,
  // not ranks. False: every rank holds its own.
  bool share_programs = true;
};

// True when a parameter holds optimizer state rather than model weights: it is not trainable and
// its name is "step" (the step counter) or contains ".momentum", ".exp_avg" or ".exp_avg_sq"
// (SGD momentum buffers, Adam moments), as the optimizer pass names them.
bool isOptimizerState(std::string_view param_name, bool trainable);

// True when `value_name` is a parameter's gradient as autodiff names it: "<param>.grad", where
// <param> names a parameter of `graph`.
bool isParameterGradient(const Graph& graph, std::string_view value_name);

// Lowers the graphs of every rank into a memory-planned, validated plan (one device: rank 0 from
// `programs`). Communication ops become communication instructions on stream 1 over the ranks of
// their mesh axis (all_reduce in place when its operand has no other reader), send/recv name the
// partner rank of the same dp/tp position; shard_slice becomes a slice of this rank's block;
// grad_all_reduce is a view. Every parameter becomes one persistent buffer shared by all
// programs; every node an instruction, except views, which alias their operand; graph inputs and
// outputs become program inputs and outputs; each state update either writes its new value in
// place over the parameter (an alias) or copies it there at the end of the program. The plan's
// `training` is left empty for the caller. Errors name the program and the value at fault.
Expected<planpb::Plan> lowerToPlan(const LoweringInput& input);

}  // namespace cleave
