// Automatic parallelization: the model profile per tp degree, the analytic estimate per strategy, and the pruned search.
#include "passes/partition/strategy_search.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "passes/training/autodiff.h"
#include "ir/device_mesh.h"
#include "ir/parallel_tasks.h"
#include "passes/core/model_rewrites.h"
#include "passes/lowering/lower_to_plan.h"
#include "passes/partition/microbatch_rows.h"
#include "passes/partition/spmd_partitioner.h"
#include "passes/training/recompute.h"

namespace cleave {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// A figure that grows linearly with the microbatch rows: at_zero + per_row x rows (never below 0).
struct Affine {
  double at_zero = 0;
  double per_row = 0;

  double at(double rows) const { return std::max(0.0, at_zero + per_row * rows); }
  // The line through (rows1, value1) and (rows2, value2).
  static Affine fit(double rows1, double value1, double rows2, double value2) {
    double slope = (value2 - value1) / (rows2 - rows1);
    return {value1 - slope * rows1, slope};
  }
};

// One node of a device's forward graph as the estimate sees it.
struct ProfileNode {
  bool kernel = false;  // runs a kernel (roofline time); collectives and grad_all_reduce do not
  Affine flops, bytes;  // the kernel's cost rule
  DType dtype = DType::kF32;
  double efficiency = 1;  // the device's kernel efficiency for the node's op
  std::optional<CommKind> forward_comm, backward_comm;  // tp collectives in each pass
  int group_size = 1;
  Affine comm_bytes;         // the full buffer each collective moves
  Affine activation_bytes[3];  // results kept for the backward pass, per microbatch, by RecomputeMode
  bool recomputed[3] = {};     // copied into the backward pass, by RecomputeMode
  Affine result_bytes;       // all its results
  Affine cut_bytes;          // values a stage starting here receives from earlier stages
  double param_bytes = 0;    // parameters first used here (this device's blocks)
  double grad_bytes = 0;     // of them, trainable (their gradients)
  double optimizer_s = 0;    // the optimizer's updates of those trainable parameters
  std::string forward_name;  // its first result's name when the unpartitioned forward graph has it
};

// One tensor-parallel degree's profile: the nodes of one device's forward graph split over tp.
struct TpProfile {
  int tp = 1;
  bool sequence_parallel = false;  // partitioned as --sequence-parallel does (tp > 1)
  std::string infeasible;  // the partitioner's error, when it cannot split the model over tp
  std::vector<ProfileNode> nodes;
  LinkSpec tp_link;
};

int modeIndex(RecomputeMode mode) { return static_cast<int>(mode); }

// Prefix sums over the profile nodes at one (tp, microbatch rows, recompute mode): entry i covers nodes [0, i).
struct StageTable {
  std::vector<double> time;        // forward + backward + tp collectives of one microbatch
  std::vector<double> backward;    // backward pass (its kernels and collectives)
  std::vector<double> tp_comm;     // tp collectives, both passes
  std::vector<double> activation;  // activation bytes per microbatch
  std::vector<double> params, grads, optimizer;
  std::vector<double> cut_bytes;   // per node (not a prefix sum)
  double max_node_time = 0;
  double max_result_bytes = 0;     // the largest node's results: working memory any stage may need
  double max_param_bytes = 0;      // the largest node's parameters: what --zero 3 gathers at once
};


double totalBytes(const Graph& graph, const std::vector<ValueId>& values) {
  double bytes = 0;
  for (ValueId v : values) bytes += static_cast<double>(graph.values[v].type.bytes());
  return bytes;
}

std::vector<TensorType> typesOf(const Graph& graph, const std::vector<ValueId>& values) {
  std::vector<TensorType> types;
  for (ValueId v : values) types.push_back(graph.values[v].type);
  return types;
}

// The time of one optimizer update of a parameter of `type`.
double optimizerTime(const TensorType& type, const OptimizerSpec& optimizer, const CostModel& model) {
  const TensorType step{DType::kI64, {}};
  if (optimizer.kind == OptimizerKind::kAdamW) {
    std::vector<TensorType> operands = {type, type, type, type, step}, results = {type, type, type};
    return model.kernelTime(opDef(OpId::adamw_update), operands, results, AttrMap{});
  }
  bool momentum = optimizer.momentum != 0;
  std::vector<TensorType> operands = {type, type, step}, results = {type};
  AttrMap attrs = {{"lr", optimizer.lr}, {"momentum", optimizer.momentum}};
  if (momentum) {
    operands.push_back(type);
    results.push_back(type);
  }
  return model.kernelTime(opDef(OpId::sgd_update), operands, results, attrs);
}

// Optimizer state per parameter byte: SGD 0 (1 with momentum), AdamW 2.
double optimizerStatePerParam(const OptimizerSpec& optimizer) {
  if (optimizer.kind == OptimizerKind::kAdamW) return 2;
  return optimizer.momentum != 0 ? 1 : 0;
}

// Every divisor of n, increasing.
std::vector<int> divisorsOf(int64_t n) {
  std::vector<int> divisors;
  for (int64_t d = 1; d <= n && d <= std::numeric_limits<int>::max(); ++d)
    if (n % d == 0) divisors.push_back(static_cast<int>(d));
  return divisors;
}

// The ranks 0, stride, 2·stride, ... (count of them): one group of a mesh axis.
std::vector<int32_t> strideGroup(int count, int stride) {
  std::vector<int32_t> ranks;
  for (int i = 0; i < count; ++i) ranks.push_back(i * stride);
  return ranks;
}

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// What the backward pass of a forward graph reads under one recomputation mode.
struct BackwardReads {
  std::vector<bool> kept;        // per forward value: read by the backward pass (kept until then)
  std::vector<bool> recomputed;  // per forward node: copied into the backward pass
};

// The backward reads of `forward` under each mode of RecomputeMode (all but none only when asked):
// appendBackward's nodes come after the forward's, ids of forward values stay, and recomputation
// keeps the forward nodes first, in order.
Expected<std::array<BackwardReads, 3>> backwardReads(const Graph& forward, const std::vector<RecomputeMode>& modes) {
  if (forward.outputs.empty()) return Status::internal("strategy search: the forward graph has no loss output");
  Graph differentiated = forward;
  CLEAVE_TRY(appendBackward(differentiated, forward.outputs[0]));
  std::array<BackwardReads, 3> reads;
  for (RecomputeMode mode : {RecomputeMode::kNone, RecomputeMode::kSelective, RecomputeMode::kFull}) {
    BackwardReads& r = reads[modeIndex(mode)];
    r.kept.assign(forward.values.size(), false);
    r.recomputed.assign(forward.nodes.size(), false);
    if (mode != RecomputeMode::kNone && std::find(modes.begin(), modes.end(), mode) == modes.end()) continue;
    Graph recomputed;  // the differentiated graph as `mode` rewrites it (none: as it is)
    if (mode != RecomputeMode::kNone) {
      recomputed = differentiated;
      std::vector<bool> forward_nodes(recomputed.nodes.size(), false);
      std::fill_n(forward_nodes.begin(), forward.nodes.size(), true);
      CLEAVE_ASSIGN_OR_RETURN(RecomputeReport report, recomputeActivations(recomputed, mode, forward_nodes));
      for (int32_t n : report.copied_nodes) r.recomputed[n] = true;
    }
    const Graph& training = mode == RecomputeMode::kNone ? differentiated : recomputed;
    for (size_t n = forward.nodes.size(); n < training.nodes.size(); ++n)
      for (ValueId v : training.nodes[n].operands)
        if (static_cast<size_t>(v) < forward.values.size()) r.kept[v] = true;
  }
  return reads;
}

// Profiles one device's forward graph at two row counts (the same graph structure, so nodes pair
// up). `reads` says, per recomputation mode, the values the backward pass reads (whose storage a
// node keeps) and the nodes it copies (training).
Expected<std::vector<ProfileNode>> profileGraph(const Graph& at_rows1, double rows1, const Graph& at_rows2, double rows2,
                                                const std::array<BackwardReads, 3>& reads, const OptimizerSpec& optimizer,
                                                bool train, const CostModel& model,
                                                const std::unordered_set<std::string>& forward_names) {
  if (at_rows1.nodes.size() != at_rows2.nodes.size())
    return Status::internal("strategy search: the partitioned graph's nodes differ between batch sizes");
  const Graph& graph = at_rows1;
  const size_t num_values = graph.values.size();

  // 1. Each value's storage root (a view shares its operand's), whether it depends on a data
  //    input (only those travel between stages), and the last node using it or any of its views.
  std::vector<ValueId> root(num_values);
  for (size_t v = 0; v < num_values; ++v) root[v] = static_cast<ValueId>(v);
  std::vector<bool> from_input(num_values, false);
  for (ValueId v : graph.inputs) from_input[v] = true;
  std::vector<int32_t> last_use(num_values, -1);
  for (int32_t n = 0; n < static_cast<int32_t>(graph.nodes.size()); ++n) {
    const Node& node = graph.nodes[n];
    bool depends = false;
    for (ValueId v : node.operands) {
      depends = depends || from_input[v];
      last_use[root[v]] = n;
    }
    for (ValueId r : node.results) {
      from_input[r] = depends;
      if (opDef(node.op).view && !node.operands.empty()) root[r] = root[node.operands[0]];
    }
  }

  // 2. The storages the backward pass reads (through any view of them). Inference keeps every
  //    result (a conservative bound of what is live at once).
  std::vector<bool> root_kept[3];
  for (int mode = 0; mode < 3; ++mode) {
    root_kept[mode].assign(num_values, !train);
    for (size_t v = 0; v < num_values && train; ++v)
      if (reads[mode].kept[v]) root_kept[mode][root[v]] = true;
  }

  // 3. The profile nodes: every node but views, in program order.
  std::vector<ProfileNode> nodes;
  std::vector<int32_t> unit_of_node(graph.nodes.size(), -1);
  std::vector<bool> param_seen(num_values, false);
  for (int32_t n = 0; n < static_cast<int32_t>(graph.nodes.size()); ++n) {
    const Node& node = graph.nodes[n];
    const Node& node2 = at_rows2.nodes[n];
    if (node.op != node2.op) return Status::internal("strategy search: partitioned graphs differ at node " + std::to_string(n));
    // Views move nothing forward; one whose gradient communicates (grad_all_reduce: plain tensor
    // parallelism's input to a column split) is a profile node for that.
    if (opDef(node.op).view && !opDef(node.op).gradient_communication) continue;
    ProfileNode unit;
    if (!node.results.empty() && forward_names.count(graph.values[node.results[0]].name))
      unit.forward_name = graph.values[node.results[0]].name;
    std::optional<CommKind> forward = opDef(node.op).communication;
    if (forward == CommKind::kSend || forward == CommKind::kRecv) forward.reset();  // stage boundaries, not collectives
    if (forward || node.op == OpId::grad_all_reduce) {
      unit.forward_comm = forward;
      unit.group_size = static_cast<int>(OpContext{opDef(node.op), {}, {}, node.attrs}.getInt("group_size"));
    } else {
      unit.kernel = true;
      std::vector<TensorType> operands1 = typesOf(graph, node.operands), results1 = typesOf(graph, node.results);
      std::vector<TensorType> operands2 = typesOf(at_rows2, node2.operands), results2 = typesOf(at_rows2, node2.results);
      OpCost cost1 = CostModel::kernelCost(opDef(node.op), operands1, results1, node.attrs);
      OpCost cost2 = CostModel::kernelCost(opDef(node2.op), operands2, results2, node2.attrs);
      unit.flops = Affine::fit(rows1, cost1.flops, rows2, cost2.flops);
      unit.bytes = Affine::fit(rows1, cost1.bytes, rows2, cost2.bytes);
      unit.dtype = arithmeticDType(operands1, results1);
      unit.efficiency = model.cluster().device.efficiency(node.op);
      if (node.op == OpId::shard_slice)
        unit.group_size = static_cast<int>(OpContext{opDef(node.op), {}, {}, node.attrs}.getInt("group_size"));
    }
    if (train) unit.backward_comm = gradientCommunication(opDef(node.op), node.attrs);
    if (unit.forward_comm || unit.backward_comm) {
      double full1 = std::max(totalBytes(graph, node.operands), totalBytes(graph, node.results));
      double full2 = std::max(totalBytes(at_rows2, node2.operands), totalBytes(at_rows2, node2.results));
      unit.comm_bytes = Affine::fit(rows1, full1, rows2, full2);
    }
    for (int mode = 0; mode < 3; ++mode) {
      double kept1 = 0, kept2 = 0;
      for (ValueId r : node.results)
        if (root_kept[mode][r]) {
          kept1 += static_cast<double>(graph.values[r].type.bytes());
          kept2 += static_cast<double>(at_rows2.values[r].type.bytes());
        }
      unit.activation_bytes[mode] = Affine::fit(rows1, kept1, rows2, kept2);
      unit.recomputed[mode] = train && reads[mode].recomputed[n];
    }
    unit.result_bytes = Affine::fit(rows1, totalBytes(graph, node.results), rows2, totalBytes(at_rows2, node2.results));
    for (ValueId v : node.operands) {
      ValueId r = root[v];
      const Param* param = graph.findParam(r);
      if (!param || param_seen[r]) continue;
      param_seen[r] = true;
      const TensorType& type = graph.values[r].type;
      unit.param_bytes += static_cast<double>(type.bytes());
      if (param->trainable && train) {
        unit.grad_bytes += static_cast<double>(type.bytes());
        unit.optimizer_s += optimizerTime(type, optimizer, model);
      }
    }
    unit_of_node[n] = static_cast<int32_t>(nodes.size());
    nodes.push_back(std::move(unit));
  }

  // 4. Bytes crossing into a stage that starts at each profile node: values computed from the
  //    data before it and used at or after it (a difference array over the cuts they span). The
  //    outputs of an inference graph are used at its end (the last stage returns them).
  if (!train)
    for (ValueId v : graph.outputs) last_use[root[v]] = static_cast<int32_t>(graph.nodes.size()) - 1;
  const int32_t num_units = static_cast<int32_t>(nodes.size());
  auto firstUnitFrom = [&](int32_t n) {  // the first profile node at or after graph node n
    while (n < static_cast<int32_t>(graph.nodes.size()) && unit_of_node[n] < 0) ++n;
    return n < static_cast<int32_t>(graph.nodes.size()) ? unit_of_node[n] : num_units;
  };
  std::vector<double> starts1(nodes.size() + 1, 0.0), starts2(nodes.size() + 1, 0.0);
  for (size_t v = 0; v < num_values; ++v) {
    const int32_t producer = graph.values[v].producer;
    // Data inputs go to the stages that use them; parameters and constants are never sent.
    if (root[v] != static_cast<ValueId>(v) || !from_input[v] || last_use[v] < 0 || producer < 0) continue;
    // It crosses the cuts before units first..last: after its producer, up to its last user.
    const int32_t first = firstUnitFrom(producer + 1), end = std::min(firstUnitFrom(last_use[v]) + 1, num_units);
    if (first >= end) continue;
    starts1[first] += static_cast<double>(graph.values[v].type.bytes());
    starts1[end] -= static_cast<double>(graph.values[v].type.bytes());
    starts2[first] += static_cast<double>(at_rows2.values[v].type.bytes());
    starts2[end] -= static_cast<double>(at_rows2.values[v].type.bytes());
  }
  double running1 = 0, running2 = 0;
  for (size_t u = 0; u < nodes.size(); ++u) {
    running1 += starts1[u];
    running2 += starts2[u];
    nodes[u].cut_bytes = Affine::fit(rows1, running1, rows2, running2);
  }
  return nodes;
}

}  // namespace

std::string ParallelStrategy::str() const {
  return "dp " + std::to_string(dp) + " x tp " + std::to_string(tp) + " x pp " + std::to_string(pp) + ", " +
         std::to_string(microbatches) + (microbatches == 1 ? " microbatch, " : " microbatches, ") +
         std::string(pipelineScheduleName(schedule)) +
         (virtual_stages > 1 ? " interleaved over " + std::to_string(virtual_stages) + " virtual stages" : "") +
         (recompute == RecomputeMode::kNone ? "" : ", recompute " + std::string(recomputeModeName(recompute))) +
         (zero == 0 ? "" : ", zero " + std::to_string(zero)) + (sequence_parallel ? ", sequence parallel" : "");
}

struct StrategyEstimator::Impl {
  StrategySearchOptions options;
  CostModel model;
  int64_t global_batch = 0;
  std::string microbatches_refused;  // why the model cannot run in microbatches, or empty
  int64_t memory_limit = 0;
  std::map<std::pair<int, bool>, TpProfile> profiles;  // by tp degree and sequence parallelism
  mutable std::map<std::tuple<const TpProfile*, int64_t, RecomputeMode>, std::unique_ptr<StageTable>> tables;

  explicit Impl(const CostModel& cost_model) : model(cost_model) {}

  const TpProfile* profile(int tp, bool sequence_parallel) const {
    auto found = profiles.find({tp, sequence_parallel});
    return found == profiles.end() || !found->second.infeasible.empty() ? nullptr : &found->second;
  }

  // The prefix sums of one (profile, rows, recompute mode), built on first use.
  const StageTable& table(const TpProfile& profile, int64_t rows, RecomputeMode mode) const {
    auto& slot = tables[{&profile, rows, mode}];
    if (slot) return *slot;
    slot = std::make_unique<StageTable>();
    StageTable& t = *slot;
    const DeviceSpec& device = model.cluster().device;
    const size_t n = profile.nodes.size();
    for (auto* prefix : {&t.time, &t.backward, &t.tp_comm, &t.activation, &t.params, &t.grads, &t.optimizer})
      prefix->assign(n + 1, 0.0);
    t.cut_bytes.resize(n);
    const double r = static_cast<double>(rows);
    for (size_t i = 0; i < n; ++i) {
      const ProfileNode& node = profile.nodes[i];
      double forward =
          node.kernel ? rooflineTime(OpCost{node.flops.at(r), node.bytes.at(r)}, node.dtype, device, node.efficiency) : 0.0;
      double backward = options.train ? (node.recomputed[modeIndex(mode)] ? 3 : 2) * forward : 0.0;
      double comm = 0;
      if (node.forward_comm) comm += commTime(*node.forward_comm, node.group_size, node.comm_bytes.at(r), profile.tp_link);
      double backward_comm =
          node.backward_comm ? commTime(*node.backward_comm, node.group_size, node.comm_bytes.at(r), profile.tp_link) : 0;
      double time = forward + backward + comm + backward_comm;
      t.max_node_time = std::max(t.max_node_time, time);
      t.time[i + 1] = t.time[i] + time;
      t.backward[i + 1] = t.backward[i] + backward + backward_comm;
      t.tp_comm[i + 1] = t.tp_comm[i] + comm + backward_comm;
      t.activation[i + 1] = t.activation[i] + node.activation_bytes[modeIndex(mode)].at(r);
      t.params[i + 1] = t.params[i] + node.param_bytes;
      t.grads[i + 1] = t.grads[i] + node.grad_bytes;
      t.optimizer[i + 1] = t.optimizer[i] + node.optimizer_s;
      t.cut_bytes[i] = node.cut_bytes.at(r);
      t.max_result_bytes = std::max(t.max_result_bytes, node.result_bytes.at(r));
      t.max_param_bytes = std::max(t.max_param_bytes, node.param_bytes);
    }
    return t;
  }

  // Bytes per device of a stage holding nodes [first, last) with `in_flight` microbatches'
  // activations: parameters, optimizer state, gradients (two copies when there are several
  // microbatches: the running sum and the microbatch being differentiated), the activations the backward pass
  // reads, and working memory for the largest node's results and their gradients. Inference: the
  // parameters, one microbatch's results and the largest node's. ZeRO (taking every parameter's
  // rows to divide by dp): stage 1 keeps 1/dp of the optimizer state, stage 2 1/dp of the running
  // gradient sum, stage 3 1/dp of the parameters plus two of the largest node's whole (the one
  // being read and the one gathered ahead).
  double stageMemory(const StageTable& t, int first, int last, int in_flight, const ParallelStrategy& s) const {
    double params = t.params[last] - t.params[first];
    double activations = t.activation[last] - t.activation[first];
    if (!options.train) return params + activations + t.max_result_bytes;
    double grads = t.grads[last] - t.grads[first];
    const double state_shards = s.zero >= 1 ? s.dp : 1;
    const double gradient_copies = s.microbatches == 1 ? 1 : s.zero >= 2 ? 1 + 1.0 / s.dp : 2;
    const double held_params = s.zero == 3 ? params / s.dp + 2 * t.max_param_bytes : params;
    return held_params + grads * optimizerStatePerParam(options.training.optimizer) / state_shards +
           grads * gradient_copies + in_flight * activations + 2 * t.max_result_bytes;
  }

  // Greedy split of the nodes into `stages` non-empty stages, each as long as the time bound and
  // its memory allow; the stage starts, or nullopt when it cannot be done. Taking the longest
  // feasible stage each time is optimal: any feasible split's k-th stage ends no later.
  std::optional<std::vector<int>> greedySplit(const StageTable& t, const ParallelStrategy& s, double time_bound,
                                              double memory_limit) const {
    const int n = static_cast<int>(t.time.size()) - 1;
    std::vector<int> starts;
    int first = 0;
    for (int stage = 0; stage < s.pp; ++stage) {
      starts.push_back(first);
      const int latest = n - (s.pp - stage - 1);  // leave a node for every later stage
      const int in_flight = microbatchesInFlight(s.schedule, stage, s.pp, s.microbatches);
      // The last end in (first, latest] within the time bound and within memory (both monotone).
      int low = first, high = latest;
      while (low < high) {
        int mid = low + (high - low + 1) / 2;
        bool fits = t.time[mid] - t.time[first] <= time_bound &&
                    stageMemory(t, first, mid, in_flight, s) <= memory_limit;
        if (fits)
          low = mid;
        else
          high = mid - 1;
      }
      if (low == first) return std::nullopt;
      first = low;
    }
    if (first != n) return std::nullopt;
    return starts;
  }

  // Stage starts whose slowest stage is as fast as any split within memory allows (bisection on
  // the bound; greedySplit decides each bound); nullopt when no split fits in `memory_limit`.
  std::optional<std::vector<int>> balance(const StageTable& t, const ParallelStrategy& s, double memory_limit) const {
    const int n = static_cast<int>(t.time.size()) - 1;
    if (s.pp == 1) return stageMemory(t, 0, n, microbatchesInFlight(s.schedule, 0, 1, s.microbatches), s) <=
                                  memory_limit
                              ? std::optional<std::vector<int>>(std::vector<int>{0})
                              : std::nullopt;
    double high = t.time[n];
    std::optional<std::vector<int>> best = greedySplit(t, s, high, memory_limit);
    if (!best) return std::nullopt;
    double low = std::max(t.max_node_time, t.time[n] / s.pp);
    for (int iteration = 0; iteration < 100 && high - low > 1e-12 * high; ++iteration) {
      double middle = low + (high - low) / 2;
      if (auto split = greedySplit(t, s, middle, memory_limit)) {
        high = middle;
        best = std::move(split);
      } else {
        low = middle;
      }
    }
    return best;
  }

  // Why `s` cannot be estimated at all (empty when it can), and its rows per microbatch.
  std::string invalid(const ParallelStrategy& s, int64_t& rows) const {
    if (s.dp < 1 || s.tp < 1 || s.pp < 1 || s.microbatches < 1) return "degrees and microbatches must be at least 1";
    if (int64_t{s.dp} * s.tp * s.pp != options.devices)
      return "dp x tp x pp = " + std::to_string(int64_t{s.dp} * s.tp * s.pp) + ", not the " +
             std::to_string(options.devices) + " devices";
    if (global_batch % (int64_t{s.dp} * s.microbatches) != 0)
      return "batch " + std::to_string(global_batch) + " does not split into dp x microbatches = " +
             std::to_string(int64_t{s.dp} * s.microbatches);
    if (s.microbatches > 1 && !microbatches_refused.empty()) return microbatches_refused;
    if (s.sequence_parallel && s.tp < 2) return "sequence parallelism needs tp 2 or more";
    auto found = profiles.find({s.tp, s.sequence_parallel});
    if (found == profiles.end())
      return "tp " + std::to_string(s.tp) + (s.sequence_parallel ? " with sequence parallelism" : "") + " was not profiled";
    if (!found->second.infeasible.empty()) return found->second.infeasible;
    if (s.virtual_stages < 1) return "virtual stages must be at least 1";
    if (s.virtual_stages > 1 && (s.pp < 2 || s.schedule != PipelineScheduleKind::kOneForwardOneBackward ||
                                 s.microbatches % s.pp != 0))
      return "virtual stages need pp 2 or more, 1f1b and microbatches a multiple of pp";
    if (int64_t{s.pp} * s.virtual_stages > static_cast<int64_t>(found->second.nodes.size()))
      return "more stages than the model's " + std::to_string(found->second.nodes.size()) + " nodes";
    rows = global_batch / (int64_t{s.dp} * s.microbatches);
    return "";
  }

  StrategyEstimate estimate(const ParallelStrategy& s, const std::vector<int>* given_starts) const;
};

StrategyEstimate StrategyEstimator::Impl::estimate(const ParallelStrategy& s, const std::vector<int>* given_starts) const {
  StrategyEstimate e;
  e.strategy = s;
  int64_t rows = 0;
  e.infeasible = invalid(s, rows);
  if (!e.infeasible.empty()) return e;
  const TpProfile& tp_profile = *profile(s.tp, s.sequence_parallel);
  const StageTable& t = table(tp_profile, rows, s.recompute);
  const int n = static_cast<int>(tp_profile.nodes.size());
  const ClusterSpec& cluster = model.cluster();

  // 1. Stages: given, or balanced within memory (else balanced without a limit, to say how much is needed).
  //    Virtual stages are balanced as P x V stages of 1F1B (whose in-flight memory counts more
  //    microbatches than a virtual stage keeps: a conservative split), then summed per rank below.
  std::vector<int> starts;
  ParallelStrategy split = s;
  split.pp = s.pp * std::max(1, s.virtual_stages);
  split.virtual_stages = 1;
  if (given_starts) {
    starts = *given_starts;
    bool valid = static_cast<int>(starts.size()) == split.pp && starts[0] == 0;
    for (size_t k = 1; valid && k < starts.size(); ++k) valid = starts[k] > starts[k - 1] && starts[k] < n;
    if (!valid) {
      e.infeasible = "stage starts must be " + std::to_string(split.pp) + " increasing node indices from 0";
      return e;
    }
  } else if (auto balanced = balance(t, split, static_cast<double>(memory_limit))) {
    starts = std::move(*balanced);
  } else {
    starts = *balance(t, split, kInfinity);
  }
  e.stage_starts = starts;

  // 2. Per stage (per virtual stage with V > 1: rank r holds r, r + P, ...): its time per
  //    microbatch, memory, the transfer to the next stage, and its tail (the exposed gradient
  //    all-reduce and the optimizer after its last backward step).
  const int v = std::max(1, s.virtual_stages);
  const int segments = s.pp * v;
  const LinkSpec& pp_link = cluster.linkFor(strideGroup(s.pp, s.dp * s.tp));
  const LinkSpec& dp_link = cluster.linkFor(strideGroup(s.dp, s.tp));
  std::vector<double> rank_time(s.pp, 0), rank_memory(s.pp, 0);
  std::vector<double> rank_all_reduce(s.pp, 0), rank_exposed(s.pp, 0), rank_optimizer(s.pp, 0), rank_tp(s.pp, 0);
  double sum_stage = 0, slowest_segment = 0, slowest_transfer = 0, fill_transfers = 0;
  for (int segment = 0; segment < segments; ++segment) {
    const int rank = segment % s.pp;
    const int first = starts[segment], last = segment + 1 < segments ? starts[segment + 1] : n;
    double stage_time = t.time[last] - t.time[first];
    // ZeRO 2 and 3 move data over dp in every microbatch's steps: stage 3 gathers the parameters
    // for the forward and the backward pass, stage 2 reduce-scatters the gradients. They run on the
    // communication stream beside the kernels, but count here as if nothing hid them: that stream
    // runs in program order, so a gather queued behind a microbatch's reduce-scatter waits for its
    // gradient, and the sends to the next pipeline stage wait behind both. `simulate` agrees better with that
    // than with hiding them (GPT-3 at zero 2 with 48 microbatches: 91 s simulated, 61 s estimated
    // hidden; GPT 1.3B at dp 32, 4 microbatches: zero 1 / 2 / 3 simulated 5.06 / 5.55 / 5.66 s).
    const double stage_params = t.params[last] - t.params[first], stage_grads = t.grads[last] - t.grads[first];
    double per_microbatch_comm = 0;
    if (options.train && s.dp > 1 && s.zero == 3 && stage_params > 0)
      per_microbatch_comm += 2 * commTime(CommKind::kAllGather, s.dp, stage_params, dp_link);
    if (options.train && s.dp > 1 && s.zero >= 2 && s.microbatches > 1 && stage_grads > 0)
      per_microbatch_comm += commTime(CommKind::kReduceScatter, s.dp, stage_grads, dp_link);
    stage_time += per_microbatch_comm;
    if (segment + 1 < segments) {
      double transfer = commTime(CommKind::kSend, 2, t.cut_bytes[last], pp_link) * (options.train ? 2 : 1);
      fill_transfers += transfer;
      slowest_transfer = std::max(slowest_transfer, transfer);
    }
    slowest_segment = std::max(slowest_segment, stage_time);
    sum_stage += stage_time;
    rank_time[rank] += stage_time;
    rank_tp[rank] += t.tp_comm[last] - t.tp_comm[first];
    // Activations in flight: the schedule's microbatches; interleaved, rank r keeps
    // (P - r - 1) x 2 + (V - 1) x P + 1 virtual-stage microbatches (all M x V when M = P), spread
    // over its V stages.
    int in_flight = microbatchesInFlight(s.schedule, rank, s.pp, s.microbatches);
    if (v > 1) {
      const int warmup = s.microbatches == s.pp ? s.microbatches * v
                                                 : std::min(s.microbatches * v, (s.pp - rank - 1) * 2 + (v - 1) * s.pp + 1);
      in_flight = (warmup + v - 1) / v;
    }
    rank_memory[rank] += stageMemory(t, first, last, in_flight, s);
    if (!options.train) continue;
    double optimizer = t.optimizer[last] - t.optimizer[first];
    double all_reduce = 0, exposed = 0;
    if (s.dp > 1 && stage_grads > 0) {
      double buckets = std::max(1.0, std::ceil(stage_grads / static_cast<double>(std::max<int64_t>(options.bucket_bytes, 1))));
      // --zero 1: a reduce-scatter in place of the all-reduce, then the updated parameters'
      // all-gather after the optimizer, which nothing hides; the update runs on 1/dp of the rows.
      // --zero 2 with several microbatches reduce-scatters per microbatch (above): the last one's
      // is what the tail waits for. --zero 3 gathers no updated parameters.
      const CommKind summing = s.zero >= 1 ? CommKind::kReduceScatter : CommKind::kAllReduce;
      all_reduce = buckets * commLatencySteps(summing, s.dp) * dp_link.latency +
                   commBytesPerRank(summing, s.dp, stage_grads) / dp_link.bandwidth;
      double hidden_by = t.backward[last] - t.backward[first];  // the last microbatch's backward pass
      exposed = std::max(all_reduce / buckets, all_reduce - hidden_by);
      if (s.zero >= 2 && s.microbatches > 1) all_reduce *= s.microbatches;
      if (s.zero == 3) optimizer /= s.dp;
      if (s.zero == 1 || s.zero == 2) {
        const double gather = buckets * commLatencySteps(CommKind::kAllGather, s.dp) * dp_link.latency +
                              commBytesPerRank(CommKind::kAllGather, s.dp, stage_grads) / dp_link.bandwidth;
        all_reduce += gather;
        exposed += gather;
        optimizer /= s.dp;
      }
    }
    rank_all_reduce[rank] += all_reduce;
    rank_exposed[rank] += exposed;
    rank_optimizer[rank] += optimizer;
  }
  double slowest_rank = 0, tail = -1, memory = 0;
  for (int rank = 0; rank < s.pp; ++rank) {
    slowest_rank = std::max(slowest_rank, rank_time[rank]);
    if (rank_time[rank] > e.slowest_stage_s) {
      e.slowest_stage_s = rank_time[rank];
      e.tp_comm_s = rank_tp[rank];
    }
    memory = std::max(memory, rank_memory[rank]);
    if (options.train && rank_exposed[rank] + rank_optimizer[rank] > tail) {
      tail = rank_exposed[rank] + rank_optimizer[rank];
      e.dp_comm_s = rank_all_reduce[rank];
      e.dp_exposed_s = rank_exposed[rank];
      e.optimizer_s = rank_optimizer[rank];
    }
  }

  // 3. The step: the pipeline, then the slowest tail. 1F1B and GPipe: (M - 1) x the slowest stage
  //    + every stage once + the transfers filling it. Interleaved: M x the slowest rank + (P - 1)
  //    x the slowest virtual stage (the bubble, 1/V of 1F1B's) + the transfers through all P x V.
  double pipeline = 0;
  if (v == 1) {
    pipeline = (s.microbatches - 1) * std::max(slowest_rank, slowest_transfer) + sum_stage + fill_transfers;
  } else {
    pipeline = s.microbatches * slowest_rank + (s.pp - 1) * slowest_segment + fill_transfers;
  }
  e.pp_comm_s = fill_transfers;
  e.bubble_fraction = pipeline > 0 ? std::max(0.0, 1 - s.microbatches * sum_stage / s.pp / pipeline) : 0;
  e.step_time_s = pipeline + std::max(tail, 0.0);
  e.memory_bytes = static_cast<int64_t>(std::ceil(memory));
  if (memory > static_cast<double>(memory_limit))
    e.infeasible = "needs " + gib(memory) + " per device, over the " + gib(static_cast<double>(memory_limit)) + " limit";
  return e;
}

StrategyEstimator::StrategyEstimator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StrategyEstimator::StrategyEstimator(StrategyEstimator&&) noexcept = default;
StrategyEstimator& StrategyEstimator::operator=(StrategyEstimator&&) noexcept = default;
StrategyEstimator::~StrategyEstimator() = default;

Expected<StrategyEstimator> StrategyEstimator::create(const Graph& model, const StrategySearchOptions& options,
                                                      const CostModel& cost_model) {
  if (options.devices < 1) return Status::usage("strategy search: --devices must be at least 1");
  auto impl = std::make_unique<Impl>(cost_model);
  impl->options = options;
  impl->memory_limit =
      options.memory_limit_bytes > 0 ? options.memory_limit_bytes : cost_model.cluster().device.memory_bytes;
  if (impl->memory_limit <= 0) impl->memory_limit = std::numeric_limits<int64_t>::max();

  // 1. The global batch: the option's, else the model's first input's dim 0.
  if (options.batch > 0) {
    impl->global_batch = options.batch;
  } else if (!model.inputs.empty() && model.values[model.inputs[0]].type.rank() > 0) {
    impl->global_batch = model.values[model.inputs[0]].type.shape[0];
  }
  if (impl->global_batch <= 0)
    return Status::badInput("strategy search: @" + model.name + " has no batch dim to split (give --batch)");

  // 2. The forward graph (with the loss when training) at two row counts; the estimate is affine
  //    in the rows between and beyond them.
  //    The model is rewritten as compile rewrites it for each tp degree (model_rewrites.h).
  const int64_t rows1 = impl->global_batch >= 4 ? 2 : 1, rows2 = 2 * rows1;
  Graph shaped[2];
  for (int k = 0; k < 2; ++k) {
    CLEAVE_ASSIGN_OR_RETURN(shaped[k], modelAtBatch(model, options.model_at_batch, k == 0 ? rows1 : rows2));
  }
  auto forwardGraph = [&](int k, int tp) -> Expected<Graph> {
    Graph rewritten = shaped[k];
    CLEAVE_TRY(rewriteModelForCompile(rewritten, options.fusion, tp));
    return options.train ? buildLossGraph(rewritten, options.training) : buildInferenceGraph(rewritten);
  };
  Graph forward[2];
  for (int k = 0; k < 2; ++k) {
    CLEAVE_ASSIGN_OR_RETURN(forward[k], forwardGraph(k, 1));
  }

  // A value summed over the batch rows and used with them (BatchNorm in training) rules out microbatches.
  if (Status apart = checkMicrobatchesComputeTheBatch(forward[1], 2); !apart) impl->microbatches_refused = apart.message();

  // 3. One device's graph per tp degree dividing the devices (a degree the partitioner rejects is
  //    infeasible); its nodes know the forward graph's nodes by name, so that compile can split
  //    stages where the estimate did.
  std::unordered_set<std::string> forward_names;
  for (const Node& node : forward[0].nodes)
    if (!node.results.empty()) forward_names.insert(forward[0].values[node.results[0]].name);
  //    A degree above 1 is profiled once for each of the options' sequence parallelism modes. The
  //    profiles are built in parallel.
  std::vector<TpProfile> profiles;
  for (int tp : divisorsOf(options.devices)) {
    for (bool sequence_parallel : {false, true}) {
      if (tp == 1 ? sequence_parallel
                  : std::find(options.sequence_parallel.begin(), options.sequence_parallel.end(), sequence_parallel) ==
                        options.sequence_parallel.end())
        continue;
      profiles.emplace_back();
      profiles.back().tp = tp;
      profiles.back().sequence_parallel = sequence_parallel;
    }
  }
  //    The forward graphs as compile rewrites them for each degree above 1, once per degree (both
  //    sequence parallelism modes partition the same graph).
  struct Rewritten {
    int tp = 1;
    Graph forward[2];
    std::string error;  // why the rewrite failed (the degree is then infeasible)
  };
  std::vector<Rewritten> rewritten;
  for (int tp : divisorsOf(options.devices)) {
    if (tp == 1) continue;
    rewritten.emplace_back();
    rewritten.back().tp = tp;
  }
  CLEAVE_TRY(runParallelTasks(rewritten.size(), [&](size_t index) -> Status {
    for (int k = 0; k < 2; ++k) {
      auto graph = forwardGraph(k, rewritten[index].tp);
      if (!graph) {
        rewritten[index].error = graph.status().message();
        break;
      }
      rewritten[index].forward[k] = std::move(*graph);
    }
    return Status::ok();
  }));
  CLEAVE_TRY(runParallelTasks(profiles.size(), [&](size_t index) -> Status {
    TpProfile& profile = profiles[index];
    const int tp = profile.tp;
    const std::string degree = "tp " + std::to_string(tp) + (profile.sequence_parallel ? " with sequence parallelism" : "");
    profile.tp_link = cost_model.cluster().linkFor(strideGroup(tp, 1));
    const DeviceMesh mesh = DeviceMesh::pipelineDataTensor(1, 1, tp);
    const Rewritten* graphs = nullptr;
    for (const Rewritten& r : rewritten)
      if (r.tp == tp) graphs = &r;
    auto partition = [&](int k) -> Expected<Graph> {
      if (tp == 1) return forward[k];
      if (!graphs->error.empty()) return Status::badInput(graphs->error);
      return partitionForDevice(graphs->forward[k], mesh, MeshCoord{}, nullptr, {}, profile.sequence_parallel);
    };
    auto part1 = partition(0), part2 = partition(1);
    if (!part1 || !part2) {
      profile.infeasible = degree + ": " + (!part1 ? part1 : part2).status().message();
    } else {
      std::array<BackwardReads, 3> reads;
      if (options.train) {
        auto backward_reads = backwardReads(*part1, options.recompute_modes);
        if (!backward_reads) return backward_reads.status().withContext("strategy search: " + degree + ": ");
        reads = std::move(*backward_reads);
      }
      auto nodes = profileGraph(*part1, static_cast<double>(rows1), *part2, static_cast<double>(rows2), reads,
                                options.training.optimizer, options.train, cost_model, forward_names);
      if (!nodes) return nodes.status();
      profile.nodes = std::move(*nodes);
      if (profile.nodes.empty()) profile.infeasible = degree + ": the model has no work";
    }
    return Status::ok();
  }));
  for (TpProfile& profile : profiles) impl->profiles.emplace(std::pair{profile.tp, profile.sequence_parallel}, std::move(profile));
  return StrategyEstimator(std::move(impl));
}

int64_t StrategyEstimator::globalBatch() const { return impl_->global_batch; }

std::vector<ParallelStrategy> StrategyEstimator::candidates() const {
  std::vector<ParallelStrategy> all;
  const int devices = impl_->options.devices;
  for (const auto& [key, profile] : impl_->profiles) {
    if (!profile.infeasible.empty()) continue;
    const auto [tp, sequence_parallel] = key;
    for (int pp : divisorsOf(devices / tp)) {
      if (pp > static_cast<int>(profile.nodes.size())) break;
      const int dp = devices / tp / pp;
      if (impl_->global_batch % dp != 0) continue;
      for (int microbatches : divisorsOf(impl_->global_batch / dp)) {
        if (microbatches > impl_->options.max_microbatches) break;
        std::vector<PipelineScheduleKind> schedules = {PipelineScheduleKind::kOneForwardOneBackward};
        if (pp > 1) schedules = impl_->options.schedules;
        for (PipelineScheduleKind schedule : schedules) {
          if (!impl_->options.train) {
            all.push_back({dp, tp, pp, microbatches, schedule, RecomputeMode::kNone, 0, 1, sequence_parallel});
            continue;
          }
          std::vector<int> virtual_stages = {1};
          if (pp > 1 && schedule == PipelineScheduleKind::kOneForwardOneBackward && microbatches % pp == 0)
            for (int v : impl_->options.virtual_stages)
              if (v > 1 && pp * v <= static_cast<int>(profile.nodes.size())) virtual_stages.push_back(v);
          for (int v : virtual_stages)
            for (RecomputeMode recompute : impl_->options.recompute_modes)
              for (int zero : impl_->options.zero_stages)
                if (zero == 0 || dp > 1)
                  all.push_back({dp, tp, pp, microbatches, schedule, recompute, zero, v, sequence_parallel});
        }
      }
    }
  }
  return all;
}

StrategyEstimate StrategyEstimator::estimate(const ParallelStrategy& strategy) const {
  return impl_->estimate(strategy, nullptr);
}

std::vector<std::string> StrategyEstimator::stageStartNodes(const StrategyEstimate& estimate) const {
  // The first profile node at or after each later stage's start that the forward graph has.
  const TpProfile* profile = impl_->profile(estimate.strategy.tp, estimate.strategy.sequence_parallel);
  if (!profile) return {};
  const int n = static_cast<int>(profile->nodes.size());
  std::vector<std::string> names;
  for (size_t k = 1; k < estimate.stage_starts.size(); ++k) {
    int node = estimate.stage_starts[k];
    while (node < n && profile->nodes[node].forward_name.empty()) ++node;
    if (node == n) return {};
    names.push_back(profile->nodes[node].forward_name);
  }
  return names;
}

StrategyEstimate StrategyEstimator::estimateWithStages(const ParallelStrategy& strategy,
                                                       std::span<const int> stage_starts) const {
  std::vector<int> starts(stage_starts.begin(), stage_starts.end());
  return impl_->estimate(strategy, &starts);
}

int StrategyEstimator::profileNodes(int tp) const {
  const TpProfile* profile = impl_->profile(tp, false);
  return profile ? static_cast<int>(profile->nodes.size()) : 0;
}

double StrategyEstimator::lowerBound(const ParallelStrategy& s) const {
  int64_t rows = 0;
  if (!impl_->invalid(s, rows).empty()) return kInfinity;
  const StageTable& t = impl_->table(*impl_->profile(s.tp, s.sequence_parallel), rows, s.recompute);
  // The pipeline takes at least M x the average rank + (P - 1) x the average virtual stage (1F1B:
  // (M - 1) x the average stage + every stage once); some stage's optimizer update at least the
  // average one.
  const double total = t.time.back();
  const int v = std::max(1, s.virtual_stages);
  return s.microbatches * total / s.pp + (s.pp - 1) * total / (s.pp * v) + t.optimizer.back() / s.pp;
}

Expected<StrategySearchResult> searchStrategy(const StrategyEstimator& estimator, const StrategySearchOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  StrategySearchResult result;

  // 1. Every candidate with its lower bound, most promising first (ties in candidate order).
  std::vector<ParallelStrategy> candidates = estimator.candidates();
  result.candidates = static_cast<int64_t>(candidates.size());
  std::vector<std::pair<double, size_t>> order;
  for (size_t i = 0; i < candidates.size(); ++i) order.emplace_back(estimator.lowerBound(candidates[i]), i);
  std::sort(order.begin(), order.end());

  // 2. Estimate in that order, keeping the fastest feasible ones (best + alternatives), until a
  //    lower bound says no later candidate can join them.
  const size_t keep = options.alternatives + 1;
  std::vector<std::pair<StrategyEstimate, size_t>> kept, over_memory;
  auto faster = [](const auto& a, const auto& b) {
    return a.first.step_time_s < b.first.step_time_s ||
           (a.first.step_time_s == b.first.step_time_s && a.second < b.second);
  };
  std::string any_error;
  for (const auto& [bound, index] : order) {
    if (kept.size() == keep && bound >= kept.back().first.step_time_s) break;
    if (!std::isfinite(bound)) break;
    StrategyEstimate estimate = estimator.estimate(candidates[index]);
    ++result.estimated;
    if (estimate.feasible()) {
      kept.emplace_back(std::move(estimate), index);
      std::sort(kept.begin(), kept.end(), faster);
      if (kept.size() > keep) kept.pop_back();
    } else if (estimate.memory_bytes > 0) {
      over_memory.emplace_back(std::move(estimate), index);
    } else if (any_error.empty()) {
      any_error = candidates[index].str() + ": " + estimate.infeasible;
    }
  }

  // 3. The answer, or why there is none.
  if (kept.empty()) {
    if (!over_memory.empty()) {
      auto least = std::min_element(over_memory.begin(), over_memory.end(), [](const auto& a, const auto& b) {
        return a.first.memory_bytes < b.first.memory_bytes;
      });
      return Status::badInput("no strategy for " + std::to_string(options.devices) +
                              " devices fits in device memory; the least any needs is " +
                              gib(static_cast<double>(least->first.memory_bytes)) + " per device (" +
                              least->first.strategy.str() + ": " + least->first.infeasible + ")");
    }
    return Status::badInput("no strategy splits the model over " + std::to_string(options.devices) + " devices" +
                            (any_error.empty() ? "" : " (" + any_error + ")"));
  }
  result.best = kept.front().first;
  for (size_t k = 1; k < kept.size(); ++k) result.alternatives.push_back(kept[k].first);
  // The stage starts compile splits at, for the estimates it may compile.
  result.best.stage_start_nodes = estimator.stageStartNodes(result.best);
  for (StrategyEstimate& alternative : result.alternatives)
    alternative.stage_start_nodes = estimator.stageStartNodes(alternative);
  std::sort(over_memory.begin(), over_memory.end(), faster);
  for (const auto& [estimate, index] : over_memory) {
    if (estimate.step_time_s >= result.best.step_time_s || result.over_memory.size() >= options.alternatives) break;
    result.over_memory.push_back(estimate);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

Expected<StrategySearchResult> searchStrategy(const Graph& model, const StrategySearchOptions& options,
                                              const CostModel& cost_model) {
  const auto started = std::chrono::steady_clock::now();
  CLEAVE_ASSIGN_OR_RETURN(StrategyEstimator estimator, StrategyEstimator::create(model, options, cost_model));
  CLEAVE_ASSIGN_OR_RETURN(StrategySearchResult result, searchStrategy(estimator, options));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

}  // namespace cleave
