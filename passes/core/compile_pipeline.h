// The compile pipeline `cleave compile` runs: model graph -> shapes fixed -> (training) -> plan.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ir/graph.h"
#include "ir/status.h"
#include "analysis/cost_model.h"
#include "passes/core/model_at_batch.h"
#include "passes/training/training_pipeline.h"

namespace cleave {
namespace planpb {
class Plan;
}  // namespace planpb

// What to compile a model into.
struct CompileOptions {
  std::string model_file;       // recorded in the plan and in diagnostics
  std::string producer;         // e.g. "cleave 0.1.0"
  int64_t batch = 0;            // global batch: replaces dim 0 of every input; 0 keeps the model's
  ModelBuilder model_at_batch;  // builds the model at another batch (an ONNX import); none: infer-shapes
  int dp = 1, tp = 1, pp = 1;   // parallel degrees; their product is the device count
  bool allow_replicated = false;  // with tp > 1: weights left whole are accepted, not an error
  int64_t bucket_bytes = 25 * 1000 * 1000;  // data-parallel gradient all-reduce buckets
  bool fusion = true;           // chains of elementwise ops become fused nodes (after partitioning)
  // Inference programs' convolutions and max pools read and write NHWC (passes/layout/channels_last.h).
  bool channels_last = true;
  // Inference programs' 3x3 convolutions may run as Winograd where faster (passes/algorithm/winograd.h).
  bool winograd = true;
  int microbatches = 1;
  std::string schedule = "1f1b";
  bool train = false;
  TrainingOptions training;     // used when `train`
  int zero = 0;                 // ZeRO stage over the dp replicas (needs dp > 1): 1 optimizer state sharded,
                                // 2 and gradient sums, 3 and parameters (passes/training/*_sharding.h)
  bool sequence_parallel = false;  // with tp > 1: activations between tp regions split along the sequence (Megatron's)
  int64_t memory_limit_bytes = 0;  // per device: pipeline stages are balanced under it and every
                                   // rank's planned arena must fit in it; 0: no limit
  std::optional<ClusterSpec> cluster;  // the devices pipeline stages are balanced for; none: cpu-local
  // With pp > 1: the forward graph's nodes (by first result name) where stages 1..pp-1 start, as
  // the strategy search split them within memory; empty (or not all found): balanced here by time.
  std::vector<std::string> stage_start_nodes;
  // The ranks of a stage name the program of its first rank (RankPlan.same_program_as) rather than
  // hold a copy; expandSharedPrograms (ir/shared_programs.h) gives every rank its own, as
  // readPlanFile does. False: every rank's graphs are built and lowered on their own.
  bool share_programs = true;
  // Interleaved 1F1B (Megatron-LM's virtual stages): with pp > 1, the model is cut into
  // pp x virtual_stages stages and each rank holds virtual_stages of them, run in
  // interleavedSchedule order (passes/lowering/virtual_stage_merge.h). 1: one stage per rank.
  int virtual_stages = 1;
  // Internal, set by compileModel for virtual stages: pp counts the virtual stages, whose steps
  // run in virtualStageSchedule order.
  bool stages_are_virtual = false;
};

// Compiles `model` into a memory-planned, validated plan: programs "train" and "eval" for a
// training plan, "infer" otherwise. A rank whose arena exceeds options.memory_limit_bytes is a
// kBadInput error giving both sizes. Integer inputs get their value range (labels: the class count;
// indices feeding gather: the gathered dim) so synthetic data can be made for them.
Expected<planpb::Plan> compileModel(const Graph& model, const CompileOptions& options);

}  // namespace cleave
