// Pipeline stages: balancing a forward graph's node sequence over stages, and each stage's graph
// with the sends and receives that join it to the others.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"
#include "passes/lowering/pipeline_schedule.h"

namespace cleave {

// What assignStages balances and the memory it must respect, per node of the forward graph.
struct StageCostModel {
  std::vector<double> node_costs;              // predicted time of each node (any unit); 0: no work
  std::vector<int64_t> node_param_bytes;       // bytes of the parameters each node brings to its stage
  std::vector<int64_t> node_activation_bytes;  // bytes each node keeps for the backward pass, per microbatch
  double param_memory_factor = 1;              // bytes per parameter byte: 1 + gradients (1) + optimizer
                                               // state (0 SGD, 1 momentum, 2 AdamW)
  PipelineScheduleKind schedule = PipelineScheduleKind::kOneForwardOneBackward;
  int num_microbatches = 1;                    // with the schedule: activations of how many microbatches a stage keeps
  int64_t memory_limit_bytes = 0;              // per device; 0: no limit
  // Interleaved (virtual) stages: prefer, among splits within memory, those where no value skips a
  // stage (is read after the stage that follows its own), as a residual read past a whole stage
  // would be a message between two virtual stages of one rank (lowering/virtual_stage_merge.h).
  bool avoid_skipped_stages = false;
};

// The stage of every node of a forward graph, and what each stage costs.
struct StageAssignment {
  int num_stages = 1;
  std::vector<int> node_stage;              // per node; a node depending on no graph input gets the first
                                            // stage using it (extractStage copies it wherever it is needed)
  std::vector<double> stage_cost;           // per stage: the sum of its nodes' costs
  std::vector<int64_t> stage_memory_bytes;  // per stage: parameter memory plus activations in flight
};

class CostModel;

// The cost model of balancing `forward`'s nodes over stages: each node's time on `costs`'s devices
// times 3 (its forward pass and a backward pass of about twice the work), and its parameter and
// activation bytes; memory factor, schedule, microbatches and limit are left for the caller.
StageCostModel stageCostModel(const Graph& forward, const CostModel& costs);

// Bytes of each parameter, counted at the first node (in program order) that uses it.
std::vector<int64_t> parameterBytesByFirstUser(const Graph& graph);
// Bytes of each node's results.
std::vector<int64_t> nodeResultBytes(const Graph& graph);

// Splits the program order of `graph`'s nodes that depend on a graph input into `num_stages`
// contiguous stages by dynamic programming: the slowest stage's cost is as small as possible, and
// each stage s holds param_memory_factor x its parameter bytes + microbatchesInFlight(s) x its
// activation bytes within the memory limit (and, with avoid_skipped_stages, where it can, no value
// skips a stage). Stages start at nodes with work (cost > 0); nodes without work join the next node
// with work. Errors: vectors not sized to the nodes, fewer nodes
// with work than stages, or no split within the memory limit (naming the least memory any split needs).
Expected<StageAssignment> assignStages(const Graph& graph, int num_stages, const StageCostModel& model);

// The same split with stages 1..num_stages-1 starting at the given nodes (each named by its first
// result, in program order) instead of balanced. Errors: a wrong count, a name no node of work
// defines, starts out of order.
Expected<StageAssignment> assignStagesAt(const Graph& graph, int num_stages, const std::vector<std::string>& first_nodes,
                                         const StageCostModel& model);

// One value passed from a stage to a later one: its name in the forward graph, the two stages, its
// transfer tag (its index among all transfers, the same on every stage), and whether its gradient
// travels back in the backward pass: the value is float, depends on a trainable parameter through
// float values, and the graph's output 0 (the loss) depends on it.
struct StageTransfer {
  std::string value_name;
  int from_stage = 0;
  int to_stage = 0;
  int64_t tag = 0;
  bool carries_gradient = false;
};

// A trainable parameter that several stages use (tied embedding and LM head, a bias shared by every
// layer): each of them holds a copy and sums its gradient with the others' before the optimizer, as
// Megatron does for the embedding of its first and last stage.
struct SharedParameter {
  std::string name;
  std::vector<int64_t> stages;  // increasing
};

// Where one stage sits in the pipeline and the values it exchanges with the others.
struct StageBoundary {
  int stage = 0;
  int num_stages = 1;
  std::vector<StageTransfer> sends;  // values this stage computes and a later stage uses
  std::vector<StageTransfer> recvs;  // values an earlier stage computes and this stage uses
  std::vector<SharedParameter> shared;  // trainable parameters this stage shares with others
};

// A stage's graph and its boundary.
struct PipelineStage {
  Graph graph;
  StageBoundary boundary;
};

// Every value crossing between stages of `assignment`, ordered by producer then destination stage.
Expected<std::vector<StageTransfer>> stageTransfers(const Graph& graph, const StageAssignment& assignment);

// The graph of stage `stage`: the nodes assigned to it, in program order; each value an earlier
// stage computes arrives through a recv node (named as the value) where its producer was, and each
// value a later stage uses leaves through a send node after its producer, both tagged with the
// transfer tag. Nodes depending on no graph input (constants, masks, parameter-only expressions) are
// copied into every stage that needs them; inputs and parameters go to the stages that use them.
// The graph's outputs belong to the last stage (values computed earlier are sent to it); trainable
// parameters used on several stages are in each (StageBoundary::shared). Errors: a bad assignment,
// a node using a value of a later stage, output 0 (the loss) computed before the last stage, a
// state update of a shared parameter.
Expected<PipelineStage> extractStage(const Graph& graph, const StageAssignment& assignment, int stage);

}  // namespace cleave
