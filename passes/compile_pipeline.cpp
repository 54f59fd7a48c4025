// The compile pipeline `cleave compile` runs: model graph -> shapes fixed -> (training) -> plan.
#include "passes/compile_pipeline.h"

#include <memory>

#include "ir/plan.pb.h"
#include "passes/gradient_buckets.h"
#include "passes/lower_to_plan.h"
#include "passes/optimizer.h"
#include "passes/pass_manager.h"
#include "passes/spmd_partitioner.h"

namespace cleave {
namespace {

// The values an integer input may take, read off its users: a gather's indexed dim, or the class
// count of the loss that reads it as labels. 0 when no user tells.
int64_t valueLimit(const Graph& graph, ValueId input, const std::vector<int32_t>& users) {
  for (int32_t user : users) {
    const Node& node = graph.nodes[user];
    const TensorType& first = graph.values[node.operands[0]].type;
    if (node.op == OpId::gather && node.operands[1] == input) {
      int64_t axis = normalizeAxis(OpContext{opDef(node.op), {}, {}, node.attrs}.getInt("axis"), first.rank());
      if (axis >= 0) return first.shape[axis];
    }
    if (node.op == OpId::softmax_cross_entropy && node.operands[1] == input && first.rank() > 0)
      return first.shape.back();
  }
  return 0;
}

void setValueLimits(const Graph& graph, planpb::Program& program) {
  std::vector<std::vector<int32_t>> users = graph.computeUsers();
  for (auto& input : *program.mutable_inputs()) {
    ValueId v = graph.findValue(input.name());
    if (v != kNoValue && isInteger(graph.values[v].type.dtype)) input.set_value_limit(valueLimit(graph, v, users[v]));
  }
}

Status fixShapes(Graph& graph, int64_t batch) {
  // The pass manager verifies the graph after every pass.
  std::string pipeline = "infer-shapes{batch=" + std::to_string(batch) + "}";
  CLEAVE_ASSIGN_OR_RETURN(Pipeline passes, parsePipeline(pipeline));
  return PassManager(std::move(passes)).run(graph);
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
  info->set_logits_output(logits_name);
  info->set_labels_input(options.training.loss == LossKind::kSoftmaxCrossEntropy ? "labels" : "targets");
}

// The graphs of every device of a multi-device plan (dp x tp; pipeline stages come with issue 5's pipeline part).
struct DeviceGraphs {
  std::vector<std::unique_ptr<Graph>> owned;
  std::vector<RankGraphs> ranks;
};

Expected<DeviceGraphs> partitionProgramGraphs(const Graph& graph, const CompileOptions& options, const DeviceMesh& mesh,
                                              std::string& logits_name) {
  Graph forward;
  if (options.train) {
    CLEAVE_ASSIGN_OR_RETURN(forward, buildLossGraph(graph, options.training));
    logits_name = forward.values[forward.outputs[1]].name;
  } else {
    CLEAVE_ASSIGN_OR_RETURN(forward, buildInferenceGraph(graph));
  }
  DeviceGraphs result;
  for (int r = 0; r < mesh.size(); ++r) {
    MeshCoord coord = mesh.coordOf(r);
    auto partitioned = partitionForDevice(forward, mesh, coord);
    if (!partitioned) return partitioned.status().withContext(options.model_file + ": ");
    RankGraphs rank{coord, {}, partitioned->batch_split};
    if (options.train) {
      auto train = std::make_unique<Graph>(partitioned->graph);
      CLEAVE_TRY(appendTrainingStep(*train, options.training, [&](Graph& g) {
        return bucketGradientAllReduces(g, options.bucket_bytes);
      }));
      auto eval = std::make_unique<Graph>(std::move(partitioned->graph));
      std::swap(eval->outputs[0], eval->outputs[1]);  // [logits, loss], as the one-device eval program
      rank.programs = {{"train", train.get()}, {"eval", eval.get()}};
      result.owned.push_back(std::move(train));
      result.owned.push_back(std::move(eval));
    } else {
      auto infer = std::make_unique<Graph>(std::move(partitioned->graph));
      rank.programs = {{"infer", infer.get()}};
      result.owned.push_back(std::move(infer));
    }
    result.ranks.push_back(std::move(rank));
  }
  return result;
}

}  // namespace

Expected<planpb::Plan> compileModel(const Graph& model, const CompileOptions& options) {
  const DeviceMesh mesh{options.dp, options.tp, options.pp};
  if (options.dp < 1 || options.tp < 1 || options.pp < 1 || options.microbatches < 1)
    return Status::usage("compile: --dp, --tp, --pp and --microbatches must be at least 1");
  if (options.pp > 1 || options.microbatches > 1)
    return Status::usage("compile: pipeline parallelism (--pp, --microbatches) is not built yet (see issue 5)");
  // 1. Fix the shapes for the requested batch.
  Graph graph = model;
  Status shaped = fixShapes(graph, options.batch);
  if (!shaped) return shaped.withContext(options.model_file + ": ");

  // 2. Build the programs' graphs: one device's, or every device's after partitioning.
  LoweringInput lowering;
  lowering.producer = options.producer;
  lowering.model_name = graph.name;
  lowering.model_file = options.model_file;
  lowering.schedule = options.schedule;
  lowering.mesh = mesh;
  lowering.microbatches = options.microbatches;
  lowering.global_batch = graph.inputs.empty() || graph.values[graph.inputs[0]].type.rank() == 0
                              ? 0
                              : graph.values[graph.inputs[0]].type.shape[0];
  TrainingGraphs training;
  Graph inference;
  DeviceGraphs devices;
  std::string logits_name;
  if (mesh.size() > 1) {
    CLEAVE_ASSIGN_OR_RETURN(devices, partitionProgramGraphs(graph, options, mesh, logits_name));
    lowering.ranks = devices.ranks;
  } else if (options.train) {
    CLEAVE_ASSIGN_OR_RETURN(training, buildTrainingGraphs(graph, options.training));
    lowering.programs = {{"train", &training.train}, {"eval", &training.eval}};
    logits_name = training.eval.values[training.eval.outputs[0]].name;
  } else {
    CLEAVE_ASSIGN_OR_RETURN(inference, buildInferenceGraph(graph));
    lowering.programs = {{"infer", &inference}};
  }

  // 3. Lower to a plan and record what the runtime needs to feed and read it.
  CLEAVE_ASSIGN_OR_RETURN(planpb::Plan plan, lowerToPlan(lowering));
  for (auto& rank : *plan.mutable_ranks()) {
    const std::vector<ProgramGraph>& programs =
        lowering.ranks.empty() ? lowering.programs : lowering.ranks[rank.rank()].programs;
    for (auto& program : *rank.mutable_programs())
      for (const auto& entry : programs)
        if (entry.name == program.name()) setValueLimits(*entry.graph, program);
  }
  if (options.train) describeTraining(options, logits_name, plan);
  return plan;
}

}  // namespace cleave
