// Loss heads: softmax cross-entropy over class labels, or mean squared error against targets.
#include "passes/training/loss_head.h"

namespace cleave {
namespace {

std::string outputNames(const Graph& graph) {
  std::string names;
  for (ValueId v : graph.outputs) names += (names.empty() ? "'%" : ", '%") + graph.values[v].name + "'";
  return names.empty() ? "none" : names;
}

// The output the loss reads: the one named `output_name`, or the only float output.
Expected<ValueId> findLossInput(const Graph& graph, std::string_view output_name) {
  if (!output_name.empty()) {
    for (ValueId v : graph.outputs)
      if (graph.values[v].name == output_name) return v;
    return Status::badInput("loss: the model has no output '%" + std::string(output_name) +
                            "' (outputs: " + outputNames(graph) + ")");
  }
  std::vector<ValueId> float_outputs;
  for (ValueId v : graph.outputs)
    if (isFloat(graph.values[v].type.dtype)) float_outputs.push_back(v);
  if (float_outputs.size() != 1)
    return Status::badInput("loss: the model has " + std::to_string(float_outputs.size()) +
                            " float outputs (outputs: " + outputNames(graph) + "); name the one the loss reads");
  return float_outputs[0];
}

Status requireFreeName(const Graph& graph, std::string_view name, std::string_view role) {
  if (graph.findValue(name) == kNoValue) return Status::ok();
  return Status::badInput("loss: the model already has a value named '%" + std::string(name) +
                          "', the name the loss head gives " + std::string(role));
}

}  // namespace

Expected<LossKind> parseLossKind(std::string_view text) {
  if (text == "softmax_cross_entropy") return LossKind::kSoftmaxCrossEntropy;
  if (text == "mse") return LossKind::kMse;
  return Status::usage("unknown loss '" + std::string(text) + "' (losses: softmax_cross_entropy, mse)");
}

std::string_view lossKindName(LossKind kind) {
  return kind == LossKind::kSoftmaxCrossEntropy ? "softmax_cross_entropy" : "mse";
}

Expected<ValueId> attachLoss(Graph& graph, LossKind kind, std::string_view output_name) {
  // 1. The output the loss reads, and the names the head will add.
  CLEAVE_ASSIGN_OR_RETURN(ValueId prediction, findLossInput(graph, output_name));
  const TensorType prediction_type = graph.values[prediction].type;
  const std::string_view reference_name =
      kind == LossKind::kSoftmaxCrossEntropy ? kLabelsInputName : kTargetsInputName;
  CLEAVE_TRY(requireFreeName(graph, reference_name, "its input"));
  CLEAVE_TRY(requireFreeName(graph, kLossValueName, "the loss"));
  // 2. The input holding labels (the prediction's shape without the class dim) or targets.
  TensorType reference_type = prediction_type;
  if (kind == LossKind::kSoftmaxCrossEntropy) {
    if (prediction_type.rank() < 1)
      return Status::badInput("loss: softmax_cross_entropy needs logits with a class dim, but '%" +
                              graph.values[prediction].name + "' is " + prediction_type.str());
    reference_type = TensorType{DType::kI64, Shape(prediction_type.shape.begin(), prediction_type.shape.end() - 1)};
  }
  CLEAVE_ASSIGN_OR_RETURN(ValueId reference, graph.addInput(std::string(reference_name), reference_type));
  // 3. The loss node, located at the prediction's producer so errors point into the model.
  int32_t producer = graph.values[prediction].producer;
  SourceLoc loc = producer >= 0 ? graph.nodes[producer].loc : SourceLoc{};
  OpId op = kind == LossKind::kSoftmaxCrossEntropy ? OpId::softmax_cross_entropy : OpId::mse;
  auto loss = graph.addNode(op, {prediction, reference}, {}, loc, {std::string(kLossValueName)});
  if (!loss) return loss.status().withContext("loss: ");
  graph.outputs = {(*loss)[0]};
  return (*loss)[0];
}

}  // namespace cleave
