// The cost model: device and cluster specs, roofline kernel times and alpha-beta communication times.
// It is the one place every time estimate comes from (inspect, simulate, stage balancing, auto search).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/comm_kind.h"
#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/op_table.h"
#include "ir/plan.pb.h"
#include "ir/status.h"

namespace cleave {
// One device: arithmetic peak per dtype, memory bandwidth and capacity.
struct DeviceSpec {
  std::string name;
  std::map<DType, double> peak_flops;  // FLOP/s; a dtype not listed runs at the f32 figure
  double memory_bandwidth = 0;         // bytes/s between the device's memory and its cores
  int64_t memory_bytes = 0;            // capacity
  double kernel_overhead_s = 0;        // fixed time every kernel takes (launch, dispatch)
  // The cache model (0: none, every byte moves at memory_bandwidth): the share of the last-level
  // cache one device has, and the bytes/s its kernels read and write there. With it, a simulated
  // kernel's bytes that the cache holds move at cache_bandwidth and the rest (cacheMissBytes,
  // analysis/cache_reuse.h) at memory_bandwidth; `cleave calibrate` measures both.
  int64_t cache_bytes = 0;
  double cache_bandwidth = 0;
  // Per op, the speed its kernels reach relative to the roofline (time = roofline time / efficiency,
  // plus the overhead); `cleave calibrate` measures it. An op not listed reaches the roofline (1).
  std::map<OpId, double> kernel_efficiency;

  // The peak FLOP/s for arithmetic in `dtype`.
  double peakFlops(DType dtype) const;
  // The kernel efficiency of `op` (1 when not listed).
  double efficiency(OpId op) const;
};

// A link between two devices, in the alpha-beta model: a message of B bytes takes latency + B / bandwidth.
struct LinkSpec {
  std::string name;
  double bandwidth = 0;  // bytes/s in each direction
  double latency = 0;    // seconds per message
};

// A cluster: hosts of identical devices, a link within a host and one between hosts.
// Rank r lives on host r / devices_per_host; ranks beyond hosts × devices_per_host are placed on
// further hosts of the same kind (a plan may ask for more devices than a spec lists).
struct ClusterSpec {
  std::string name;
  DeviceSpec device;
  int hosts = 1;
  int devices_per_host = 1;
  LinkSpec intra_host;
  LinkSpec inter_host;

  int deviceCount() const { return hosts * devices_per_host; }
  int hostOf(int rank) const { return rank / devices_per_host; }
  // The link a group of ranks talks over: within a host when they all share one, else between hosts.
  const LinkSpec& linkFor(std::span<const int32_t> ranks) const;
};

// The built-in clusters' names: "cpu-local", "a100x8", "h100x8", "h200x8".
std::vector<std::string> builtinClusterNames();
// The built-in cluster `name`, or NAMExH: H hosts of the built-in NAME ("h100x8x128"); an error
// (kBadInput) lists the known names.
Expected<ClusterSpec> builtinCluster(std::string_view name);

// The comm kind of a plan instruction kind; nullopt for kernels, copies and barriers.
std::optional<CommKind> commKindOf(planpb::InstructionKind kind);

// Fraction of the full buffer each of `group_size` ranks sends under the algorithm cleave assumes:
// ring all-reduce 2(n-1)/n; ring all-gather and reduce-scatter (n-1)/n; pairwise all-to-all
// (n-1)/n; send and recv 1. A group of one moves nothing.
double commTrafficFactor(CommKind kind, int group_size);
// Messages each rank sends one after another (the latency terms): 2(n-1), n-1, n-1, 1.
int commLatencySteps(CommKind kind, int group_size);
// Bytes one rank moves for a buffer of `full_bytes` (the whole tensor: all-gather's result,
// reduce-scatter's operand, all-reduce's operand).
double commBytesPerRank(CommKind kind, int group_size, double full_bytes);
// Alpha-beta time: steps × latency + bytes per rank / bandwidth.
double commTime(CommKind kind, int group_size, double full_bytes, const LinkSpec& link);

// The full buffer a communication instruction moves: the larger of its operands' and its results'
// total bytes (so all-gather counts its result and reduce-scatter its operand).
int64_t commFullBytes(const planpb::RankPlan& rank, const planpb::Instruction& instruction);

// Roofline time of work `cost` on `device`: max(flops / peak(dtype), bytes / memory bandwidth) /
// efficiency + overhead. On a device with a cache model (cache_bandwidth > 0), `missed_bytes` of
// the bytes come from memory and the rest from the cache: max(flops / peak, (bytes - missed) /
// cache bandwidth) / efficiency + missed / memory bandwidth + overhead. The misses are added, not
// overlapped: a CPU kernel streaming a weight from memory (a GEMM packing it) mostly waits for it.
double rooflineTime(const OpCost& cost, DType dtype, const DeviceSpec& device, double efficiency = 1,
                    double missed_bytes = 0);

// The dtype whose peak a kernel runs at: its first float result, else its first float operand, else f32.
DType arithmeticDType(std::span<const TensorType> operands, std::span<const TensorType> results);

// Times of ops, graph nodes and plan instructions on one cluster.
class CostModel {
 public:
  explicit CostModel(ClusterSpec cluster) : cluster_(std::move(cluster)) {}
  const ClusterSpec& cluster() const { return cluster_; }

  // FLOPs and bytes of one instance of op `def`: its cost rule's, or, when the rule counts nothing
  // (a lowering-specific attribute its shape rule rejects), the bytes of its operands and results.
  static OpCost kernelCost(const OpDef& def, std::span<const TensorType> operands, std::span<const TensorType> results,
                           const AttrMap& attrs);
  // Roofline time of one instance of op `def` (kernelCost's FLOPs and bytes, the device's efficiency
  // for it), `missed_bytes` of them from memory on a device with a cache model.
  double kernelTime(const OpDef& def, std::span<const TensorType> operands, std::span<const TensorType> results,
                    const AttrMap& attrs, double missed_bytes = 0) const;

  // Time of node `node_index` of a per-device graph, as the pipeline stage balancer counts it:
  // views (reshape, ...) and grad_all_reduce cost nothing; collectives take their alpha-beta time
  // over a group of `group_size` ranks (within a host when it fits one); send takes one transfer
  // (between hosts when the cluster has several) and recv nothing (the send carries it); every
  // other op its roofline time.
  double nodeTime(const Graph& graph, int32_t node_index) const;

  // Time of one plan instruction on `rank`: kernels by roofline, copies by bytes read and written,
  // collectives and send/recv by alpha-beta over the link their ranks share (a recv's time is the
  // transfer it waits for). `missed_bytes`: the bytes of a kernel or copy the cache does not hold
  // (cacheMissBytes), on a device with a cache model. Errors name the instruction when its op or
  // buffers are unknown.
  Expected<double> instructionTime(const planpb::RankPlan& rank, const planpb::Instruction& instruction,
                                   double missed_bytes = 0) const;

 private:
  ClusterSpec cluster_;
};

}  // namespace cleave
