// The compile pipeline `cleave compile` runs: model graph -> shapes fixed -> (training) -> plan.
#include "passes/core/compile_pipeline.h"

#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>

#include "ir/parallel_tasks.h"
#include "ir/plan.h"
#include "ir/plan.pb.h"
#include "ir/shared_programs.h"
#include "analysis/cost_model.h"
#include "passes/training/gradient_buckets.h"
#include "passes/fusion/conv_epilogue.h"
#include "passes/fusion/fuse_graph.h"
#include "passes/layout/channels_last.h"
#include "passes/algorithm/winograd.h"
#include "passes/core/model_rewrites.h"
#include "passes/lowering/lower_to_plan.h"
#include "passes/lowering/memory_planner.h"
#include "passes/training/optimizer.h"
#include "passes/training/gradient_clipping.h"
#include "passes/training/gradient_sharding.h"
#include "passes/training/optimizer_sharding.h"
#include "passes/training/parameter_sharding.h"
#include "passes/partition/microbatch_rows.h"
#include "passes/partition/microbatching.h"
#include "passes/partition/pipeline_backward.h"
#include "passes/lowering/pipeline_schedule.h"
#include "passes/partition/pipeline_stages.h"
#include "passes/lowering/virtual_stage_merge.h"
#include "passes/partition/spmd_partitioner.h"

namespace cleave {
namespace {

// The values an integer input may take, read off its users (through slices, such as a
// microbatch's rows, and views): a gather's indexed dim, or the class count of the loss that reads
// it as labels. 0 when no user tells.
int64_t valueLimit(const Graph& graph, ValueId value, const std::vector<std::vector<int32_t>>& users) {
  for (int32_t user : users[value]) {
    const Node& node = graph.nodes[user];
    const TensorType& first = graph.values[node.operands[0]].type;
    if (node.op == OpId::gather && node.operands[1] == value) {
      int64_t axis = normalizeAxis(OpContext{opDef(node.op), {}, {}, node.attrs}.getInt("axis"), first.rank());
      if (axis >= 0) return first.shape[axis];
    }
    if (node.op == OpId::softmax_cross_entropy && node.operands[1] == value && first.rank() > 0)
      return first.shape.back();
    if (node.op == OpId::slice || opDef(node.op).view)
      if (int64_t limit = valueLimit(graph, node.results[0], users)) return limit;
  }
  return 0;
}

// The value limits of `graph`'s integer inputs, by name.
std::map<std::string, int64_t> valueLimits(const Graph& graph) {
  std::map<std::string, int64_t> limits;
  std::vector<std::vector<int32_t>> users = graph.computeUsers();
  for (ValueId v : graph.inputs)
    if (isInteger(graph.values[v].type.dtype)) limits[graph.values[v].name] = valueLimit(graph, v, users);
  return limits;
}

// Sets the limit of each integer input of `program` (whose graph is `graph`): read off `graph`, else
// off the whole model's `model_limits` (a device's graph may read ids or labels only through a
// vocabulary-parallel lookup or loss, arithmetic that tells no limit).
void setValueLimits(const Graph& graph, const std::map<std::string, int64_t>& model_limits, planpb::Program& program) {
  std::map<std::string, int64_t> limits = valueLimits(graph);
  for (auto& input : *program.mutable_inputs()) {
    auto local = limits.find(input.name());
    if (local == limits.end()) continue;
    int64_t limit = local->second;
    if (limit == 0)
      if (auto whole = model_limits.find(input.name()); whole != model_limits.end()) limit = whole->second;
    input.set_value_limit(limit);
  }
}

// Training metadata the runtime reads: loss, optimizer and the names of the loss, logits and labels.
void describeTraining(const CompileOptions& options, const std::string& logits_name, planpb::Plan& plan) {
  planpb::Training* info = plan.mutable_training();
  const OptimizerSpec& opt = options.training.optimizer;
  info->set_loss(std::string(lossKindName(options.training.loss)));
  info->set_optimizer(opt.kind == OptimizerKind::kSgd ? "sgd" : "adamw");
  auto& args = *info->mutable_optimizer_args();
  args["lr"] = opt.lr;
  args["weight_decay"] = opt.weight_decay;
  if (opt.kind == OptimizerKind::kSgd) {
    args["momentum"] = opt.momentum;
    args["dampening"] = opt.dampening;
    args["nesterov"] = opt.nesterov ? 1 : 0;
  } else {
    args["beta1"] = opt.beta1;
    args["beta2"] = opt.beta2;
    args["eps"] = opt.eps;
  }
  info->set_loss_output("loss");
  if (!opt.schedule.isConstant()) info->set_lr_schedule(lrScheduleText(opt.schedule));
  if (options.training.precision != Precision::kF32) info->set_precision(std::string(precisionName(options.training.precision)));
  if (options.training.recompute != RecomputeMode::kNone)
    info->set_recompute(std::string(recomputeModeName(options.training.recompute)));
  if (options.training.clip_grad_norm > 0) {
    info->set_clip_grad_norm(options.training.clip_grad_norm);
    info->set_grad_norm_output(std::string(kGradNormOutput));
  }
  info->set_logits_output(logits_name);
  info->set_labels_input(options.training.loss == LossKind::kSoftmaxCrossEntropy ? "labels" : "targets");
}

// The graphs of every device of a multi-device plan, owned here; lowering reads them.
struct DeviceGraphs {
  std::vector<std::unique_ptr<Graph>> owned;
  std::vector<RankGraphs> ranks;
  std::map<std::string, int64_t> model_limits;  // valueLimits of the whole model (with its loss when training)
};

// Where each forward node runs: pipeline stages balanced by the cost model on options.cluster (one
// stage: all of them).
Expected<StageAssignment> balanceStages(const Graph& forward, const CompileOptions& options, PipelineScheduleKind schedule) {
  if (options.pp == 1) return StageAssignment{1, std::vector<int>(forward.nodes.size(), 0), {}, {}};
  ClusterSpec cluster;
  if (options.cluster) {
    cluster = *options.cluster;
  } else {
    CLEAVE_ASSIGN_OR_RETURN(cluster, builtinCluster("cpu-local"));
  }
  StageCostModel model = stageCostModel(forward, CostModel(std::move(cluster)));
  const OptimizerSpec& opt = options.training.optimizer;
  model.param_memory_factor = !options.train ? 1 : opt.kind == OptimizerKind::kAdamW ? 4 : opt.momentum != 0 ? 3 : 2;
  model.schedule = schedule;
  model.num_microbatches = options.microbatches;
  model.memory_limit_bytes = options.memory_limit_bytes;
  model.avoid_skipped_stages = options.stages_are_virtual;
  // Where the strategy search split the stages (within memory, as it estimates it), when every
  // start names a node of this graph; else balanced by time here.
  if (!options.stage_start_nodes.empty())
    if (auto at = assignStagesAt(forward, options.pp, options.stage_start_nodes, model)) return at;
  return assignStages(forward, options.pp, model);
}

// An inference program's layout and algorithm choices (CompileOptions::channels_last, winograd);
// training and evaluation programs take neither.
struct InferenceChoices {
  bool channels_last = false;
  bool winograd = false;
};

// A per-device program graph and the pipeline step of each of its nodes; with `fuse`, its
// elementwise chains fused within each pipeline step.
Expected<ProgramGraph> programOf(std::string name, Graph* graph, const std::vector<PipelineNodeLabel>& labels, bool fuse,
                                 InferenceChoices inference = {}) {
  std::vector<int64_t> steps;
  for (const PipelineNodeLabel& label : labels) steps.push_back(int64_t{label.microbatch} * 2 + (label.backward ? 1 : 0));
  if (inference.channels_last) CLEAVE_TRY(convertToChannelsLast(*graph, &steps).status());
  if (inference.winograd) CLEAVE_TRY(allowWinogradConvolutions(*graph).status());
  if (fuse) {
    CLEAVE_TRY(fuseConvEpilogues(*graph, &steps).status());
    CLEAVE_TRY(fuseGraph(*graph, &steps));
  }
  ProgramGraph program(std::move(name), graph);
  for (int64_t step : steps) {
    const int64_t microbatch = step >= 0 ? step / 2 : (step - 1) / 2;  // floor division: -1 stays -1
    program.node_microbatch.push_back(static_cast<int>(microbatch));
    program.node_backward.push_back(step - microbatch * 2 == 1);
  }
  return program;
}

// A --tp that splits no weight, or leaves whole most of the layer weights or a weight a column
// split fits, is an error unless replicated weights are allowed: a user asking for tensor
// parallelism expects its memory saving, not a silent copy of the model on every rank. So is a
// --sequence-parallel under which nothing splits along a sequence.
Status checkTensorParallelSplits(const Graph& forward, const DeviceMesh& mesh, bool allow_replicated,
                                 bool sequence_parallel) {
  TensorParallelReport report;
  CLEAVE_TRY(partitionForDevice(forward, mesh, mesh.coord(0), &report, {}, sequence_parallel).status());
  if (sequence_parallel && report.sequence_splits == 0)
    return Status::badInput("--sequence-parallel: no activation of the model is a partial sum over tp shaped [batch, "
                            "sequence, ...] with a sequence that divides by " + std::to_string(mesh.tp()) +
                            ", so nothing would split along the sequence");
  const std::string tp = "--tp " + std::to_string(mesh.tp());
  auto list = [](const std::vector<std::string>& names) {
    std::string text;
    for (size_t i = 0; i < names.size() && i < 3; ++i) text += (i ? ", " : "") + names[i];
    return text + (names.size() > 3 ? ", ..." : "");
  };
  if (report.split.empty())
    return Status::badInput(
        tp + " splits no weight: " +
        (!report.whole.empty()
             ? "the output features of its " + std::to_string(report.whole.size()) + " layer weight(s) (" +
                   list(report.whole) + ") do not divide by " + std::to_string(mesh.tp())
         : !report.kept_whole.empty()
             ? "a split of its " + std::to_string(report.kept_whole.size()) + " layer weight(s) (" +
                   list(report.kept_whole) + ") would be gathered again before any use (a norm over their outputs, or heads that "
                   "do not divide by " + std::to_string(mesh.tp()) + ")"
             : std::string("the model has no matmul, gemm or conv weight")));
  if (allow_replicated) return Status::ok();
  if (!report.splittable.empty())
    return Status::badInput(tp + " leaves whole on every tp rank " + std::to_string(report.splittable.size()) +
                            " weight(s) whose output features divide by " + std::to_string(mesh.tp()) + " (" +
                            list(report.splittable) +
                            "): another op reads them whole first, or their layer reads them in a layout the split "
                            "cannot follow; --allow-replicated accepts that");
  if (report.whole_bytes > report.split_bytes)
    return Status::badInput(tp + " splits " + std::to_string(report.split.size()) + " layer weight(s) but leaves " +
                            std::to_string(report.whole.size()) + " whole on every tp rank, most of the weights (" +
                            list(report.whole) + "): their output features do not divide by " +
                            std::to_string(mesh.tp()) + "; --allow-replicated accepts that");
  return Status::ok();
}

// The parameters pipeline stages share whose stages would lay them out differently over tp (a tied
// embedding split by rows on one stage and read whole on another): each stage keeps those whole, so
// every copy has one shape for the gradient sum. Layouts are compared at tp index 1, where a block's
// offset tells which dim is split.
Expected<std::set<std::string>> sharedParametersKeptWhole(const Graph& forward, const StageAssignment& stages,
                                                          const DeviceMesh& mesh) {
  std::set<std::string> whole;
  if (mesh.pp() == 1 || mesh.tp() == 1) return whole;
  std::map<std::string, std::string> layout_of;  // parameter -> its block on the first stage sharing it
  for (int s = 0; s < mesh.pp(); ++s) {
    CLEAVE_ASSIGN_OR_RETURN(PipelineStage stage, extractStage(forward, stages, s));
    if (stage.boundary.shared.empty()) continue;
    const MeshCoord coord = mesh.coord(0).with(kTensorAxis, 1).with(kPipelineAxis, s);
    CLEAVE_ASSIGN_OR_RETURN(Graph part, partitionForDevice(stage.graph, mesh, coord));
    for (const SharedParameter& shared : stage.boundary.shared) {
      const ValueId v = part.findValue(shared.name);
      const Param* param = v == kNoValue ? nullptr : part.findParam(v);
      if (!param) continue;
      const std::string block = part.values[v].type.str() + " at " + shapeStr(param->shard_offset);
      auto [it, first] = layout_of.emplace(shared.name, block);
      if (!first && it->second != block) whole.insert(shared.name);
    }
  }
  return whole;
}

// The device at `coord`'s part of the global gradient norm: a weight kept whole on every
// tensor-parallel device counts on the first, a weight shared by pipeline stages on the first of
// them, a block of a split weight on its device; the parts are summed over tp, then over the stages.
// Data-parallel replicas hold the same summed gradients, so each computes the whole norm itself.
GradientNormScope gradientNormScope(const DeviceMesh& mesh, MeshCoord coord, const StageBoundary& boundary) {
  GradientNormScope scope;
  scope.counts = [coord, boundary](const Graph& graph, const Param& param) {
    const std::string& name = graph.values[param.value].name;
    for (const SharedParameter& shared : boundary.shared)
      if (shared.name == name && !shared.stages.empty() && shared.stages.front() != coord.stage()) return false;
    const bool split = !param.full_shape.empty() && param.full_shape != graph.values[param.value].type.shape;
    return split || coord[kTensorAxis] == 0;
  };
  scope.sum_over_devices = [&mesh](Graph& graph, ValueId partial) -> Expected<ValueId> {
    auto sumOver = [&](std::string_view axis, int size, std::vector<int64_t> stages) -> Status {
      if (size == 1) return Status::ok();
      AttrMap attrs{{"axis", std::string(axis)}, {"group_size", int64_t{size}}, {"reduce", std::string("sum")}};
      if (!stages.empty()) attrs["stages"] = std::move(stages);
      CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> summed,
                              graph.addNode(OpId::all_reduce, {partial}, std::move(attrs), {},
                                            {graph.uniqueName("grad_norm.sum_" + std::string(axis))}));
      partial = summed[0];
      return Status::ok();
    };
    CLEAVE_TRY(sumOver(kTensorAxis, mesh.tp(), {}));
    std::vector<int64_t> stages(static_cast<size_t>(mesh.pp()));
    std::iota(stages.begin(), stages.end(), int64_t{0});
    CLEAVE_TRY(sumOver(kPipelineAxis, mesh.pp(), std::move(stages)));
    return partial;
  };
  return scope;
}

// Builds the programs of every device. Per device (stage s, dp index d, tp index t):
//  1. the forward graph (with the loss when training) at microbatch rows, its nodes balanced over stages;
//  2. stage s's part, with sends and receives to the other stages;
//  3. the dp x tp partition for (d, t), autocast to bf16 with --precision bf16;
//  4. M microbatches unrolled;
//  5. training: the backward pass (seeded by the loss, or by gradients received from the next
//     stage), gradients summed over microbatches from zeros, bucketed dp gradient all-reduces,
//     clipping by the global norm and the optimizer; nodes ordered by the schedule.
Expected<DeviceGraphs> buildDeviceGraphs(const Graph& model, const CompileOptions& options, const DeviceMesh& mesh,
                                         std::string& logits_name) {
  CLEAVE_ASSIGN_OR_RETURN(PipelineScheduleKind schedule, parsePipelineSchedule(options.schedule));
  Graph forward;
  if (options.train) {
    CLEAVE_ASSIGN_OR_RETURN(forward, buildLossGraph(model, options.training));
    logits_name = forward.values[forward.outputs[1]].name;
  } else {
    CLEAVE_ASSIGN_OR_RETURN(forward, buildInferenceGraph(model));
  }
  CLEAVE_ASSIGN_OR_RETURN(StageAssignment stages, balanceStages(forward, options, schedule));
  // The train program outputs the loss; eval outputs [logits, loss]; both share the forward's nodes.
  Graph train_forward = forward, eval_forward = forward;
  if (options.train) {
    train_forward.outputs.resize(1);
    std::swap(eval_forward.outputs[0], eval_forward.outputs[1]);
    eval_forward.updates.clear();  // evaluation leaves the model's state (running statistics) as it is
  }

  if (mesh.tp() > 1)
    CLEAVE_TRY(checkTensorParallelSplits(forward, mesh, options.allow_replicated, options.sequence_parallel));

  CLEAVE_ASSIGN_OR_RETURN(const std::set<std::string> kept_whole, sharedParametersKeptWhole(forward, stages, mesh));
  auto devicePart = [&](const Graph& whole, MeshCoord coord, StageBoundary* boundary, int microbatches) -> Expected<Graph> {
    CLEAVE_ASSIGN_OR_RETURN(PipelineStage stage, extractStage(whole, stages, coord.stage()));
    if (boundary) *boundary = stage.boundary;
    CLEAVE_ASSIGN_OR_RETURN(Graph partitioned, partitionForDevice(stage.graph, mesh, coord, nullptr, kept_whole,
                                                                  options.sequence_parallel));
    if (options.train && options.training.precision == Precision::kBF16) CLEAVE_TRY(autocastToBf16(partitioned).status());
    // Unrolling also gives pipeline messages their per-microbatch tags, which the stage's backward
    // pass reads: it runs for every pipeline, even with one microbatch.
    if (microbatches == 1 && mesh.pp() == 1) return partitioned;
    return unrollMicrobatches(partitioned, microbatches);
  };

  DeviceGraphs result;
  result.model_limits = valueLimits(options.train ? forward : model);
  // The ranks of a stage run the same graphs but for their coordinate: the batch rows a rank reads,
  // the groups of its collectives, and the blocks it holds (shard_slice, parameters' shard_steps)
  // come from it when lowering, or when a plan's shared programs are derived. So each stage is
  // built once, at its first rank, and the others share its graphs, unless they differ:
  //   - with share_programs off, each (stage, tp index) is built, and under --zero each rank: the
  //     blocks a graph holds are then its own rank's, as lowering each rank needs;
  //   - tp ranks hold their own graphs where a split parameter carries its block's data (an ONNX
  //     import) or the gradient norm counts replicated weights on tp index 0 only (clipping), and
  //     dp replicas where --zero 3 splits such a parameter.
  const bool tp_may_share = options.share_programs && !(options.train && options.training.clip_grad_norm > 0);
  // One rank's graphs, which `owned` keeps.
  auto buildRank = [&](MeshCoord coord, std::vector<std::unique_ptr<Graph>>& owned) -> Expected<RankGraphs> {
    const std::vector<PipelineStep> steps =
        options.stages_are_virtual
            ? virtualStageSchedule(coord.stage(), mesh.pp() / options.virtual_stages, options.virtual_stages,
                                   options.microbatches)
            : stageSchedule(schedule, coord.stage(), mesh.pp(), options.microbatches);
    RankGraphs rank{coord, {}, {}};
    if (options.train) {
      // The train and eval graphs are built side by side; ZeRO 3 then gathers in eval the blocks
      // train holds, and fusion ends both.
      std::unique_ptr<Graph> train, eval;
      std::vector<PipelineNodeLabel> train_labels, eval_labels;
      auto buildTrain = [&]() -> Status {
        StageBoundary boundary;
        CLEAVE_ASSIGN_OR_RETURN(Graph train_graph, devicePart(train_forward, coord, &boundary, options.microbatches));
        train = std::make_unique<Graph>(std::move(train_graph));
        TrainingStepHooks hooks;
        hooks.backward = [&](Graph& g) { return appendPipelineBackward(g, boundary, options.microbatches); };
        hooks.after_backward = [&](Graph& g) {
          if (options.microbatches > 1) CLEAVE_TRY(sumMicrobatchGradientsFromZeros(g));
          CLEAVE_TRY(sumSharedGradients(g, boundary));
          return bucketGradientAllReduces(g, options.bucket_bytes);
        };
        hooks.parameters_optional = mesh.pp() > 1;  // a stage may hold no parameters (a loss, a relu)
        hooks.norm_scope = gradientNormScope(mesh, coord, boundary);
        // Under ZeRO, clipping comes after sharding: the norm sums the blocks the updates read, and
        // the gradients stay reduce-scattered.
        TrainingOptions step_options = options.training;
        const bool clip_sharded = options.zero >= 1 && step_options.clip_grad_norm > 0;
        if (clip_sharded) step_options.clip_grad_norm = 0;
        CLEAVE_TRY(appendTrainingStep(*train, step_options, hooks));
        if (options.zero >= 1) CLEAVE_TRY(shardOptimizerState(*train, mesh.dp(), coord[kDataAxis]));
        // Stage 2 shards sums over microbatches; one microbatch's gradient is freed once reduce-scattered.
        if (options.zero >= 2 && options.microbatches > 1) CLEAVE_TRY(shardGradientSums(*train).status());
        if (clip_sharded)
          CLEAVE_TRY(appendShardedGradientClipping(*train, options.training.clip_grad_norm, hooks.norm_scope, mesh.dp()));
        // One stage with one microbatch has one forward and one backward step: program order is the
        // schedule. (Reordering it would put every node right after its operands, and so run the
        // copies recomputation placed before the backward nodes that need them in the forward pass.)
        if (mesh.pp() == 1 && options.microbatches == 1) {
          train_labels = labelPipelineNodes(*train, coord.stage(), options.microbatches);
        } else {
          CLEAVE_ASSIGN_OR_RETURN(train_labels, orderNodesBySchedule(*train, coord.stage(), options.microbatches, steps));
        }
        return Status::ok();
      };
      auto buildEval = [&]() -> Status {
        // Evaluation runs one microbatch per replica at a time (its batch is dp x the microbatch's
        // rows): it returns the logits of its rows, which at a language model's vocabulary would
        // otherwise take more memory than training does (GPT-3's last stage: 37 GiB for 96 rows).
        CLEAVE_ASSIGN_OR_RETURN(Graph eval_graph, devicePart(eval_forward, coord, nullptr, 1));
        eval = std::make_unique<Graph>(std::move(eval_graph));
        eval_labels = labelPipelineNodes(*eval, coord.stage(), 1);
        return Status::ok();
      };
      CLEAVE_TRY(runParallelTasks(2, [&](size_t task) { return task == 0 ? buildTrain() : buildEval(); }));
      if (options.zero == 3) {  // parameters held in blocks, gathered per step by both programs
        CLEAVE_ASSIGN_OR_RETURN(const ShardedParameterDims dims,
                                shardParameters(*train, train_labels, coord.stage(), mesh.dp(), coord[kDataAxis]));
        CLEAVE_TRY(gatherShardedParameters(*eval, eval_labels, coord.stage(), dims, mesh.dp(), coord[kDataAxis]));
      }
      std::optional<ProgramGraph> programs[2];
      CLEAVE_TRY(runParallelTasks(2, [&](size_t task) -> Status {
        CLEAVE_ASSIGN_OR_RETURN(programs[task], task == 0 ? programOf("train", train.get(), train_labels, options.fusion)
                                                           : programOf("eval", eval.get(), eval_labels, options.fusion));
        return Status::ok();
      }));
      rank.programs = {std::move(*programs[0]), std::move(*programs[1])};
      owned.push_back(std::move(train));
      owned.push_back(std::move(eval));
    } else {
      CLEAVE_ASSIGN_OR_RETURN(Graph infer_graph, devicePart(forward, coord, nullptr, options.microbatches));
      auto infer = std::make_unique<Graph>(std::move(infer_graph));
      std::vector<PipelineNodeLabel> labels = labelPipelineNodes(*infer, coord.stage(), options.microbatches);
      CLEAVE_ASSIGN_OR_RETURN(ProgramGraph infer_program, programOf("infer", infer.get(), labels, options.fusion,
                                                                                  {options.channels_last, options.winograd}));
      rank.programs = {std::move(infer_program)};
      owned.push_back(std::move(infer));
    }
    // Batch rows, split over dp (the partitioner's layout of data inputs and outputs): every data
    // input, and every output but a scalar (the loss).
    for (const ProgramGraph& program : rank.programs) {
      for (ValueId v : program.graph->inputs) rank.batch_split.insert(program.graph->values[v].name);
      for (ValueId v : program.graph->outputs)
        if (program.graph->values[v].type.rank() > 0) rank.batch_split.insert(program.graph->values[v].name);
    }
    return rank;
  };

  // The ranks built whatever their graphs turn out to hold, each stage's first (at dp 0, and tp 0
  // where tp ranks may share), or every rank (--zero without shared programs), are built in
  // parallel first; a stage's other ranks that need graphs of their own are built in rank order.
  const bool builds_every_rank = options.zero != 0 && !options.share_programs;
  struct BuiltRank {
    std::vector<std::unique_ptr<Graph>> owned;
    std::optional<RankGraphs> graphs;
  };
  std::vector<int> prebuilt_ranks;
  std::map<int, BuiltRank> prebuilt;  // by rank; the tasks fill entries made before they start
  for (int r = 0; r < mesh.size(); ++r) {
    const MeshCoord coord = mesh.coord(r);
    if (builds_every_rank || (coord[kDataAxis] == 0 && (!tp_may_share || coord[kTensorAxis] == 0))) {
      prebuilt_ranks.push_back(r);
      prebuilt[r];
    }
  }
  CLEAVE_TRY(runParallelTasks(prebuilt_ranks.size(), [&](size_t i) -> Status {
    BuiltRank& entry = prebuilt.at(prebuilt_ranks[i]);
    CLEAVE_ASSIGN_OR_RETURN(entry.graphs, buildRank(mesh.coord(prebuilt_ranks[i]), entry.owned));
    return Status::ok();
  }));

  std::map<int, size_t> built_at;  // rank whose graphs were built -> its entry in result.ranks
  std::set<int> stages_split_with_data;  // stages whose tp ranks hold graphs of their own
  std::set<int> replicas_hold_data;      // stages whose dp replicas do (--zero 3 of imported weights)
  for (int r = 0; r < mesh.size(); ++r) {
    MeshCoord coord = mesh.coord(r);
    MeshCoord first_coord = replicas_hold_data.count(coord.stage()) ? coord : coord.with(kDataAxis, 0);
    if (tp_may_share && !stages_split_with_data.count(coord.stage())) first_coord = first_coord.with(kTensorAxis, 0);
    auto first = built_at.find(mesh.rankOf(first_coord));
    if (!builds_every_rank && first != built_at.end()) {
      RankGraphs replica = result.ranks[first->second];
      replica.coord = coord;
      result.ranks.push_back(std::move(replica));
      continue;
    }
    built_at.emplace(r, result.ranks.size());
    std::optional<RankGraphs> built;
    if (auto pre = prebuilt.find(r); pre != prebuilt.end()) {
      for (auto& graph : pre->second.owned) result.owned.push_back(std::move(graph));
      built = std::move(pre->second.graphs);
    } else {
      CLEAVE_ASSIGN_OR_RETURN(built, buildRank(coord, result.owned));
    }
    RankGraphs& rank = *built;
    // A split parameter that carries its block's data keeps the stage's tp ranks apart.
    for (const ProgramGraph& program : rank.programs)
      for (const Param& param : program.graph->params)
        for (const Param::ShardStep& step : param.shard_steps)
          if (param.init.kind == "data")
            (step.axis == kTensorAxis ? stages_split_with_data : replicas_hold_data).insert(coord.stage());
    result.ranks.push_back(std::move(rank));
  }
  return result;
}

std::string mebibytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

// Every rank's planned arena must fit the device memory limit; the error names the fullest rank,
// what its arena holds, and the limit.
Status checkMemoryLimit(const planpb::Plan& plan, int64_t limit_bytes) {
  if (limit_bytes <= 0) return Status::ok();
  const planpb::RankPlan* fullest = nullptr;
  std::map<int, int> ranks_running;  // rank -> how many ranks run its programs (shared ones included)
  for (const auto& rank : plan.ranks()) ++ranks_running[rank.has_same_program_as() ? rank.same_program_as() : rank.rank()];
  int over = 0;
  for (const auto& rank : plan.ranks()) {
    if (isSharedRank(rank) || rank.arena_bytes() <= limit_bytes) continue;
    over += ranks_running[rank.rank()];
    if (!fullest || rank.arena_bytes() > fullest->arena_bytes()) fullest = &rank;
  }
  if (!fullest) return Status::ok();
  MemoryReport memory = memoryReport(*fullest);
  std::string ranks = plan.ranks_size() == 1 ? "the plan" : "rank " + std::to_string(fullest->rank());
  if (over > 1) ranks += " (the fullest of " + std::to_string(over) + " ranks over the limit)";
  return Status::badInput(
      ranks + " needs " + std::to_string(memory.arena_bytes) + " bytes (" + mebibytes(memory.arena_bytes) +
      ": parameters " + mebibytes(memory.param_bytes) + ", optimizer state " + mebibytes(memory.optimizer_state_bytes) +
      ", gradients and activations " + mebibytes(memory.activation_region_bytes) + "), over the memory limit of " +
      std::to_string(limit_bytes) + " bytes (" + mebibytes(limit_bytes) +
      ") per device; split it over more devices (--tp, --pp) or use a smaller --batch");
}

}  // namespace

// Interleaved 1F1B: the plan of pp x V stages, each stage's steps in the order its rank will run
// them, merged into pp ranks of V virtual stages each.
Expected<planpb::Plan> compileVirtualStages(const Graph& model, const CompileOptions& options) {
  const int v = options.virtual_stages;
  const std::string flag = "compile: --virtual-stages " + std::to_string(v);
  if (options.pp < 2)
    return Status::usage(flag + " interleaves several pipeline stages on each rank: it needs --pp 2 or more");
  if (options.schedule != "1f1b")
    return Status::usage(flag + " runs the interleaved 1F1B schedule: it takes --schedule 1f1b, not " +
                         options.schedule);
  if (options.microbatches % options.pp != 0)
    return Status::usage(flag + ": the interleaved schedule runs the microbatches in groups of --pp " +
                         std::to_string(options.pp) + ", so --microbatches (" + std::to_string(options.microbatches) +
                         ") must be a multiple of it");
  CompileOptions stages = options;
  stages.pp = options.pp * v;
  stages.stages_are_virtual = true;
  stages.memory_limit_bytes = 0;  // checked on the merged ranks
  CLEAVE_ASSIGN_OR_RETURN(planpb::Plan plan, compileModel(model, stages));
  auto merged = mergeVirtualStages(plan, options.pp, v);
  if (!merged) return merged.status().withContext(options.model_file + ": ");
  CLEAVE_TRY(validatePlan(*merged).withContext(options.model_file + ": virtual stages: "));
  CLEAVE_TRY(checkMemoryLimit(*merged, options.memory_limit_bytes).withContext(options.model_file + ": "));
  return merged;
}

Expected<planpb::Plan> compileModel(const Graph& model, const CompileOptions& options) {
  if (options.dp < 1 || options.tp < 1 || options.pp < 1 || options.microbatches < 1)
    return Status::usage("compile: --dp, --tp, --pp and --microbatches must be at least 1");
  if (options.zero != 0 && (!options.train || options.dp < 2))
    return Status::usage("compile: --zero " + std::to_string(options.zero) +
                         " shards the training state over data-parallel replicas: it needs --train and --dp 2 or more");
  if (options.sequence_parallel && options.tp < 2)
    return Status::usage("compile: --sequence-parallel splits the activations between tensor-parallel regions along "
                         "the sequence over the tp ranks: it needs --tp 2 or more");
  if (options.zero < 0 || options.zero > 3)
    return Status::usage("compile: --zero " + std::to_string(options.zero) + ": the ZeRO stages are 1, 2 and 3");
  if (options.virtual_stages > 1 && !options.stages_are_virtual) return compileVirtualStages(model, options);
  const DeviceMesh mesh = DeviceMesh::pipelineDataTensor(options.pp, options.dp, options.tp);
  // 1. Fix the shapes for the requested batch; a multi-device graph is built for one microbatch.
  auto shaped = modelAtBatch(model, options.model_at_batch, options.batch);
  if (!shaped) return shaped.status().withContext(options.model_file + ": ");
  Graph graph = std::move(*shaped);
  const int64_t global_batch = graph.inputs.empty() || graph.values[graph.inputs[0]].type.rank() == 0
                                   ? 0
                                   : graph.values[graph.inputs[0]].type.shape[0];
  if (options.microbatches > 1) {
    // At the whole batch, whose rows (at least 2) no unit dim can be mistaken for.
    if (Status apart = checkMicrobatchesComputeTheBatch(graph, options.microbatches); !apart)
      return apart.withContext(options.model_file + ": ");
    if (global_batch % (options.microbatches * options.dp) != 0)
      return Status::badInput(options.model_file + ": batch " + std::to_string(global_batch) +
                              " does not divide into " + std::to_string(options.dp) + " data-parallel shards x " +
                              std::to_string(options.microbatches) + " microbatches");
    auto micro = modelAtBatch(graph, options.model_at_batch, global_batch / options.microbatches);
    if (!micro) return micro.status().withContext(options.model_file + ": (microbatch of " +
                                                  std::to_string(global_batch / options.microbatches) + " rows) ");
    graph = std::move(*micro);
  }
  // The rewrites before autodiff and partitioning (model_rewrites.h).
  if (Status rewritten = rewriteModelForCompile(graph, options.fusion, options.tp); !rewritten)
    return rewritten.withContext(options.model_file + ": ");

  // 2. Build the programs' graphs: one device's, or every device's after partitioning.
  LoweringInput lowering;
  lowering.producer = options.producer;
  lowering.model_name = graph.name;
  lowering.model_file = options.model_file;
  lowering.schedule = options.schedule;
  lowering.mesh = mesh;
  lowering.microbatches = options.microbatches;
  lowering.global_batch = global_batch;
  lowering.share_programs = options.share_programs;
  TrainingGraphs training;
  Graph inference;
  DeviceGraphs devices;
  std::string logits_name;
  if (mesh.size() > 1 || options.microbatches > 1) {
    auto built = buildDeviceGraphs(graph, options, mesh, logits_name);
    if (!built) return built.status().withContext(options.model_file + ": ");
    devices = std::move(*built);
    lowering.ranks = std::move(devices.ranks);
  } else if (options.train) {
    CLEAVE_ASSIGN_OR_RETURN(training, buildTrainingGraphs(graph, options.training));
    logits_name = training.eval.values[training.eval.outputs[0]].name;
    if (options.fusion) {
      CLEAVE_TRY(fuseGraph(training.train));
      CLEAVE_TRY(fuseConvEpilogues(training.eval).status());
      CLEAVE_TRY(fuseGraph(training.eval));
    }
    lowering.programs = {{"train", &training.train}, {"eval", &training.eval}};
  } else {
    CLEAVE_ASSIGN_OR_RETURN(inference, buildInferenceGraph(graph));
    if (options.channels_last) CLEAVE_TRY(convertToChannelsLast(inference).status());
    if (options.winograd) CLEAVE_TRY(allowWinogradConvolutions(inference).status());
    if (options.fusion) {
      CLEAVE_TRY(fuseConvEpilogues(inference).status());
      CLEAVE_TRY(fuseGraph(inference));
    }
    lowering.programs = {{"infer", &inference}};
  }

  // 3. Lower to a plan and record what the runtime needs to feed and read it.
  CLEAVE_ASSIGN_OR_RETURN(planpb::Plan plan, lowerToPlan(lowering));
  // The whole model's limits (with its loss, which reads the labels), for inputs a device's graph
  // reads only through a vocabulary-parallel lookup (buildDeviceGraphs read them already).
  std::map<std::string, int64_t> model_limits = std::move(devices.model_limits);
  if (lowering.ranks.empty() && options.train) {
    CLEAVE_ASSIGN_OR_RETURN(Graph with_loss, buildLossGraph(graph, options.training));
    model_limits = valueLimits(with_loss);
  } else if (lowering.ranks.empty()) {
    model_limits = valueLimits(graph);
  }
  for (auto& rank : *plan.mutable_ranks()) {
    const std::vector<ProgramGraph>& programs =
        lowering.ranks.empty() ? lowering.programs : lowering.ranks[rank.rank()].programs;
    for (auto& program : *rank.mutable_programs())
      for (const auto& entry : programs)
        if (entry.name == program.name()) setValueLimits(*entry.graph, model_limits, program);
  }
  if (options.train) describeTraining(options, logits_name, plan);
  plan.mutable_strategy()->set_zero(options.zero);
  plan.mutable_strategy()->set_sequence_parallel(options.sequence_parallel);
  CLEAVE_TRY(checkMemoryLimit(plan, options.memory_limit_bytes).withContext(options.model_file + ": "));
  return plan;
}

}  // namespace cleave
