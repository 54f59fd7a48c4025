// The backward pass of one pipeline stage: seeded autodiff with cotangents received from the next stage.
#include "passes/partition/pipeline_backward.h"

#include <memory>
#include <string>
#include <vector>

#include "ir/device_mesh.h"
#include "ir/gradient.h"
#include "passes/training/autodiff.h"
#include "passes/partition/microbatching.h"

namespace cleave {
namespace {

// A forward message of the stage graph: its node's operand (send) or result (recv), peer and tag.
struct Message {
  ValueId value = kNoValue;
  int64_t peer_stage = 0;
  int64_t tag = 0;
};

int64_t intAttr(const Node& node, const char* name) {
  auto it = node.attrs.find(name);
  const int64_t* value = it == node.attrs.end() ? nullptr : std::get_if<int64_t>(&it->second);
  return value ? *value : -1;
}

// The transfer of `transfers` that forward message tag `tag` belongs to, or nullptr.
const StageTransfer* findTransfer(const std::vector<StageTransfer>& transfers, int64_t tag, int num_microbatches) {
  for (const StageTransfer& transfer : transfers)
    if (transfer.tag == tagTransfer(tag, num_microbatches)) return &transfer;
  return nullptr;
}

// The forward sends (to later stages) and receives (from earlier ones) whose transfers carry a gradient.
Status findGradientMessages(const Graph& graph, const StageBoundary& boundary, int num_microbatches,
                            std::vector<Message>& sends, std::vector<Message>& recvs) {
  for (const Node& node : graph.nodes) {
    if (node.op != OpId::send && node.op != OpId::recv) continue;
    Message message{node.op == OpId::send ? node.operands[0] : node.results[0], intAttr(node, "peer_stage"),
                    intAttr(node, "tag")};
    const bool forward_send = node.op == OpId::send && message.peer_stage > boundary.stage;
    const bool forward_recv = node.op == OpId::recv && message.peer_stage < boundary.stage;
    if ((!forward_send && !forward_recv) || isGradientTag(message.tag)) continue;
    const StageTransfer* transfer =
        findTransfer(forward_send ? boundary.sends : boundary.recvs, message.tag, num_microbatches);
    if (!transfer)
      return Status::internal(nodeContext(graph, node) + "tag " + std::to_string(message.tag) +
                              " belongs to no transfer of stage " + std::to_string(boundary.stage));
    if (transfer->carries_gradient) (forward_send ? sends : recvs).push_back(message);
  }
  return Status::ok();
}

// Zeros of `type`: a scalar zero expanded.
Expected<ValueId> zerosOf(Graph& graph, const TensorType& type, const std::string& name) {
  CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> zero,
                          graph.addNode(OpId::constant, {}, {{"value", scalarTensor(0.0, type.dtype)}}));
  CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> zeros,
                          graph.addNode(OpId::expand, {zero[0]}, {{"shape", type.shape}}, {}, {name}));
  return zeros[0];
}

}  // namespace

Status appendPipelineBackward(Graph& graph, const StageBoundary& boundary, int num_microbatches) {
  if (num_microbatches < 1)
    return Status::usage("pipeline backward: the number of microbatches must be at least 1, got " +
                         std::to_string(num_microbatches));
  std::vector<Message> sends, recvs;
  CLEAVE_TRY(findGradientMessages(graph, boundary, num_microbatches, sends, recvs));
  // 1. Seeds: the loss on the last stage; each sent value's cotangent, received from its stage.
  SeededBackwardOptions options;
  if (boundary.stage == boundary.num_stages - 1) {
    if (graph.outputs.empty())
      return Status::badInput("pipeline backward: the last stage's graph '" + graph.name + "' has no loss output");
    options.seeds.push_back({graph.outputs[0], kNoValue});
  }
  for (const Message& send : sends) {
    const Value value = graph.values[send.value];  // a copy: adding nodes grows graph.values
    AttrMap attrs = {{"peer_stage", send.peer_stage},
                     {"tag", gradientTag(send.tag)},
                     {"shape", value.type.shape},
                     {"dtype", std::string(dtypeName(value.type.dtype))}};
    SourceLoc loc = value.producer >= 0 ? graph.nodes[value.producer].loc : SourceLoc{};
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> cotangent,
                            graph.addNodeWithTypes(OpId::recv, {}, std::move(attrs), std::move(loc),
                                                   {graph.uniqueName(value.name + ".cotangent")}, {value.type}));
    options.seeds.push_back({send.value, cotangent[0]});
  }
  // 2. The backward pass, with respect to the parameters and the received values.
  for (const Message& recv : recvs) options.wrt_values.push_back(recv.value);
  CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> gradients, appendSeededBackward(graph, options));
  // 3. Each received value's gradient goes back to the stage that sent it.
  for (size_t k = 0; k < recvs.size(); ++k) {
    ValueId gradient = gradients[k];
    const Value value = graph.values[recvs[k].value];  // a copy: adding nodes grows graph.values
    if (gradient == kNoValue) {
      CLEAVE_ASSIGN_OR_RETURN(gradient, zerosOf(graph, value.type, graph.uniqueName(value.name + ".grad")));
    }
    AttrMap attrs = {{"peer_stage", recvs[k].peer_stage}, {"tag", gradientTag(recvs[k].tag)}};
    CLEAVE_TRY(graph.addNodeWithTypes(OpId::send, {gradient}, std::move(attrs), {}, {}, {}).status());
  }
  return Status::ok();
}

Status sumSharedGradients(Graph& graph, const StageBoundary& boundary) {
  for (const SharedParameter& shared : boundary.shared) {
    ValueId param = graph.findValue(shared.name);
    if (param == kNoValue || !graph.findParam(param)) continue;  // this device's part does not read it
    const TensorType type = graph.values[param].type;
    const std::string name = gradientName(shared.name);
    ValueId grad = graph.findValue(name);
    if (grad == kNoValue) {  // nothing on this stage reaches the loss through it: it adds zeros
      auto zero = std::make_shared<const TensorData>(
          TensorData{TensorType{type.dtype, {}}, std::vector<uint8_t>(static_cast<size_t>(dtypeSize(type.dtype)), 0)});
      CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> scalar,
                              graph.addNode(OpId::constant, {}, AttrMap{{"value", zero}}, {}, {name + ".zero"}));
      CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> zeros,
                              graph.addNode(OpId::expand, {scalar[0]}, {{"shape", type.shape}}, {}, {name + ".zeros"}));
      grad = zeros[0];
    } else {
      CLEAVE_TRY(graph.renameValue(grad, graph.uniqueName(name + ".stage")));
    }
    AttrMap attrs{{"axis", std::string(kPipelineAxis)},
                  {"group_size", static_cast<int64_t>(shared.stages.size())},
                  {"reduce", std::string("sum")},
                  {"stages", std::vector<int64_t>(shared.stages)}};
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> summed, graph.addNode(OpId::all_reduce, {grad}, std::move(attrs), {}, {name}));
    for (ValueId& output : graph.outputs)
      if (output == grad) output = summed[0];
  }
  return Status::ok();
}

}  // namespace cleave
