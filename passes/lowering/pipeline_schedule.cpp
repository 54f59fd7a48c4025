// Pipeline schedules (GPipe, 1F1B) and the ordering of a stage's nodes by schedule step.
#include "passes/lowering/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <utility>

#include "passes/partition/microbatching.h"
#include "passes/training/gradient_clipping.h"

namespace cleave {
namespace {

// Microbatch labels of values while labelling: one microbatch (>= 0), none, or several.
constexpr int kNoMicrobatch = -1;
constexpr int kSeveralMicrobatches = -2;

int combineMicrobatches(int a, int b) {
  if (a == kSeveralMicrobatches || b == kSeveralMicrobatches) return kSeveralMicrobatches;
  if (a == kNoMicrobatch) return b;
  if (b == kNoMicrobatch || a == b) return a;
  return kSeveralMicrobatches;
}

const int64_t* intAttr(const Node& node, const char* name) {
  auto it = node.attrs.find(name);
  return it == node.attrs.end() ? nullptr : std::get_if<int64_t>(&it->second);
}

const std::vector<int64_t>* intsAttr(const Node& node, const char* name) {
  auto it = node.attrs.find(name);
  return it == node.attrs.end() ? nullptr : std::get_if<std::vector<int64_t>>(&it->second);
}

// The microbatch whose rows `node` takes when it is unrollMicrobatches's slice of a graph input
// (rows [m·b, (m+1)·b) along dim 0), else kNoMicrobatch.
int inputSliceMicrobatch(const Graph& graph, const Node& node, int num_microbatches) {
  if (node.op != OpId::slice || !graph.isInput(node.operands[0])) return kNoMicrobatch;
  const std::vector<int64_t>* starts = intsAttr(node, "starts");
  const std::vector<int64_t>* axes = intsAttr(node, "axes");
  const Shape& rows = graph.values[node.results[0]].type.shape;
  if (!starts || starts->size() != 1 || (axes && *axes != std::vector<int64_t>{0}) || rows.empty() || rows[0] <= 0)
    return kNoMicrobatch;
  const int64_t m = (*starts)[0] / rows[0];
  return m >= 0 && m < num_microbatches ? static_cast<int>(m) : kNoMicrobatch;
}

// Per node: its microbatch (>= 0), kNoMicrobatch or kSeveralMicrobatches.
std::vector<int> nodeMicrobatches(const Graph& graph, int num_microbatches) {
  std::vector<int> of_value(graph.values.size(), kNoMicrobatch);
  std::vector<int> of_node(graph.nodes.size(), kNoMicrobatch);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = graph.nodes[i];
    int microbatch = inputSliceMicrobatch(graph, node, num_microbatches);
    const int64_t* tag = intAttr(node, "tag");
    if (node.op == OpId::recv && tag) microbatch = tagMicrobatch(*tag, num_microbatches);
    if (microbatch == kNoMicrobatch)
      for (ValueId v : node.operands) microbatch = combineMicrobatches(microbatch, of_value[v]);
    of_node[i] = microbatch;
    for (ValueId r : node.results) of_value[r] = microbatch;
  }
  return of_node;
}


}  // namespace

std::vector<bool> forwardNodes(const Graph& graph, int stage) {
  std::vector<bool> needed(graph.values.size(), false), forward(graph.nodes.size(), false);
  for (ValueId v : graph.outputs)
    if (graph.values[v].name != kGradNormOutput) needed[v] = true;
  for (size_t i = graph.nodes.size(); i-- > 0;) {
    const Node& node = graph.nodes[i];
    const int64_t* peer = intAttr(node, "peer_stage");
    bool is_forward = node.op == OpId::send && peer && *peer > stage;
    for (ValueId r : node.results) is_forward = is_forward || needed[r];
    if (!is_forward) continue;
    forward[i] = true;
    for (ValueId v : node.operands) needed[v] = true;
  }
  return forward;
}

Expected<PipelineScheduleKind> parsePipelineSchedule(std::string_view name) {
  if (name == "gpipe") return PipelineScheduleKind::kGPipe;
  if (name == "1f1b") return PipelineScheduleKind::kOneForwardOneBackward;
  return Status::usage("unknown pipeline schedule '" + std::string(name) + "' (expected gpipe or 1f1b)");
}

std::string_view pipelineScheduleName(PipelineScheduleKind kind) {
  return kind == PipelineScheduleKind::kGPipe ? "gpipe" : "1f1b";
}

std::vector<PipelineStep> stageSchedule(PipelineScheduleKind kind, int stage, int num_stages, int num_microbatches) {
  std::vector<PipelineStep> steps;
  auto forward = [&](int m) { steps.push_back({false, m}); };
  auto backward = [&](int m) { steps.push_back({true, m}); };
  if (kind == PipelineScheduleKind::kGPipe) {
    for (int m = 0; m < num_microbatches; ++m) forward(m);
    for (int m = 0; m < num_microbatches; ++m) backward(m);
    return steps;
  }
  // 1F1B: 1. warm-up forwards; 2. one forward then one backward while forwards remain; 3. the rest.
  const int warm_up = std::clamp(num_stages - stage - 1, 0, num_microbatches);
  for (int m = 0; m < warm_up; ++m) forward(m);
  for (int m = warm_up; m < num_microbatches; ++m) {
    forward(m);
    backward(m - warm_up);
  }
  for (int m = num_microbatches - warm_up; m < num_microbatches; ++m) backward(m);
  return steps;
}

std::vector<InterleavedStep> interleavedSchedule(int stage, int num_stages, int num_chunks, int num_microbatches) {
  const int total = num_microbatches * num_chunks;  // steps of each direction on this rank
  const int group = num_stages * num_chunks;
  // The k-th forward (or backward) step of the rank: its chunk and microbatch.
  auto stepOf = [&](int k, bool backward) {
    int chunk = (k % group) / num_stages;
    if (backward) chunk = num_chunks - 1 - chunk;
    return InterleavedStep{chunk, PipelineStep{backward, (k / group) * num_stages + k % num_stages}};
  };
  int warmup = num_microbatches == num_stages ? total
                                                : std::min(total, (num_stages - stage - 1) * 2 + (num_chunks - 1) * num_stages);
  std::vector<InterleavedStep> steps;
  steps.reserve(2 * static_cast<size_t>(total));
  for (int k = 0; k < warmup; ++k) steps.push_back(stepOf(k, false));
  for (int k = 0; k < total - warmup; ++k) {
    steps.push_back(stepOf(warmup + k, false));
    steps.push_back(stepOf(k, true));
  }
  for (int k = total - warmup; k < total; ++k) steps.push_back(stepOf(k, true));
  return steps;
}

std::vector<PipelineStep> virtualStageSchedule(int virtual_stage, int num_stages, int num_chunks, int num_microbatches) {
  std::vector<PipelineStep> steps;
  for (const InterleavedStep& step :
       interleavedSchedule(virtual_stage % num_stages, num_stages, num_chunks, num_microbatches))
    if (step.chunk == virtual_stage / num_stages) steps.push_back(step.step);
  return steps;
}

int microbatchesInFlight(PipelineScheduleKind kind, int stage, int num_stages, int num_microbatches) {
  if (kind == PipelineScheduleKind::kGPipe) return num_microbatches;
  return std::clamp(num_stages - stage, 1, std::max(num_microbatches, 1));
}

std::vector<PipelineNodeLabel> labelPipelineNodes(const Graph& graph, int stage, int num_microbatches) {
  const std::vector<int> microbatches = nodeMicrobatches(graph, num_microbatches);
  const std::vector<bool> forward = forwardNodes(graph, stage);
  std::vector<PipelineNodeLabel> labels(graph.nodes.size());
  for (size_t i = 0; i < labels.size(); ++i)
    if (microbatches[i] >= 0) labels[i] = {microbatches[i], !forward[i]};
  return labels;
}

Expected<std::vector<PipelineNodeLabel>> orderNodesBySchedule(Graph& graph, int stage, int num_microbatches,
                                                              std::span<const PipelineStep> schedule) {
  // 1. Each node's wished-for position: -1 before every step, or a step's index.
  const std::vector<PipelineNodeLabel> labels = labelPipelineNodes(graph, stage, num_microbatches);
  const std::vector<int> microbatches = nodeMicrobatches(graph, num_microbatches);
  std::map<std::pair<bool, int>, int> step_index;
  for (size_t k = 0; k < schedule.size(); ++k) step_index.emplace(std::pair(schedule[k].backward, schedule[k].microbatch), k);
  std::vector<int> position(graph.nodes.size());
  // Where a node goes within its step: nodes of the step keep their program order (anchor: their
  // own index, depth 0); a node combining microbatches (but a collective) goes right after the last
  // of its operands (that operand's anchor, one level deeper), so a microbatch's gradient is added
  // into the sum as soon as it exists and freed, not kept until the step's end.
  struct Place {
    int position;
    size_t anchor;
    int depth;
    size_t index;
    auto operator<=>(const Place&) const = default;
  };
  std::vector<Place> place(graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const bool combining = microbatches[i] == kNoMicrobatch || microbatches[i] == kSeveralMicrobatches;
    if (combining) {
      // Nodes combining microbatches (gradient sums, the loss's mean) run as soon as their
      // operands exist (step 2).
      position[i] = -1;
    } else {
      auto it = step_index.find({labels[i].backward, labels[i].microbatch});
      if (it == step_index.end())
        return Status::internal(nodeContext(graph, graph.nodes[i]) + "belongs to the " +
                                (labels[i].backward ? "backward" : "forward") + " step of microbatch " +
                                std::to_string(labels[i].microbatch) + ", which the schedule of stage " +
                                std::to_string(stage) + " does not have");
      position[i] = it->second;
    }
    // 2. Never before a node it uses (program order is topological, so producers are final already).
    for (ValueId v : graph.nodes[i].operands) {
      int32_t producer = graph.values[v].producer;
      if (producer >= 0) position[i] = std::max(position[i], position[producer]);
    }
    place[i] = Place{position[i], i, 0, i};
    // Collectives keep their program order: moved ahead of a send another stage waits for, one
    // could wait for that stage forever.
    if (!combining || opDef(graph.nodes[i].op).isCommunication()) continue;
    bool after_operand = false;
    for (ValueId v : graph.nodes[i].operands) {
      int32_t producer = graph.values[v].producer;
      if (producer < 0 || position[producer] != position[i]) continue;
      Place after{position[i], place[producer].anchor, place[producer].depth + 1, i};
      if (!after_operand || after > place[i]) place[i] = after;
      after_operand = true;
    }
  }
  // 3. Sort by place (step, then program order with combining nodes after their last operand), then renumber producers.
  std::vector<size_t> order(graph.nodes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return place[a] < place[b]; });
  std::vector<Node> nodes;
  std::vector<PipelineNodeLabel> ordered_labels;
  for (size_t i : order) {
    nodes.push_back(std::move(graph.nodes[i]));
    // Nodes combining microbatches run inside a step but belong to none.
    ordered_labels.push_back(position[i] >= 0 && microbatches[i] >= 0 ? PipelineNodeLabel{schedule[position[i]].microbatch, schedule[position[i]].backward}
                                       : PipelineNodeLabel{});
  }
  graph.nodes = std::move(nodes);
  graph.compact();
  return ordered_labels;
}

}  // namespace cleave
