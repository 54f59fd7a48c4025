// The compile pipeline `cleave compile` runs: model graph -> shapes fixed -> (training) -> plan.
#include "passes/compile_pipeline.h"

#include "ir/plan.pb.h"
#include "passes/lower_to_plan.h"
#include "passes/optimizer.h"
#include "passes/pass_manager.h"

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

}  // namespace

Expected<planpb::Plan> compileModel(const Graph& model, const CompileOptions& options) {
  if (options.dp * options.tp * options.pp != 1 || options.microbatches != 1)
    return Status::usage("compile: --dp/--tp/--pp and --microbatches above 1 are not built yet (see issue 5)");
  // 1. Fix the shapes for the requested batch.
  Graph graph = model;
  Status shaped = fixShapes(graph, options.batch);
  if (!shaped) return shaped.withContext(options.model_file + ": ");

  // 2. Build the programs' graphs.
  LoweringInput lowering;
  lowering.producer = options.producer;
  lowering.model_name = graph.name;
  lowering.model_file = options.model_file;
  lowering.schedule = options.schedule;
  lowering.global_batch = graph.inputs.empty() || graph.values[graph.inputs[0]].type.rank() == 0
                              ? 0
                              : graph.values[graph.inputs[0]].type.shape[0];
  TrainingGraphs training;
  Graph inference;
  if (options.train) {
    CLEAVE_ASSIGN_OR_RETURN(training, buildTrainingGraphs(graph, options.training));
    lowering.programs = {{"train", &training.train}, {"eval", &training.eval}};
  } else {
    CLEAVE_ASSIGN_OR_RETURN(inference, buildInferenceGraph(graph));
    lowering.programs = {{"infer", &inference}};
  }

  // 3. Lower to one rank's plan and record what the runtime needs to feed and read it.
  CLEAVE_ASSIGN_OR_RETURN(planpb::Plan plan, lowerToPlan(lowering));
  for (auto& rank : *plan.mutable_ranks())
    for (auto& program : *rank.mutable_programs())
      for (const auto& entry : lowering.programs)
        if (entry.name == program.name()) setValueLimits(*entry.graph, program);
  if (options.train) {
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
    info->set_logits_output(training.eval.values[training.eval.outputs[0]].name);
    info->set_labels_input(options.training.loss == LossKind::kSoftmaxCrossEntropy ? "labels" : "targets");
  }
  return plan;
}

}  // namespace cleave
