// Communication ops: collectives over one mesh axis and pipeline sends/receives, as graph nodes.
// Per-device graphs carry them; plan lowering turns each into a communication instruction.
#include "ir/op_table.h"
#include "ir/ops/gradient_support.h"
#include "ir/ops/op_rules.h"

namespace cleave::ops {
namespace {

using Types = std::vector<TensorType>;

AttrSpec axisAttr() { return requiredAttr("axis", AttrKind::kString); }
AttrSpec groupSizeAttr() { return requiredAttr("group_size", AttrKind::kInt); }

Expected<int64_t> checkedGroup(const OpContext& c) {
  const std::string& axis = c.getString("axis");
  if (axis.empty()) return attrError(c, "axis", "must name a mesh axis (dp, tp)");
  int64_t n = c.getInt("group_size");
  if (n < 1) return attrError(c, "group_size", "must be at least 1, got " + std::to_string(n));
  return n;
}

Expected<int64_t> checkedDim(const OpContext& c, std::string_view attr) {
  int64_t dim = normalizeAxis(c.getInt(attr), c.operands[0].rank());
  if (dim < 0)
    return attrError(c, attr, "is " + std::to_string(c.getInt(attr)) + ", out of range for " + c.operands[0].str());
  return dim;
}

// all_reduce(x, ...) and grad_all_reduce(x, ...): every result has its operand's type.
Expected<Types> sameTypes(const OpContext& c) {
  CLEAVE_TRY(checkedGroup(c).status());
  if (c.def.id == OpId::all_reduce) {
    const std::string& reduce = c.getString("reduce");
    if (reduce != "sum" && reduce != "mean" && reduce != "max")
      return attrError(c, "reduce", "must be sum, mean or max, got '" + reduce + "'");
  }
  return Types(c.operands.begin(), c.operands.end());
}

// Dim `dim` of `type` multiplied by the group size `n`; an error when the product overflows int64.
Status growDim(const OpContext& c, TensorType& type, int64_t dim, int64_t n, std::string_view attr) {
  std::optional<int64_t> grown = checkedProduct(std::vector<int64_t>{type.shape[dim], n});
  if (!grown)
    return operandShapeError(c, 0, std::string(attr) + " " + std::to_string(dim) + " times the group size " +
                                       std::to_string(n) + " does not fit in int64");
  type.shape[dim] = *grown;
  return Status::ok();
}

// all_gather grows `dim` group_size times; reduce_scatter and shard_slice divide it.
Expected<Types> resizedDimType(const OpContext& c) {
  CLEAVE_ASSIGN_OR_RETURN(int64_t n, checkedGroup(c));
  CLEAVE_ASSIGN_OR_RETURN(int64_t dim, checkedDim(c, "dim"));
  TensorType out = c.operands[0];
  if (c.def.id == OpId::all_gather) {
    CLEAVE_TRY(growDim(c, out, dim, n, "dim"));
  } else {
    if (out.shape[dim] % n != 0)
      return operandShapeError(c, 0, "dim " + std::to_string(dim) + " is not divisible by the group size " +
                                         std::to_string(n));
    out.shape[dim] /= n;
  }
  return Types{out};
}

// all_to_all: split_dim is cut into group_size blocks sent to the group; blocks received are
// joined along concat_dim.
Expected<Types> allToAllType(const OpContext& c) {
  CLEAVE_ASSIGN_OR_RETURN(int64_t n, checkedGroup(c));
  CLEAVE_ASSIGN_OR_RETURN(int64_t split, checkedDim(c, "split_dim"));
  CLEAVE_ASSIGN_OR_RETURN(int64_t concat, checkedDim(c, "concat_dim"));
  TensorType out = c.operands[0];
  if (out.shape[split] % n != 0)
    return operandShapeError(c, 0, "split_dim " + std::to_string(split) + " is not divisible by the group size " +
                                       std::to_string(n));
  out.shape[split] /= n;
  CLEAVE_TRY(growDim(c, out, concat, n, "concat_dim"));
  return Types{out};
}

Expected<Types> sendType(const OpContext& c) {
  if (c.getInt("peer_stage") < 0) return attrError(c, "peer_stage", "must be a stage index");
  return Types{};
}

Expected<Types> recvType(const OpContext& c) {
  if (c.getInt("peer_stage") < 0) return attrError(c, "peer_stage", "must be a stage index");
  std::optional<DType> dtype = parseDType(c.getString("dtype"));
  if (!dtype) return attrError(c, "dtype", "is not a dtype name: '" + c.getString("dtype") + "'");
  for (int64_t d : c.getInts("shape"))
    if (d < 0) return attrError(c, "shape", "has a negative dim");
  return Types{TensorType{*dtype, c.getInts("shape")}};
}

// Communication moves bytes but does no arithmetic on the device (reductions are counted as bytes).
OpCost communicationCost(const OpContext& c) {
  OpCost cost;
  for (const TensorType& t : c.operands) cost.bytes += static_cast<double>(t.bytes());
  for (const TensorType& t : inferredResults(c)) cost.bytes += static_cast<double>(t.bytes());
  return cost;
}

// Communication ops are inserted after sharding decisions: every dim is its own pass-through factor.
ShardingRule independentDims(const OpContext& c) {
  std::vector<TensorType> results = inferredResults(c);
  ShardingRuleBuilder rule(c.operands, results);
  for (int i = 0; i < static_cast<int>(c.operands.size()); ++i)
    for (int d = 0; d < static_cast<int>(c.operands[i].rank()); ++d)
      rule.addOperandFactor(i, d, FactorKind::kNeedReplication);
  for (int i = 0; i < static_cast<int>(results.size()); ++i)
    for (int d = 0; d < static_cast<int>(results[i].rank()); ++d)
      rule.addResultFactor(i, d, FactorKind::kNeedReplication);
  return rule.build();
}

OpDef communicationOp(OpId id, std::string_view name, std::string_view summary, std::vector<AttrSpec> attrs,
                      ShapeRule shape) {
  OpDef def{.id = id, .name = name, .summary = summary, .attrs = std::move(attrs), .shape = shape,
            .cost = checkedCostRule<communicationCost>, .sharding = checkedShardingRule<independentDims>};
  return def;
}

// ---- Gradient rules (see ir/ops/gradient_support.h) ----
// Cotangents of replicated values are whole on every device.

AttrMap groupAttrs(const GradientContext& g, std::initializer_list<const char*> extra = {}) {
  AttrMap attrs = copyAttrs(g, {"axis", "group_size"});
  for (const char* name : extra) {
    auto it = g.node.attrs.find(name);
    if (it != g.node.attrs.end()) attrs.emplace(name, it->second);
  }
  return attrs;
}

// y = sum over devices of x: each device's x gets the whole dy; mean also divides by the group size.
Status allReduceGradient(GradientContext& g) {
  const std::string& reduce = forwardAttrs(g).getString("reduce");
  if (reduce == "max")
    return Status::badInput(nodeContext(g.graph, g.node) + "all_reduce with reduce = max has no gradient");
  double n = static_cast<double>(forwardAttrs(g).getInt("group_size"));
  for (size_t i = 0; i < g.node.operands.size(); ++i) {
    ValueId grad = g.result_grads[i];
    if (grad != kNoValue && reduce == "mean") grad = g.emit(OpId::mul, {grad, g.scalar(1.0 / n, dtypeOf(g, grad))});
    g.operand_grads[i] = grad;
  }
  return g.status;
}

// The identity whose users are split over the axis: their gradients are partial sums.
Status gradAllReduceGradient(GradientContext& g) {
  AttrMap attrs = groupAttrs(g);
  attrs.emplace("reduce", std::string("sum"));
  g.operand_grads[0] = g.emit(OpId::all_reduce, {dy(g)}, std::move(attrs));
  return g.status;
}

// What allGatherGradient communicates: a reduce-scatter with sum_gradient, else nothing.
std::optional<CommKind> allGatherGradientCommunication(const OpContext& ctx) {
  if (ctx.getInt("sum_gradient") != 0) return CommKind::kReduceScatter;
  return std::nullopt;
}

// all_gather: this device's block of dy, which is the same on every device; with sum_gradient
// (each device's users computed a part of it, as a column-split weight op does from a value
// gathered along the sequence), the sum of every device's dy, reduce-scattered.
Status allGatherGradient(GradientContext& g) {
  if (forwardAttrs(g).getInt("sum_gradient") != 0) {
    AttrMap attrs = groupAttrs(g, {"dim"});
    attrs.emplace("reduce", std::string("sum"));
    g.operand_grads[0] = g.emit(OpId::reduce_scatter, {dy(g)}, std::move(attrs));
    return g.status;
  }
  g.operand_grads[0] = g.emit(OpId::shard_slice, {dy(g)}, groupAttrs(g, {"dim"}));
  return g.status;
}

// reduce_scatter and shard_slice: the device's block of dy comes back whole from every device.
Status gatherBackGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::all_gather, {dy(g)}, groupAttrs(g, {"dim"}));
  return g.status;
}

Status allToAllGradient(GradientContext& g) {
  AttrMap attrs = groupAttrs(g);
  OpContext forward = forwardAttrs(g);
  attrs.emplace("split_dim", forward.getInt("concat_dim"));
  attrs.emplace("concat_dim", forward.getInt("split_dim"));
  g.operand_grads[0] = g.emit(OpId::all_to_all, {dy(g)}, std::move(attrs));
  return g.status;
}

}  // namespace

void addCommunicationOps(std::vector<OpDef>& table) {
  OpDef all_reduce = communicationOp(OpId::all_reduce, "all_reduce",
                                     "sums (mean, max) each operand over the devices of a mesh axis (over the "
                                     "pipeline axis: only `stages`, when given)",
                                     {axisAttr(), groupSizeAttr(), optionalString("reduce", "sum"), optionalInts("stages", {})},
                                     checkedShapeRule<sameTypes>);
  all_reduce.max_operands = -1;  // one bucket of gradients
  table.push_back(std::move(all_reduce));
  table.push_back(communicationOp(OpId::grad_all_reduce, "grad_all_reduce",
                                  "identity; its gradient is summed over a mesh axis (a replicated value "
                                  "entering a split computation)",
                                  {axisAttr(), groupSizeAttr()}, checkedShapeRule<sameTypes>));
  table.push_back(communicationOp(OpId::all_gather, "all_gather",
                                  "joins every device's block along dim, in the axis's device order",
                                  {axisAttr(), groupSizeAttr(), requiredAttr("dim", AttrKind::kInt),
                                   optionalInt("sum_gradient", 0)},
                                  checkedShapeRule<resizedDimType>));
  table.push_back(communicationOp(OpId::reduce_scatter, "reduce_scatter",
                                  "sums over a mesh axis and keeps this device's block of dim",
                                  {axisAttr(), groupSizeAttr(), requiredAttr("dim", AttrKind::kInt),
                                   optionalString("reduce", "sum")},
                                  checkedShapeRule<resizedDimType>));
  table.push_back(communicationOp(OpId::shard_slice, "shard_slice",
                                  "this device's block of dim (no communication)",
                                  {axisAttr(), groupSizeAttr(), requiredAttr("dim", AttrKind::kInt)},
                                  checkedShapeRule<resizedDimType>));
  table.push_back(communicationOp(OpId::all_to_all, "all_to_all",
                                  "cuts split_dim into blocks, one per device, and joins those received "
                                  "along concat_dim",
                                  {axisAttr(), groupSizeAttr(), requiredAttr("split_dim", AttrKind::kInt),
                                   requiredAttr("concat_dim", AttrKind::kInt)},
                                  checkedShapeRule<allToAllType>));
  OpDef send = communicationOp(OpId::send, "send", "sends x to the same device position of pipeline stage peer_stage",
                               {requiredAttr("peer_stage", AttrKind::kInt), requiredAttr("tag", AttrKind::kInt)},
                               checkedShapeRule<sendType>);
  send.side_effects = true;
  table.push_back(std::move(send));
  OpDef recv = communicationOp(OpId::recv, "recv",
                               "receives a tensor of the given type sent by pipeline stage peer_stage",
                               {requiredAttr("peer_stage", AttrKind::kInt), requiredAttr("tag", AttrKind::kInt),
                                requiredAttr("shape", AttrKind::kInts), requiredAttr("dtype", AttrKind::kString)},
                               checkedShapeRule<recvType>);
  recv.min_operands = recv.max_operands = 0;
  recv.side_effects = true;
  table.push_back(std::move(recv));

  // What each op moves, and what its gradient moves (docs/ops.md): grad_all_reduce is an identity
  // whose gradient is all-reduced; reduce_scatter's and shard_slice's gradients are all-gathers;
  // all_reduce's gradient moves nothing, and all_gather's reduce-scatters with sum_gradient
  // (allGatherGradient), else moves nothing.
  appendedDef(table, OpId::all_reduce).communication = CommKind::kAllReduce;
  appendedDef(table, OpId::all_gather).communication = CommKind::kAllGather;
  appendedDef(table, OpId::reduce_scatter).communication = CommKind::kReduceScatter;
  appendedDef(table, OpId::all_to_all).communication = CommKind::kAllToAll;
  appendedDef(table, OpId::send).communication = CommKind::kSend;
  appendedDef(table, OpId::recv).communication = CommKind::kRecv;
  appendedDef(table, OpId::grad_all_reduce).gradient_communication = CommKind::kAllReduce;
  appendedDef(table, OpId::reduce_scatter).gradient_communication = CommKind::kAllGather;
  appendedDef(table, OpId::shard_slice).gradient_communication = CommKind::kAllGather;
  appendedDef(table, OpId::all_to_all).gradient_communication = CommKind::kAllToAll;
  appendedDef(table, OpId::all_gather).gradient_communication_rule = allGatherGradientCommunication;
  appendedDef(table, OpId::grad_all_reduce).view = true;  // the forward is an identity

  // Gradient rules.
  appendedDef(table, OpId::all_reduce).gradient = allReduceGradient;
  appendedDef(table, OpId::grad_all_reduce).gradient = gradAllReduceGradient;
  appendedDef(table, OpId::all_gather).gradient = allGatherGradient;
  appendedDef(table, OpId::reduce_scatter).gradient = gatherBackGradient;
  appendedDef(table, OpId::shard_slice).gradient = gatherBackGradient;
  appendedDef(table, OpId::all_to_all).gradient = allToAllGradient;
}

}  // namespace cleave::ops
