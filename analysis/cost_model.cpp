// The cost model: built-in cluster specs, roofline kernel times and alpha-beta communication times.
#include "analysis/cost_model.h"

#include <algorithm>

#include "ir/plan.h"
#include "ir/plan_storage.h"

namespace cleave {
namespace {

// This machine as the runtime's local backend uses it: each rank a CPU core-thread.
// Figures: OpenBLAS reaches 130-145 GFLOP/s fp32 on two cores (DESIGN.md), so about 65 per core;
// about 10 GB/s of memory bandwidth; half of the 24 GiB of memory per core; ranks exchange data
// through shared memory ("loopback"), about 5 GB/s with about 5 us per message. The kernel
// overhead is the executor's dispatch of one instruction. `cleave calibrate` measures them.
ClusterSpec cpuLocal() {
  ClusterSpec cluster;
  cluster.name = "cpu-local";
  cluster.device.name = "cpu core";
  cluster.device.peak_flops = {{DType::kF32, 65e9}, {DType::kF64, 32.5e9}};
  cluster.device.memory_bandwidth = 10e9;
  cluster.device.memory_bytes = int64_t{12} << 30;
  cluster.device.kernel_overhead_s = 2e-6;
  cluster.hosts = 1;
  cluster.devices_per_host = 2;
  cluster.intra_host = LinkSpec{"loopback", 5e9, 5e-6};
  cluster.inter_host = cluster.intra_host;
  return cluster;
}

// One host of 8 GPUs joined by NVLink (each link figure: bytes/s in each direction, half the
// datasheets' bidirectional total), one InfiniBand adapter per GPU to other hosts.
// Peaks are dense (no sparsity); f64 is the tensor-core figure. Latencies and the kernel launch
// overhead are estimates, not datasheet figures. Sources: docs/cost-model.md.
ClusterSpec gpuHost(std::string name, std::string device_name, double bf16_flops, double f32_flops,
                    double f64_flops, double memory_bandwidth, int64_t memory_bytes, LinkSpec nvlink,
                    LinkSpec infiniband) {
  ClusterSpec cluster;
  cluster.name = std::move(name);
  cluster.device.name = std::move(device_name);
  cluster.device.peak_flops = {
      {DType::kBF16, bf16_flops}, {DType::kF16, bf16_flops}, {DType::kF32, f32_flops}, {DType::kF64, f64_flops}};
  cluster.device.memory_bandwidth = memory_bandwidth;
  cluster.device.memory_bytes = memory_bytes;
  cluster.device.kernel_overhead_s = 5e-6;
  cluster.hosts = 1;
  cluster.devices_per_host = 8;
  cluster.intra_host = std::move(nvlink);
  cluster.inter_host = std::move(infiniband);
  return cluster;
}

constexpr int64_t kGiB = int64_t{1} << 30;

// DGX A100: A100 SXM4 80GB (312 TFLOP/s bf16, 19.5 fp32 and fp64 tensor core, 2,039 GB/s),
// NVLink 3 (600 GB/s), 200 Gb/s HDR InfiniBand per GPU.
ClusterSpec a100x8() {
  return gpuHost("a100x8", "NVIDIA A100 SXM4 80GB", 312e12, 19.5e12, 19.5e12, 2.039e12, 80 * kGiB,
                 LinkSpec{"NVLink 3", 300e9, 2e-6}, LinkSpec{"InfiniBand HDR 200 Gb/s", 25e9, 5e-6});
}

// DGX H100: H100 SXM5 80GB (989 TFLOP/s bf16 dense, 67 fp32 and fp64 tensor core, 3.35 TB/s),
// NVLink 4 (900 GB/s), 400 Gb/s NDR InfiniBand per GPU.
ClusterSpec h100x8() {
  return gpuHost("h100x8", "NVIDIA H100 SXM5 80GB", 989e12, 67e12, 67e12, 3.35e12, 80 * kGiB,
                 LinkSpec{"NVLink 4", 450e9, 2e-6}, LinkSpec{"InfiniBand NDR 400 Gb/s", 50e9, 5e-6});
}

// DGX H200: H200 SXM 141GB (the H100's compute, 4.8 TB/s), NVLink 4, 400 Gb/s NDR InfiniBand per GPU.
ClusterSpec h200x8() {
  return gpuHost("h200x8", "NVIDIA H200 SXM 141GB", 989e12, 67e12, 67e12, 4.8e12, int64_t{141'000'000'000},
                 LinkSpec{"NVLink 4", 450e9, 2e-6}, LinkSpec{"InfiniBand NDR 400 Gb/s", 50e9, 5e-6});
}

struct BuiltinCluster {
  std::string_view name;
  ClusterSpec (*make)();
};

constexpr BuiltinCluster kBuiltinClusters[] = {
    {"cpu-local", cpuLocal}, {"a100x8", a100x8}, {"h100x8", h100x8}, {"h200x8", h200x8}};

// The largest host count a multi-host name may ask for.
constexpr int64_t kMaxHosts = 1 << 20;

double totalBytes(std::span<const TensorType> types) {
  double bytes = 0;
  for (const TensorType& type : types) bytes += static_cast<double>(type.bytes());
  return bytes;
}

// The types of a plan instruction's operands or results; an error names the buffer id out of range.
Expected<std::vector<TensorType>> bufferTypes(const planpb::RankPlan& rank,
                                              const google::protobuf::RepeatedField<int32_t>& ids) {
  std::vector<TensorType> types;
  for (int32_t id : ids) {
    if (id < 0 || id >= rank.buffers_size())
      return Status::badInput("rank " + std::to_string(rank.rank()) + ": buffer id " + std::to_string(id) +
                              " is out of range");
    CLEAVE_ASSIGN_OR_RETURN(TensorType type, fromProto(rank.buffers(id).type()));
    types.push_back(std::move(type));
  }
  return types;
}

std::string instructionWhere(const planpb::RankPlan& rank, const planpb::Instruction& instruction) {
  const std::string& what =
      instruction.op().empty() ? planpb::InstructionKind_Name(instruction.kind()) : instruction.op();
  std::string where = "rank " + std::to_string(rank.rank()) + ": instruction '" + what + "'";
  if (!instruction.source().empty()) where += " (" + instruction.source() + ")";
  return where + ": ";
}

}  // namespace

double DeviceSpec::peakFlops(DType dtype) const {
  auto found = peak_flops.find(dtype);
  if (found != peak_flops.end()) return found->second;
  found = peak_flops.find(DType::kF32);
  return found != peak_flops.end() ? found->second : 0.0;
}

double DeviceSpec::efficiency(OpId op) const {
  auto found = kernel_efficiency.find(op);
  return found != kernel_efficiency.end() ? found->second : 1.0;
}

const LinkSpec& ClusterSpec::linkFor(std::span<const int32_t> ranks) const {
  for (int32_t rank : ranks)
    if (hostOf(rank) != hostOf(ranks.front())) return inter_host;
  return intra_host;
}

std::vector<std::string> builtinClusterNames() {
  std::vector<std::string> names;
  for (const auto& builtin : kBuiltinClusters) names.emplace_back(builtin.name);
  return names;
}

Expected<ClusterSpec> builtinCluster(std::string_view name) {
  for (const auto& builtin : kBuiltinClusters)
    if (builtin.name == name) return builtin.make();
  // NAMExH: H hosts of the one-host built-in NAME ("h100x8x128": 128 hosts of 8 H100s).
  size_t cut = name.rfind('x');
  if (cut != std::string_view::npos && cut + 1 < name.size()) {
    std::string_view base = name.substr(0, cut), count = name.substr(cut + 1);
    bool digits = count.size() <= 7 && count.find_first_not_of("0123456789") == std::string_view::npos;
    if (digits) {
      for (const auto& builtin : kBuiltinClusters) {
        if (builtin.name != base) continue;
        int64_t hosts = std::stoll(std::string(count));
        if (hosts < 1 || hosts > kMaxHosts)
          return Status::badInput("cluster '" + std::string(name) + "': the host count must be in [1, " +
                                  std::to_string(kMaxHosts) + "]");
        ClusterSpec cluster = builtin.make();
        cluster.name = std::string(name);
        cluster.hosts = static_cast<int>(hosts);
        return cluster;
      }
    }
  }
  std::string known;
  for (const auto& builtin : kBuiltinClusters) known += (known.empty() ? "" : ", ") + std::string(builtin.name);
  return Status::badInput("unknown cluster '" + std::string(name) + "' (built in: " + known +
                          "; NAMExH for H hosts, e.g. h100x8x128; or a FILE.json)");
}

std::optional<CommKind> commKindOf(planpb::InstructionKind kind) {
  switch (kind) {
    case planpb::ALL_REDUCE: return CommKind::kAllReduce;
    case planpb::ALL_GATHER: return CommKind::kAllGather;
    case planpb::REDUCE_SCATTER: return CommKind::kReduceScatter;
    case planpb::ALL_TO_ALL: return CommKind::kAllToAll;
    case planpb::SEND: return CommKind::kSend;
    case planpb::RECV: return CommKind::kRecv;
    default: return std::nullopt;
  }
}

double commTrafficFactor(CommKind kind, int group_size) {
  if (kind == CommKind::kSend || kind == CommKind::kRecv) return 1.0;
  if (group_size <= 1) return 0.0;
  const double n = group_size;
  return kind == CommKind::kAllReduce ? 2.0 * (n - 1) / n : (n - 1) / n;
}

int commLatencySteps(CommKind kind, int group_size) {
  if (kind == CommKind::kSend || kind == CommKind::kRecv) return 1;
  if (group_size <= 1) return 0;
  return kind == CommKind::kAllReduce ? 2 * (group_size - 1) : group_size - 1;
}

double commBytesPerRank(CommKind kind, int group_size, double full_bytes) {
  return commTrafficFactor(kind, group_size) * full_bytes;
}

double commTime(CommKind kind, int group_size, double full_bytes, const LinkSpec& link) {
  double transfer = link.bandwidth > 0 ? commBytesPerRank(kind, group_size, full_bytes) / link.bandwidth : 0.0;
  return commLatencySteps(kind, group_size) * link.latency + transfer;
}

int64_t commFullBytes(const planpb::RankPlan& rank, const planpb::Instruction& instruction) {
  auto sum = [&](const google::protobuf::RepeatedField<int32_t>& ids) {
    int64_t bytes = 0;
    for (int32_t id : ids)
      if (id >= 0 && id < rank.buffers_size()) bytes += std::max<int64_t>(bufferBytes(rank.buffers(id)), 0);
    return bytes;
  };
  return std::max(sum(instruction.operands()), sum(instruction.results()));
}

double rooflineTime(const OpCost& cost, DType dtype, const DeviceSpec& device, double efficiency, double missed_bytes) {
  double peak = device.peakFlops(dtype);
  double compute = peak > 0 ? cost.flops / peak : 0.0;
  if (efficiency <= 0) efficiency = 1.0;
  if (device.cache_bandwidth <= 0) {
    double memory = device.memory_bandwidth > 0 ? cost.bytes / device.memory_bandwidth : 0.0;
    return std::max(compute, memory) / efficiency + device.kernel_overhead_s;
  }
  missed_bytes = std::clamp(missed_bytes, 0.0, std::max(cost.bytes, 0.0));
  double from_cache = (cost.bytes - missed_bytes) / device.cache_bandwidth;
  double from_memory = device.memory_bandwidth > 0 ? missed_bytes / device.memory_bandwidth : 0.0;
  return std::max(compute, from_cache) / efficiency + from_memory + device.kernel_overhead_s;
}

DType arithmeticDType(std::span<const TensorType> operands, std::span<const TensorType> results) {
  for (const TensorType& type : results)
    if (isFloat(type.dtype)) return type.dtype;
  for (const TensorType& type : operands)
    if (isFloat(type.dtype)) return type.dtype;
  return DType::kF32;
}

OpCost CostModel::kernelCost(const OpDef& def, std::span<const TensorType> operands,
                             std::span<const TensorType> results, const AttrMap& attrs) {
  OpCost cost = def.cost(OpContext{def, operands, results, attrs});
  // A cost rule whose shape rule rejects the instance (a lowering-specific attribute) counts
  // nothing; the kernel still reads its operands and writes its results.
  if (cost.flops == 0 && cost.bytes == 0) cost.bytes = totalBytes(operands) + totalBytes(results);
  return cost;
}

double CostModel::kernelTime(const OpDef& def, std::span<const TensorType> operands,
                             std::span<const TensorType> results, const AttrMap& attrs, double missed_bytes) const {
  return rooflineTime(kernelCost(def, operands, results, attrs), arithmeticDType(operands, results), cluster_.device,
                      cluster_.device.efficiency(def.id), missed_bytes);
}

double CostModel::nodeTime(const Graph& graph, int32_t node_index) const {
  const Node& node = graph.nodes[node_index];
  if (opDef(node.op).view) return 0.0;
  std::vector<TensorType> operands, results;
  for (ValueId v : node.operands) operands.push_back(graph.values[v].type);
  for (ValueId v : node.results) results.push_back(graph.values[v].type);
  const OpDef& def = opDef(node.op);
  std::optional<CommKind> comm = opDef(node.op).communication;
  if (!comm) return kernelTime(def, operands, results, node.attrs);
  if (*comm == CommKind::kRecv) return 0.0;
  if (*comm == CommKind::kSend) {
    const LinkSpec& link = cluster_.hosts > 1 ? cluster_.inter_host : cluster_.intra_host;
    return commTime(CommKind::kSend, 2, totalBytes(operands), link);
  }
  OpContext context{def, operands, results, node.attrs};
  int group_size = static_cast<int>(context.getInt("group_size"));
  const LinkSpec& link = group_size <= cluster_.devices_per_host ? cluster_.intra_host : cluster_.inter_host;
  return commTime(*comm, group_size, std::max(totalBytes(operands), totalBytes(results)), link);
}

Expected<double> CostModel::instructionTime(const planpb::RankPlan& rank, const planpb::Instruction& instruction,
                                            double missed_bytes) const {
  const std::string where = instructionWhere(rank, instruction);
  switch (instruction.kind()) {
    case planpb::KERNEL: {
      std::optional<OpId> op = lookupOp(instruction.op());
      if (!op) return Status::badInput(where + "unknown op");
      auto operands = bufferTypes(rank, instruction.operands());
      if (!operands) return operands.status().withContext(where);
      auto results = bufferTypes(rank, instruction.results());
      if (!results) return results.status().withContext(where);
      AttrMap attrs;
      for (const auto& [name, attr] : instruction.attrs()) {
        auto value = fromProto(attr);
        if (!value) return value.status().withContext(where + "attribute '" + name + "': ");
        attrs.emplace(name, std::move(*value));
      }
      return kernelTime(opDef(*op), *operands, *results, attrs, missed_bytes);
    }
    case planpb::COPY: {
      OpCost cost;
      cost.bytes = 2.0 * static_cast<double>(commFullBytes(rank, instruction));
      return rooflineTime(cost, DType::kF32, cluster_.device, 1, missed_bytes);
    }
    case planpb::SEND:
    case planpb::RECV: {
      int32_t pair[] = {rank.rank(), instruction.peer()};
      return commTime(CommKind::kSend, 2, static_cast<double>(commFullBytes(rank, instruction)),
                      cluster_.linkFor(pair));
    }
    case planpb::BARRIER: {
      // A barrier is an all-reduce of nothing: only its latency steps.
      std::vector<int32_t> group(instruction.group().begin(), instruction.group().end());
      if (group.empty()) return 0.0;
      return commTime(CommKind::kAllReduce, static_cast<int>(group.size()), 0.0, cluster_.linkFor(group));
    }
    default: {
      std::optional<CommKind> comm = commKindOf(instruction.kind());
      if (!comm) return Status::badInput(where + "unknown instruction kind " + std::to_string(instruction.kind()));
      std::vector<int32_t> group(instruction.group().begin(), instruction.group().end());
      if (group.empty()) return Status::badInput(where + "a collective without a group");
      return commTime(*comm, static_cast<int>(group.size()), static_cast<double>(commFullBytes(rank, instruction)),
                      cluster_.linkFor(group));
    }
  }
}

}  // namespace cleave
