// Automatic parallelization: an analytic step-time and memory estimate per strategy (dp x tp x pp,
// microbatches, schedule, activation recomputation) from the cost model, and the search for the
// fastest one that fits.
//
// Compiling a plan per candidate is far too slow for 1024 devices, so the estimate works from a
// profile of the model instead: for each tensor-parallel degree T, one device's forward graph as
// the SPMD partitioner splits it over T devices, each node's FLOPs and bytes (its op's cost rule)
// as affine functions of the microbatch rows, its tp collectives, its parameters and the results
// the backward pass reads under each recomputation mode (found by differentiating that graph once
// and recomputing as each mode does, recompute.h). A strategy's estimate is
// then arithmetic over those nodes (docs/cost-model.md, "The strategy search"):
//   - per microbatch, a node takes its roofline time forward and twice that backward (three times
//     when the strategy's recomputation copies it), plus its tp collectives forward and their
//     transposes backward (alpha-beta over the tp group's link);
//   - pipeline stages split the node sequence where the slowest stage is fastest within the
//     memory limit; a step takes (M - 1) x the slowest stage + the sum of the stages + the
//     activation and gradient transfers between stages (the bubble (P-1)/(M+P-1) when balanced);
//     with V virtual stages per rank (interleaved 1F1B), M x the slowest rank + (P - 1) x the
//     slowest virtual stage + the transfers through all P x V;
//   - the data-parallel gradient all-reduce (ring, in buckets) overlaps the last backward pass,
//     and the part that does not, plus the optimizer update, ends the step (with ZeRO stage 1 a
//     reduce-scatter, the update of 1/dp of the rows and the parameters' all-gather);
//   - per device memory: its stage's parameter blocks, their optimizer state and gradients (two
//     copies with several microbatches: the running sum and the current one), the kept results of the microbatches its
//     schedule has in flight, and working memory for the largest node's results.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"
#include "analysis/cost_model.h"
#include "passes/core/model_at_batch.h"
#include "passes/lowering/pipeline_schedule.h"
#include "passes/training/training_pipeline.h"

namespace cleave {

// One way to run a model's step on devices: the mesh degrees, microbatches and pipeline schedule.
struct ParallelStrategy {
  int dp = 1, tp = 1, pp = 1;
  int microbatches = 1;
  PipelineScheduleKind schedule = PipelineScheduleKind::kOneForwardOneBackward;
  RecomputeMode recompute = RecomputeMode::kNone;  // activations the backward pass computes again (training)
  int zero = 0;  // 1: optimizer state sharded over the dp replicas (training, dp > 1)
  int virtual_stages = 1;  // interleaved 1F1B: pipeline stages per rank (pp > 1, 1f1b, microbatches % pp == 0)
  bool sequence_parallel = false;  // activations between tp regions split along the sequence (tp > 1)

  bool operator==(const ParallelStrategy&) const = default;
  // "dp 4 x tp 2 x pp 2, 8 microbatches, 1f1b" (", recompute full" when it recomputes, ", zero 1" when
  // sharded, ", sequence parallel" when it is).
  std::string str() const;
};

// What the estimate predicts for one strategy. Times are seconds per step.
struct StrategyEstimate {
  ParallelStrategy strategy;
  double step_time_s = std::numeric_limits<double>::infinity();
  double slowest_stage_s = 0;   // one microbatch's forward + backward on the slowest stage, tp collectives included
  double tp_comm_s = 0;         // of that, tp collectives
  double bubble_fraction = 0;   // the part of the pipeline's time a stage waits: 1 - M x stage total / P / pipeline time
  double pp_comm_s = 0;         // activation and gradient transfers between stages on the critical path
  double dp_comm_s = 0;         // the gradient all-reduce of the stage that waits longest for it
  double dp_exposed_s = 0;      // the part of it the backward pass does not hide
  double optimizer_s = 0;       // the optimizer update of the slowest stage
  int64_t memory_bytes = 0;     // per device, on the stage that needs the most
  std::vector<int> stage_starts;  // the profile node each (virtual) stage starts at (stage 0 at 0)
  // The forward graph's node (its first result's name) each stage after the first starts at, for
  // compile to split there (CompileOptions::stage_start_nodes); set by searchStrategy on the
  // estimates it returns as feasible; empty when they cannot be named.
  std::vector<std::string> stage_start_nodes;
  std::string infeasible;       // why the strategy cannot run (too much memory, ...); empty when it can

  bool feasible() const { return infeasible.empty(); }
};

// What the search may choose from and the limits it must respect.
struct StrategySearchOptions {
  int devices = 1;
  int64_t batch = 0;             // global batch; 0: the model's
  ModelBuilder model_at_batch;   // builds the model at another batch (an ONNX import); none: infer-shapes
  bool train = true;
  TrainingOptions training;      // loss and optimizer when training
  bool fusion = true;            // compile's --fusion: the rewrites before autodiff it implies (model_rewrites.h)
  int max_microbatches = 64;     // microbatch counts considered: the divisors of each replica's batch up to this
  std::vector<PipelineScheduleKind> schedules = {PipelineScheduleKind::kOneForwardOneBackward,
                                                 PipelineScheduleKind::kGPipe};
  // Recomputation modes considered when training (each strategy with each); a mode other than none
  // costs the forward time of the nodes it copies and keeps fewer activations (recompute.h).
  std::vector<RecomputeMode> recompute_modes = {RecomputeMode::kNone, RecomputeMode::kSelective, RecomputeMode::kFull};
  // ZeRO stages considered when training with dp > 1: 1 (the optimizer state 1/dp, a
  // reduce-scatter for the all-reduce and an all-gather of the parameters after the update),
  // 2 (the running gradient sum 1/dp, a reduce-scatter per microbatch), 3 (the parameters 1/dp,
  // gathered for every forward and backward step).
  std::vector<int> zero_stages = {0, 1, 2, 3};
  // Virtual stages per rank considered with pp > 1 under 1F1B when the microbatches divide by pp
  // (interleaved 1F1B: the bubble 1/V of 1F1B's, V times the transfers, more activations in flight).
  std::vector<int> virtual_stages = {1, 2, 4};
  // Sequence parallelism considered with tp > 1 (each tp degree is profiled as --sequence-parallel
  // partitions it: its activations between the tp regions 1/tp, reduce-scatters and all-gathers
  // for their all-reduces, the norms and dropouts on 1/tp of the rows).
  std::vector<bool> sequence_parallel = {false, true};
  int64_t memory_limit_bytes = 0;  // per device; 0: the cluster's device memory
  int64_t bucket_bytes = 25 * 1000 * 1000;  // gradient all-reduce buckets (as CompileOptions)
  size_t alternatives = 5;         // how many of the next fastest strategies the result keeps
};

// The model profile and the estimate of any strategy on it (see the file comment).
class StrategyEstimator {
 public:
  // Profiles `model` for every tensor-parallel degree dividing options.devices. A degree the
  // partitioner cannot split the model over is kept as infeasible with its error. Errors: a
  // model that does not compile on one device (shapes, loss), a batch of 0.
  static Expected<StrategyEstimator> create(const Graph& model, const StrategySearchOptions& options,
                                            const CostModel& cost_model);
  StrategyEstimator(StrategyEstimator&&) noexcept;
  StrategyEstimator& operator=(StrategyEstimator&&) noexcept;
  ~StrategyEstimator();

  // The global batch the strategies split.
  int64_t globalBatch() const;
  // Every strategy the search considers: dp x tp x pp = devices, the batch dividing into dp x
  // microbatches, microbatch counts up to the option's limit, both schedules when pp > 1, and
  // each recomputation mode of the options when training.
  std::vector<ParallelStrategy> candidates() const;
  // The estimate of `strategy` with its stages balanced (the fastest slowest stage within memory).
  StrategyEstimate estimate(const ParallelStrategy& strategy) const;
  // The estimate of `strategy` with stages starting at the given profile nodes (stage_starts[0]
  // == 0, increasing); for tests that enumerate every split.
  StrategyEstimate estimateWithStages(const ParallelStrategy& strategy, std::span<const int> stage_starts) const;
  // The forward graph's nodes (first result names) where `estimate`'s stages after the first start;
  // empty when one cannot be named (a stage starting past the last named profile node).
  std::vector<std::string> stageStartNodes(const StrategyEstimate& estimate) const;
  // The number of profile nodes (the units stages are made of) at tensor-parallel degree `tp`
  // (0 when that degree is infeasible).
  int profileNodes(int tp) const;
  // A lower bound of estimate(strategy).step_time_s that takes O(1) once its (tp, rows) is cached.
  double lowerBound(const ParallelStrategy& strategy) const;

 private:
  struct Impl;
  explicit StrategyEstimator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The search's answer: the chosen strategy and the ones it beat.
struct StrategySearchResult {
  StrategyEstimate best;
  std::vector<StrategyEstimate> alternatives;  // the next fastest feasible strategies, fastest first
  std::vector<StrategyEstimate> over_memory;   // strategies faster than the best that do not fit, fastest first
  int64_t candidates = 0;  // strategies considered
  int64_t estimated = 0;   // of them, estimated in full (the others' lower bound ruled them out)
  double seconds = 0;      // time the search took, profiling included
};

// Finds the strategy with the least estimated step time that fits in memory. Candidates are taken
// in order of their lower bound; once a lower bound exceeds the slowest strategy kept (the best
// and `alternatives` more), the rest cannot enter the answer and are skipped. Errors: no strategy
// fits (naming the least memory any needs), or none is feasible at all.
Expected<StrategySearchResult> searchStrategy(const StrategyEstimator& estimator, const StrategySearchOptions& options);
// Profiles `model` and searches (the time of both is in the result).
Expected<StrategySearchResult> searchStrategy(const Graph& model, const StrategySearchOptions& options,
                                              const CostModel& cost_model);

}  // namespace cleave
