// SPMD partitioning: one device's graph of a model split over the dp and tp axes of a device mesh.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"
#include "ir/device_mesh.h"

namespace cleave {

// How a value is laid out over the mesh: per dim, the mesh axis splitting it into equal blocks (or
// none: the dim is whole on every device), and per mesh axis whether each device holds only a
// partial sum (or partial mean) of the value. Axes are positions in the mesh's axis list.
struct ValueSharding {
  enum class Partial : uint8_t { kNone, kSum, kMean };
  static constexpr int8_t kReplicated = -1;

  std::vector<int8_t> dim_axis;  // per dim: kReplicated or the index of a mesh axis
  std::vector<Partial> partial;  // per mesh axis

  // Whole on every device: `rank` dims, none split, over a mesh of `num_axes` axes.
  static ValueSharding replicated(size_t rank, int num_axes) {
    return ValueSharding{std::vector<int8_t>(rank, kReplicated), std::vector<Partial>(num_axes, Partial::kNone)};
  }
  bool isPartial() const;
  // True when no dim is split over mesh axis `axis` and the value is not partial over it.
  bool replicatedOver(int8_t axis) const;
  bool operator==(const ValueSharding&) const = default;
  // Text form with the axes named as in `mesh`, e.g. "[dp,-,tp] partial(tp:sum)".
  std::string str(const DeviceMesh& mesh) const;
};

// Partitions `global` (forward graph, shapes fixed at the global batch) for the device at `coord`
// of `mesh`, in one pass over the nodes in program order (the mesh may have any axes; values are
// split over its axes named dp and tp, kDataAxis and kTensorAxis, and stay whole over the others):
//  - data inputs are split over dp along dim 0 (the batch must divide by dp);
//  - with tp > 1, a weight op (matmul, gemm or conv2d) meeting a parameter that has no layout yet
//    (directly, or through a transpose, which waits for its user) and an input not split over tp
//    splits the weight's output-feature dim over tp (Megatron's column split); a weight op whose
//    input arrives split on its reduction dim takes the weight split the same way (the row split),
//    giving a partial sum (a gemm adding c adds it after the all-reduce); an embedding lookup
//    (gather on dim 0 of such a parameter) splits the table's rows, looks up the ids in this
//    device's block and gives a partial sum (vocabulary parallelism), and a softmax cross-entropy of
//    logits split along the classes combines each device's share by all-reduces over tp;
//  - every other layout follows from the ops' sharding rules (ir/op_table.h): split factors pass
//    through, a split reduction factor makes a partial sum, and operands that do not fit the
//    chosen factors are resharded (all_gather, shard_slice, all_reduce for partial sums);
//  - where a value replicated over an axis enters a computation split over it, grad_all_reduce
//    marks it, so its gradient is summed over the axis (the data-parallel gradient all-reduce, and
//    Megatron's "f");
//  - outputs are whole, except dim 0 of batch outputs, which stays split over dp.
// Parameters of the result hold their block of the whole tensor (Param::full_shape/shard_offset;
// stored data is cut to the block). A parameter with stored data whose only use is a reshape (a
// fused projection's weight as [parts, in, out], passes/partition/fused_projections.h) is held in
// the reshaped shape, which its block and layout are of (Param::model keeps the model's). A parameter only a state update writes takes its new value's
// layout (the channel block of BatchNorm's running statistics).
// Errors: a batch not divisible by dp (kBadInput), a node that cannot be split (kInternal, naming it).
// `whole` names parameters to keep whole on every device (a parameter pipeline stages share, which
// every stage must lay out alike); where `report` is given it receives what tensor parallelism did
// to the weights of weight ops.
//
// With `sequence_parallel` (Megatron's sequence parallelism, Korthikanti et al. 2022), a partial sum
// over tp of a [batch, sequence, ...] activation (rank 3 or more, its sequence dim 1 dividing by tp)
// that feeds an op partitioned by its rule is reduce-scattered along the sequence instead of
// all-reduced: layer norms, residual adds and other elementwise work between the tp regions run
// on 1/tp of the tokens, and the next weight op all-gathers its input along the sequence before its
// column split. The gradients follow (an all-gather's is a reduce-scatter); weights replicated over
// tp but used on split tokens (a layer norm's) have their gradients summed over tp.
struct TensorParallelReport;
Expected<Graph> partitionForDevice(const Graph& global, const DeviceMesh& mesh, MeshCoord coord,
                                   TensorParallelReport* report = nullptr, const std::set<std::string>& whole = {},
                                   bool sequence_parallel = false);

// The weights (rank >= 2) of the weight ops (matmul, gemm, conv2d; through transposes and reshapes
// of the weight), named with their type ("%h.0.attn.c_attn.weight f32[32,96]"): those split over the
// tp axis and those left whole on every tp rank, with their bytes; `splittable` lists the whole ones
// whose output features divide by tp (a column split fits them, but their layer's layout did not follow);
// `kept_whole` those left whole by choice because their column split would be gathered before any
// use (a norm over their outputs: BERT's MLM head, a ViT's patch embedding; Megatron keeps them whole).
struct TensorParallelReport {
  std::vector<std::string> split, whole, splittable, kept_whole;
  int64_t split_bytes = 0, whole_bytes = 0;
  int sequence_splits = 0;  // partial sums reduce-scattered along the sequence (sequence_parallel)
};

}  // namespace cleave
