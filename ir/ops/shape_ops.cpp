// Shape and data-movement ops: reshape, flatten, transpose, concat, split, slice, gather, expand,
// squeeze, unsqueeze, trilu, constant.
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "ir/ops/gradient_support.h"
#include "ir/ops/op_rules.h"
#include "ir/ops/reference_support.h"

namespace cleave::ops {

Expected<std::vector<int64_t>> transposePerm(const OpContext& ctx) {
  int64_t rank = ctx.operands[0].rank();
  if (ctx.getInts("perm").empty()) {
    std::vector<int64_t> reversed(static_cast<size_t>(rank));
    for (int64_t i = 0; i < rank; ++i) reversed[i] = rank - 1 - i;
    return reversed;
  }
  CLEAVE_ASSIGN_OR_RETURN(std::vector<int64_t> perm, resolveAxes(ctx, "perm", rank, "operand 0"));
  if (static_cast<int64_t>(perm.size()) != rank)
    return attrError(ctx, "perm", "is " + intsStr(ctx.getInts("perm")) + ", not a permutation of operand 0's " +
                                      std::to_string(rank) + " dims");
  return perm;
}

// Per ONNX Slice (op_rules.h).
Expected<std::vector<SliceAxis>> resolveSlice(const OpContext& ctx) {
  const std::vector<int64_t>& starts = ctx.getInts("starts");
  const std::vector<int64_t>& ends = ctx.getInts("ends");
  const std::vector<int64_t>& steps = ctx.getInts("steps");
  const Shape& in = ctx.operands[0].shape;
  size_t n = starts.size();
  if (ends.size() != n)
    return attrError(ctx, "ends", "has " + std::to_string(ends.size()) + " values, 'starts' has " + std::to_string(n));
  if (!steps.empty() && steps.size() != n)
    return attrError(ctx, "steps", "has " + std::to_string(steps.size()) + " values, 'starts' has " + std::to_string(n));
  std::vector<int64_t> axes;
  if (ctx.getInts("axes").empty()) {
    if (n > in.size())
      return attrError(ctx, "starts", "has " + std::to_string(n) + " values, more than operand 0's rank " +
                                          std::to_string(in.size()));
    for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
  } else {
    CLEAVE_ASSIGN_OR_RETURN(axes, resolveAxes(ctx, "axes", ctx.operands[0].rank(), "operand 0"));
    if (axes.size() != n)
      return attrError(ctx, "axes", "has " + std::to_string(axes.size()) + " values, 'starts' has " + std::to_string(n));
  }
  std::vector<SliceAxis> resolved;
  for (size_t i = 0; i < n; ++i) {
    int64_t step = steps.empty() ? 1 : steps[i];
    if (step == 0) return attrError(ctx, "steps", "is " + intsStr(steps) + ", steps must be non-zero");
    int64_t dim = in[axes[i]];
    int64_t start = starts[i] < 0 ? starts[i] + dim : starts[i];  // no overflow: dim >= 0
    int64_t end = ends[i] < 0 ? ends[i] + dim : ends[i];
    int64_t count = 0;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      if (end > start) count = (end - start - 1) / step + 1;
    } else if (dim > 0) {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      uint64_t magnitude = 0 - static_cast<uint64_t>(step);  // |step|, also for INT64_MIN
      if (start > end) count = static_cast<int64_t>(static_cast<uint64_t>(start - end - 1) / magnitude + 1);
    }
    resolved.push_back({axes[i], start, step, count});
  }
  return resolved;
}

namespace {

// ---- Shape rules ----

// reshape: `shape` with at most one -1 (inferred) and 0 meaning "copy the input dim at this index".
Expected<std::vector<TensorType>> reshapeShape(const OpContext& ctx) {
  const Shape& in = ctx.operands[0].shape;
  const std::vector<int64_t>& target = ctx.getInts("shape");
  Shape out(target.size());
  int64_t inferred = -1;  // index of the -1 entry
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t v = target[i];
    if (v == -1) {
      if (inferred >= 0)
        return attrError(ctx, "shape", "is " + intsStr(target) + ", it has more than one -1 (at " +
                                           std::to_string(inferred) + " and " + std::to_string(i) + ")");
      inferred = static_cast<int64_t>(i);
      out[i] = 1;  // placeholder, so the product below covers the other dims
    } else if (v == 0) {
      if (i >= in.size())
        return attrError(ctx, "shape", "is " + intsStr(target) + ", its 0 at index " + std::to_string(i) +
                                           " copies a dim operand 0 (rank " + std::to_string(in.size()) +
                                           ") does not have");
      out[i] = in[i];
    } else if (v < -1) {
      return attrError(ctx, "shape", "is " + intsStr(target) + ", dims must be >= -1");
    } else {
      out[i] = v;
    }
  }
  std::optional<int64_t> known = checkedProduct(out);
  if (!known) return attrError(ctx, "shape", "is " + intsStr(target) + ", which has more elements than fit in int64");
  int64_t numel = ctx.operands[0].numel();
  std::string mismatch = "its " + std::to_string(numel) + " elements cannot be reshaped to " + intsStr(target);
  if (inferred >= 0) {
    if (*known == 0) return operandShapeError(ctx, 0, mismatch + ": the -1 is ambiguous when other dims are 0");
    if (numel % *known != 0) return operandShapeError(ctx, 0, mismatch);
    out[inferred] = numel / *known;
  } else if (*known != numel) {
    return operandShapeError(ctx, 0, mismatch);
  }
  return std::vector<TensorType>{{ctx.operands[0].dtype, out}};
}

// flatten: axis in [-rank, rank]; dims before it and dims from it are each multiplied together.
Expected<int64_t> flattenAxis(const OpContext& ctx) {
  int64_t rank = ctx.operands[0].rank();
  int64_t axis = ctx.getInt("axis");
  if (axis < -rank || axis > rank)
    return attrError(ctx, "axis", "is " + std::to_string(axis) + ", out of range [-" + std::to_string(rank) + ", " +
                                      std::to_string(rank) + "] for operand 0 of rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

Expected<std::vector<TensorType>> flattenShape(const OpContext& ctx) {
  CLEAVE_ASSIGN_OR_RETURN(int64_t axis, flattenAxis(ctx));
  const Shape& in = ctx.operands[0].shape;
  // Operand shapes are checked, so products of their dims fit.
  int64_t outer = *checkedProduct(std::span(in).first(axis));
  int64_t inner = *checkedProduct(std::span(in).subspan(axis));
  return std::vector<TensorType>{{ctx.operands[0].dtype, {outer, inner}}};
}

Expected<std::vector<TensorType>> transposeShape(const OpContext& ctx) {
  CLEAVE_ASSIGN_OR_RETURN(std::vector<int64_t> perm, transposePerm(ctx));
  const Shape& in = ctx.operands[0].shape;
  Shape out;
  for (int64_t p : perm) out.push_back(in[p]);
  return std::vector<TensorType>{{ctx.operands[0].dtype, out}};
}

// concat: operands of one dtype and rank (>= 1), equal except along axis.
Expected<std::vector<TensorType>> concatShape(const OpContext& ctx) {
  CLEAVE_TRY(requireRank(ctx, 0, 1));
  const Shape& first = ctx.operands[0].shape;
  CLEAVE_ASSIGN_OR_RETURN(int64_t axis, resolveAxis(ctx, "axis", ctx.operands[0].rank(), 0));
  Shape out = first;
  for (int i = 1; i < static_cast<int>(ctx.operands.size()); ++i) {
    CLEAVE_TRY(requireSameDType(ctx, i, 0));
    const Shape& shape = ctx.operands[i].shape;
    if (shape.size() != first.size())
      return operandShapeError(ctx, i, "needs operand 0's rank " + std::to_string(first.size()));
    for (size_t d = 0; d < shape.size(); ++d)
      if (static_cast<int64_t>(d) != axis && shape[d] != first[d])
        return operandShapeError(ctx, i, "its dim " + std::to_string(d) + " (" + std::to_string(shape[d]) +
                                             ") must equal operand 0's (" + std::to_string(first[d]) +
                                             "); only the axis " + std::to_string(axis) + " may differ");
    std::optional<int64_t> sum = checkedAdd(out[axis], shape[axis]);
    if (!sum) return operandShapeError(ctx, i, "which makes the concatenated axis too long");
    out[axis] = *sum;
  }
  return std::vector<TensorType>{{ctx.operands[0].dtype, out}};
}

// split: sizes (each >= 0) must sum to the axis dim; one result per size.
Expected<std::vector<TensorType>> splitShape(const OpContext& ctx) {
  CLEAVE_TRY(requireRank(ctx, 0, 1));
  CLEAVE_ASSIGN_OR_RETURN(int64_t axis, resolveAxis(ctx, "axis", ctx.operands[0].rank(), 0));
  const std::vector<int64_t>& sizes = ctx.getInts("sizes");
  const Shape& in = ctx.operands[0].shape;
  if (sizes.empty()) return attrError(ctx, "sizes", "is empty; split needs at least one size");
  std::optional<int64_t> total = 0;
  for (int64_t size : sizes) {
    if (size < 0) return attrError(ctx, "sizes", "is " + intsStr(sizes) + ", sizes must be >= 0");
    total = checkedAdd(*total, size);
    if (!total) return attrError(ctx, "sizes", "is " + intsStr(sizes) + ", whose sum overflows int64");
  }
  if (*total != in[axis])
    return attrError(ctx, "sizes", "is " + intsStr(sizes) + ", which sums to " + std::to_string(*total) +
                                       ", not operand 0's dim " + std::to_string(axis) + " (" + std::to_string(in[axis]) +
                                       ")");
  std::vector<TensorType> results;
  for (int64_t size : sizes) {
    Shape out = in;
    out[axis] = size;
    results.push_back({ctx.operands[0].dtype, out});
  }
  return results;
}

Expected<std::vector<TensorType>> sliceShape(const OpContext& ctx) {
  CLEAVE_ASSIGN_OR_RETURN(std::vector<SliceAxis> sliced, resolveSlice(ctx));
  Shape out = ctx.operands[0].shape;
  for (const SliceAxis& s : sliced) out[s.axis] = s.count;
  return std::vector<TensorType>{{ctx.operands[0].dtype, out}};
}

// gather: data (rank >= 1) indexed along axis by i64/i32 indices of any rank; a padding_idx (an
// embedding's, along axis 0) is a row of data.
Expected<std::vector<TensorType>> gatherShape(const OpContext& ctx) {
  CLEAVE_TRY(requireRank(ctx, 0, 1));
  CLEAVE_TRY(requireIndexType(ctx, 1));
  CLEAVE_ASSIGN_OR_RETURN(int64_t axis, resolveAxis(ctx, "axis", ctx.operands[0].rank(), 0));
  if (const int64_t padding = ctx.getInt("padding_idx");
      padding != -1 && (axis != 0 || padding < 0 || padding >= ctx.operands[0].shape[0]))
    return attrError(ctx, "padding_idx", "is " + std::to_string(padding) + ": -1 (none), or a row of operand 0 (" +
                                             ctx.operands[0].str() + ") with axis 0");
  const Shape& data = ctx.operands[0].shape;
  const Shape& indices = ctx.operands[1].shape;
  Shape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  return std::vector<TensorType>{{ctx.operands[0].dtype, out}};
}

// gather_elements: data (rank >= 1) and i64/i32 indices of the same rank, each index dim other than
// axis at most data's; the result has the indices' shape.
Expected<std::vector<TensorType>> gatherElementsShape(const OpContext& ctx) {
  CLEAVE_TRY(requireRank(ctx, 0, 1));
  CLEAVE_TRY(requireIndexType(ctx, 1));
  CLEAVE_ASSIGN_OR_RETURN(int64_t axis, resolveAxis(ctx, "axis", ctx.operands[0].rank(), 0));
  const Shape &data = ctx.operands[0].shape, &indices = ctx.operands[1].shape;
  if (indices.size() != data.size())
    return operandShapeError(ctx, 1, "which must have the rank of operand 0 (" + ctx.operands[0].str() + ")");
  for (size_t d = 0; d < data.size(); ++d)
    if (static_cast<int64_t>(d) != axis && indices[d] > data[d])
      return operandShapeError(ctx, 1, "whose dim " + std::to_string(d) + " exceeds operand 0's (" +
                                           ctx.operands[0].str() + ")");
  return std::vector<TensorType>{{ctx.operands[0].dtype, indices}};
}

// gather_nd (ONNX GatherND): data of rank r, i64/i32 indices of rank q >= 1 whose last dim k indexes
// data's dims batch_dims..batch_dims+k-1; the first batch_dims dims of both match. The result is
// indices.shape[:-1] + data.shape[batch_dims+k:].
Expected<std::vector<TensorType>> gatherNdShape(const OpContext& ctx) {
  CLEAVE_TRY(requireRank(ctx, 0, 1));
  CLEAVE_TRY(requireRank(ctx, 1, 1));
  CLEAVE_TRY(requireIndexType(ctx, 1));
  const Shape &data = ctx.operands[0].shape, &indices = ctx.operands[1].shape;
  const int64_t batch_dims = ctx.getInt("batch_dims"), k = indices.back();
  const int64_t r = static_cast<int64_t>(data.size()), q = static_cast<int64_t>(indices.size());
  if (batch_dims < 0 || batch_dims >= std::min(r, q))
    return attrError(ctx, "batch_dims", "is " + std::to_string(batch_dims) + ", must be below both operands' ranks");
  if (k < 1 || batch_dims + k > r)
    return operandShapeError(ctx, 1, "whose last dim (" + std::to_string(k) + ") must be in 1.." +
                                         std::to_string(r - batch_dims) + " for operand 0 (" + ctx.operands[0].str() + ")");
  for (int64_t d = 0; d < batch_dims; ++d)
    if (indices[d] != data[d])
      return operandShapeError(ctx, 1, "whose batch dim " + std::to_string(d) + " differs from operand 0's (" +
                                           ctx.operands[0].str() + ")");
  Shape out(indices.begin(), indices.end() - 1);
  out.insert(out.end(), data.begin() + batch_dims + k, data.end());
  return std::vector<TensorType>{{ctx.operands[0].dtype, out}};
}

// scatter_elements (ONNX ScatterElements, torch.scatter): indices and updates of one shape, as
// gather_elements' indices and result; scatter_nd (ONNX ScatterND): updates of gather_nd's result
// shape. The result is data's type; reduction is none, add, mul, max or min.
Expected<std::vector<TensorType>> scatterShape(const OpContext& ctx) {
  const std::string& reduction = ctx.getString("reduction");
  if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" && reduction != "min")
    return attrError(ctx, "reduction", "is \"" + reduction + "\", must be none, add, mul, max or min");
  if (ctx.operands[2].dtype != ctx.operands[0].dtype)
    return operandShapeError(ctx, 2, "whose dtype must be operand 0's (" + ctx.operands[0].str() + ")");
  if (reduction != "none") CLEAVE_TRY(requireNumeric(ctx, 0));
  const bool elements = ctx.def.id == OpId::scatter_elements;
  const std::vector<TensorType> gather_operands = {ctx.operands[0], ctx.operands[1]};
  const AttrMap gather_attrs = elements ? AttrMap{{"axis", ctx.getInt("axis")}} : AttrMap{};
  CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorType> read,
                          inferResultTypes(opDef(elements ? OpId::gather_elements : OpId::gather_nd), gather_operands,
                                           gather_attrs));
  if (read[0].shape != ctx.operands[2].shape)
    return operandShapeError(ctx, 2, "which must be " + TensorType{ctx.operands[0].dtype, read[0].shape}.str() +
                                         " for these indices");
  return std::vector<TensorType>{ctx.operands[0]};
}

// expand: numpy broadcast of x's shape and `shape` (entries >= 0).
Expected<std::vector<TensorType>> expandShape(const OpContext& ctx) {
  const std::vector<int64_t>& target = ctx.getInts("shape");
  for (int64_t d : target)
    if (d < 0) return attrError(ctx, "shape", "is " + intsStr(target) + ", dims must be >= 0");
  Shape out;
  if (!broadcastShapes(ctx.operands[0].shape, target, out))
    return operandShapeError(ctx, 0, "which does not broadcast with attribute 'shape' " + intsStr(target));
  return std::vector<TensorType>{{ctx.operands[0].dtype, out}};
}

// The dims squeeze removes: `axes` (each of size 1), or every size-1 dim when it is empty.
Expected<std::vector<bool>> squeezedDims(const OpContext& ctx) {
  const Shape& in = ctx.operands[0].shape;
  CLEAVE_ASSIGN_OR_RETURN(std::vector<int64_t> axes, resolveAxes(ctx, "axes", ctx.operands[0].rank(), "operand 0"));
  std::vector<bool> removed(in.size(), false);
  if (axes.empty()) {
    for (size_t i = 0; i < in.size(); ++i) removed[i] = in[i] == 1;
    return removed;
  }
  for (int64_t a : axes) {
    if (in[a] != 1)
      return operandShapeError(ctx, 0, "its dim " + std::to_string(a) + " has size " + std::to_string(in[a]) +
                                           ", so attribute 'axes' cannot squeeze it");
    removed[a] = true;
  }
  return removed;
}

Expected<std::vector<TensorType>> squeezeShape(const OpContext& ctx) {
  CLEAVE_ASSIGN_OR_RETURN(std::vector<bool> removed, squeezedDims(ctx));
  const Shape& in = ctx.operands[0].shape;
  Shape out;
  for (size_t i = 0; i < in.size(); ++i)
    if (!removed[i]) out.push_back(in[i]);
  return std::vector<TensorType>{{ctx.operands[0].dtype, out}};
}

// The result dims unsqueeze inserts: `axes` resolved against the result's rank.
Expected<std::vector<bool>> insertedDims(const OpContext& ctx) {
  int64_t out_rank = ctx.operands[0].rank() + static_cast<int64_t>(ctx.getInts("axes").size());
  CLEAVE_ASSIGN_OR_RETURN(std::vector<int64_t> axes, resolveAxes(ctx, "axes", out_rank, "the result"));
  std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
  for (int64_t a : axes) inserted[a] = true;
  return inserted;
}

Expected<std::vector<TensorType>> unsqueezeShape(const OpContext& ctx) {
  CLEAVE_ASSIGN_OR_RETURN(std::vector<bool> inserted, insertedDims(ctx));
  const Shape& in = ctx.operands[0].shape;
  Shape out;
  size_t next_in = 0;
  for (bool is_new : inserted) out.push_back(is_new ? 1 : in[next_in++]);
  return std::vector<TensorType>{{ctx.operands[0].dtype, out}};
}

// trilu: rank >= 2; upper is 0 or 1; any diagonal offset k.
Expected<std::vector<TensorType>> triluShape(const OpContext& ctx) {
  CLEAVE_TRY(requireRank(ctx, 0, 2));
  CLEAVE_TRY(requireFlag(ctx, "upper"));
  return std::vector<TensorType>{ctx.operands[0]};
}

// constant: the tensor in `value`, whose bytes must match its type.
Expected<std::vector<TensorType>> constantShape(const OpContext& ctx) {
  const TensorData* value = ctx.getTensor("value");
  if (!value) return attrError(ctx, "value", "holds no tensor");
  CLEAVE_TRY(checkResultShape(ctx, 0, value->type));
  if (static_cast<int64_t>(value->bytes.size()) != value->type.bytes())
    return attrError(ctx, "value", "is " + value->type.str() + " with " + std::to_string(value->bytes.size()) +
                                       " bytes of data, the type needs " + std::to_string(value->type.bytes()));
  return std::vector<TensorType>{value->type};
}

// ---- Cost rules (shape ops do no arithmetic) ----

// reshape, flatten, squeeze, unsqueeze: the result aliases the operand; nothing moves.
OpCost aliasCost(const OpContext&) { return {}; }

// transpose, concat, split, slice, expand, trilu: read the operands, write the results.
OpCost copyCost(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  return {0, operandAndResultBytes(ctx, results)};
}

// gather, gather_elements and gather_nd read only what they select: indices once, and the result's bytes from data.
OpCost gatherCost(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  return {0, static_cast<double>(ctx.operands[1].bytes()) + 2 * static_cast<double>(results[0].bytes())};
}

// scatter reads data, the indices and updates, and writes the result.
OpCost scatterCost(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  return {static_cast<double>(ctx.operands[2].numel()), operandAndResultBytes(ctx, results)};
}

// constant writes its result.
OpCost constantCost(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  return {0, operandAndResultBytes(ctx, results)};
}

// ---- Sharding rules ----

// reshape and flatten. Row-major order means a run of equal leading dims, and a run of equal trailing
// dims, map element blocks one to one: those are pass-through factors. The dims between them are
// merged or split, and each gets a need_replication factor of its own. (A finer rule could let a merged
// group's major dim pass through; this one is simple and always correct.)
ShardingRule reshapeLikeRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  ShardingRuleBuilder rule(ctx.operands, results);
  rule.addReshape();
  return rule.build();
}

// transpose: one pass-through factor per input dim; result dim i takes input dim perm[i]'s factor.
ShardingRule transposeShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  std::vector<int64_t> perm = *transposePerm(ctx);  // valid: the shape rule accepted it
  std::vector<int> result_dim(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) result_dim[perm[i]] = static_cast<int>(i);
  ShardingRuleBuilder rule(ctx.operands, results);
  for (int d = 0; d < static_cast<int>(perm.size()); ++d) rule.addFactor({d}, {result_dim[d]});
  return rule.build();
}

// Ops that move data along one axis (concat, split, slice): every other dim is one shared pass-through
// factor; each tensor's dim along a moved axis is a need_replication factor of its own, since the
// tensors' sizes differ there (a size-1 dim there maps to no factor).
ShardingRule axisMovingRule(const OpContext& ctx, std::span<const TensorType> results, const std::vector<bool>& moved) {
  ShardingRuleBuilder rule(ctx.operands, results);
  rule.addPointwiseIf(ctx.operands[0].shape, [&](int d) { return !moved[d]; });
  for (int i = 0; i < static_cast<int>(ctx.operands.size()); ++i)
    for (int d = 0; d < static_cast<int>(moved.size()); ++d)
      if (moved[d] && ctx.operands[i].shape[d] != 1) rule.addOperandFactor(i, d, FactorKind::kNeedReplication);
  for (int i = 0; i < static_cast<int>(results.size()); ++i)
    for (int d = 0; d < static_cast<int>(moved.size()); ++d)
      if (moved[d] && results[i].shape[d] != 1) rule.addResultFactor(i, d, FactorKind::kNeedReplication);
  return rule.build();
}

// concat and split: the axis moves.
ShardingRule alongAxisShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  std::vector<bool> moved(ctx.operands[0].shape.size(), false);
  moved[normalizeAxis(ctx.getInt("axis"), ctx.operands[0].rank())] = true;
  return axisMovingRule(ctx, results, moved);
}

ShardingRule sliceShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  std::vector<bool> moved(ctx.operands[0].shape.size(), false);
  std::vector<SliceAxis> sliced = *resolveSlice(ctx);  // valid: the shape rule accepted it
  for (const SliceAxis& s : sliced) moved[s.axis] = true;
  return axisMovingRule(ctx, results, moved);
}

// gather: data dims before and after axis and all index dims pass through to the result; data's axis
// (an embedding's vocabulary) is need_replication: a plain gather needs every row on every device
// (vocabulary sharding is a dedicated pass).
ShardingRule gatherShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  const int axis = static_cast<int>(normalizeAxis(ctx.getInt("axis"), ctx.operands[0].rank()));
  const int data_rank = static_cast<int>(ctx.operands[0].rank()), index_rank = static_cast<int>(ctx.operands[1].rank());
  ShardingRuleBuilder rule(ctx.operands, results);
  for (int d = 0; d < data_rank; ++d) {
    if (d == axis) rule.addOperandFactor(0, d, FactorKind::kNeedReplication);
    else rule.addFactor({d}, {d < axis ? d : d + index_rank - 1});
  }
  for (int d = 0; d < index_rank; ++d) rule.addFactor({ShardingRuleBuilder::kNoDim, d}, {axis + d});
  return rule.build();
}

// gather_elements: the indices' dims pass through to the result. Along a dim other than the axis
// that data and the indices have at one size, element i reads data's element i: the three share
// the dim (DeBERTa's relative-position scores stay split by heads). Data is read anywhere along the
// axis and along a dim the indices cover only in part, so there it is replicated.
ShardingRule gatherElementsShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  ShardingRuleBuilder rule(ctx.operands, results);
  const int rank = static_cast<int>(ctx.operands[0].rank());
  const int axis = static_cast<int>(normalizeAxis(ctx.getInt("axis"), rank));
  for (int d = 0; d < rank; ++d) {
    if (d != axis && ctx.operands[0].shape[d] == ctx.operands[1].shape[d]) {
      rule.addFactor({d, d}, {d});
    } else {
      rule.addOperandFactor(0, d, FactorKind::kNeedReplication);
      rule.addFactor({ShardingRuleBuilder::kNoDim, d}, {d});
    }
  }
  return rule.build();
}

// gather_nd: the indices' dims but the last pass through to the result's leading dims, data's sliced
// trailing dims to its trailing dims; the dims the indices address are replicated.
ShardingRule gatherNdShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  const int data_rank = static_cast<int>(ctx.operands[0].rank()), index_rank = static_cast<int>(ctx.operands[1].rank());
  const int addressed = static_cast<int>(ctx.getInt("batch_dims") + ctx.operands[1].shape.back());
  ShardingRuleBuilder rule(ctx.operands, results);
  for (int d = 0; d < addressed; ++d) rule.addOperandFactor(0, d, FactorKind::kNeedReplication);
  for (int d = 0; d < index_rank - 1; ++d) rule.addFactor({ShardingRuleBuilder::kNoDim, d}, {d});
  rule.addOperandFactor(1, index_rank - 1, FactorKind::kNeedReplication);
  for (int d = addressed; d < data_rank; ++d) rule.addFactor({d}, {index_rank - 1 + d - addressed});
  return rule.build();
}

// scatter: any element may be written by any update, so every dim is replicated.
ShardingRule scatterShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  ShardingRuleBuilder rule(ctx.operands, results);
  for (int o = 0; o < 3; ++o)
    for (int d = 0; d < static_cast<int>(ctx.operands[o].rank()); ++d) rule.addOperandFactor(o, d, FactorKind::kNeedReplication);
  for (int d = 0; d < static_cast<int>(results[0].rank()); ++d) rule.addResultFactor(0, d, FactorKind::kNeedReplication);
  return rule.build();
}

// squeeze: kept dims pass through; removed size-1 dims map to no factor.
ShardingRule squeezeShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  std::vector<bool> removed = *squeezedDims(ctx);  // valid: the shape rule accepted it
  ShardingRuleBuilder rule(ctx.operands, results);
  int result_dim = 0;
  for (int d = 0; d < static_cast<int>(removed.size()); ++d)
    if (!removed[d]) rule.addFactor({d}, {result_dim++});
  return rule.build();
}

// unsqueeze: input dims pass through; inserted size-1 dims map to no factor.
ShardingRule unsqueezeShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  std::vector<bool> inserted = *insertedDims(ctx);  // valid: the shape rule accepted it
  ShardingRuleBuilder rule(ctx.operands, results);
  int operand_dim = 0;
  for (int d = 0; d < static_cast<int>(inserted.size()); ++d)
    if (!inserted[d]) rule.addFactor({operand_dim++}, {d});
  return rule.build();
}

// trilu: leading dims pass through; the matrix dims need_replication (the mask depends on the
// global row and column index).
ShardingRule triluShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  const int rank = static_cast<int>(ctx.operands[0].rank());
  ShardingRuleBuilder rule(ctx.operands, results);
  rule.addPointwise(ctx.operands[0].shape, [&](int d) {
    return d + 2 >= rank ? FactorKind::kNeedReplication : FactorKind::kPassThrough;
  });
  return rule.build();
}

// constant: no operands; each result dim a pass-through factor (any slice of it can be materialised).
ShardingRule constantShardingRule(const OpContext& ctx) {
  std::vector<TensorType> results = inferredResults(ctx);
  if (results.empty()) return {};
  ShardingRuleBuilder rule(ctx.operands, results);
  rule.addPointwise(results[0].shape);
  return rule.build();
}

// Builds one op's definition; the shape rule is already wrapped in checkedShapeRule.
OpDef shapeOp(OpId id, std::string_view name, std::string_view summary, std::vector<AttrSpec> attrs, ShapeRule shape,
              CostRule cost, ShardingRuleFn sharding) {
  return OpDef{.id = id,
               .name = name,
               .summary = summary,
               .attrs = std::move(attrs),
               .shape = shape,
               .cost = cost,
               .sharding = sharding};
}

// ---- Gradient rules (see ir/ops/gradient_support.h) ----

// reshape, flatten, squeeze and unsqueeze only relabel dims: the gradient is reshaped back.
Status reshapeGradient(GradientContext& g) {
  g.operand_grads[0] = reshapeTo(g, dy(g), shapeOf(g, g.operand(0)));
  return g.status;
}

Status transposeGradient(GradientContext& g) {
  const std::vector<int64_t>& perm = forwardAttrs(g).getInts("perm");
  AttrMap attrs;  // no perm: reversed dims, which are their own inverse
  if (!perm.empty()) {
    std::vector<int64_t> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i)
      inverse[normalizeAxis(perm[i], static_cast<int64_t>(perm.size()))] = static_cast<int64_t>(i);
    attrs.emplace("perm", std::move(inverse));
  }
  g.operand_grads[0] = g.emit(OpId::transpose, {dy(g)}, std::move(attrs));
  return g.status;
}

// One split of dy along the concat axis gives every operand its piece.
Status concatGradient(GradientContext& g) {
  int64_t rank = g.typeOf(g.result(0)).rank();
  int64_t axis = normalizeAxis(forwardAttrs(g).getInt("axis"), rank);
  std::vector<int64_t> sizes;
  for (ValueId v : g.node.operands) sizes.push_back(shapeOf(g, v)[axis]);
  std::vector<ValueId> pieces = g.emitAll(OpId::split, {dy(g)}, {{"axis", axis}, {"sizes", sizes}});
  if (pieces.size() != g.node.operands.size()) return g.status;
  g.operand_grads = pieces;
  return g.status;
}

// The results' gradients concatenated back, with zeros for results no gradient reached.
Status splitGradient(GradientContext& g) {
  std::vector<ValueId> pieces;
  for (size_t r = 0; r < g.node.results.size(); ++r)
    pieces.push_back(g.result_grads[r] != kNoValue ? g.result_grads[r] : zeros(g, g.typeOf(g.result(r))));
  int64_t axis = normalizeAxis(forwardAttrs(g).getInt("axis"), g.typeOf(g.operand(0)).rank());
  g.operand_grads[0] = g.emit(OpId::concat, std::move(pieces), {{"axis", axis}});
  return g.status;
}

Status sliceGradient(GradientContext& g) {
  AttrMap attrs = copyAttrs(g, {"starts", "ends", "axes", "steps"});
  attrs.emplace("input_shape", shapeOf(g, g.operand(0)));
  g.operand_grads[0] = g.emit(OpId::slice_grad, {dy(g)}, std::move(attrs));
  return g.status;
}

// gather, gather_elements and gather_nd: dy is scatter-added where the forward op read (`kGrad`);
// the indices get no gradient. A gather's padding_idx row gets nothing from the lookups of it
// (nn.Embedding's padding_idx): dy is zeroed where the index is padding_idx first.
template <OpId kGrad>
Status gatherLikeGradient(GradientContext& g) {
  AttrMap attrs = copyAttrs(g, {"axis", "batch_dims"});
  attrs.emplace("data_shape", shapeOf(g, g.operand(0)));
  ValueId gradient = dy(g);
  if (const int64_t padding = kGrad == OpId::gather_grad ? forwardAttrs(g).getInt("padding_idx") : -1; padding >= 0) {
    const ValueId ids = g.operand(1);
    const int64_t id_rank = g.typeOf(ids).rank(), rank = g.typeOf(gradient).rank();
    std::vector<int64_t> row_axes;
    for (int64_t d = id_rank; d < rank; ++d) row_axes.push_back(d);
    ValueId is_padding = g.emit(OpId::equal, {ids, g.scalar(static_cast<double>(padding), dtypeOf(g, ids))});
    if (!row_axes.empty()) is_padding = g.emit(OpId::unsqueeze, {is_padding}, {{"axes", row_axes}});
    gradient = g.emit(OpId::where, {is_padding, g.scalar(0.0, dtypeOf(g, gradient)), gradient});
  }
  g.operand_grads[0] = g.emit(kGrad, {gradient, g.operand(1)}, std::move(attrs));
  return g.status;
}

// scatter with reduction none: data's gradient is dy where no update landed (dy with zeros
// scattered in), the updates' is dy read where they landed; with add, data's is dy itself. mul, max
// and min are not differentiable here.
Status scatterGradient(GradientContext& g) {
  OpContext attrs = forwardAttrs(g);
  const std::string& reduction = attrs.getString("reduction");
  if (reduction != "none" && reduction != "add")
    return Status::badInput(nodeContext(g.graph, g.node) + "scatter with reduction " + reduction +
                            " has no gradient rule (none and add have)");
  const bool elements = g.node.op == OpId::scatter_elements;
  AttrMap axis = elements ? copyAttrs(g, {"axis"}) : AttrMap{};
  ValueId indices = g.operand(1), updates = g.operand(2);
  if (reduction == "none") {
    AttrMap scatter_attrs = axis;
    g.operand_grads[0] = g.emit(g.node.op, {dy(g), indices, zeros(g, g.typeOf(updates))}, std::move(scatter_attrs));
  } else {
    g.operand_grads[0] = dy(g);
  }
  g.operand_grads[2] = g.emit(elements ? OpId::gather_elements : OpId::gather_nd, {dy(g), indices}, std::move(axis));
  return g.status;
}

Status expandGradient(GradientContext& g) {
  g.operand_grads[0] = g.reduceToShape(dy(g), shapeOf(g, g.operand(0)));
  return g.status;
}

Status triluGradient(GradientContext& g) {
  g.operand_grads[0] = g.emit(OpId::trilu, {dy(g)}, copyAttrs(g, {"upper", "k"}));
  return g.status;
}

// ---- Reference evaluation (see ir/ops/reference_support.h) ----
// reshape, flatten, squeeze and unsqueeze only relabel the shape: operand 0's bytes, result type.

Expected<std::vector<TensorData>> transposeReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const TensorData& x = *operands[0];
  auto perm = transposePerm(ctx);  // normalised, each dim once
  if (!perm) return referenceError(ctx, perm.status().message());
  // Result dim d walks input dim perm[d].
  const std::vector<int64_t> in_strides = rowMajorStrides(x.type.shape);
  std::vector<int64_t> strides(perm->size());
  for (size_t d = 0; d < perm->size(); ++d) strides[d] = in_strides[(*perm)[d]];
  return single(selectElements(x, ctx.results[0], stridedIndices(ctx.results[0].shape, strides)));
}

// ONNX Slice: negative starts/ends count from the end, then both are clamped to the dimension
// ([0, dim] for positive steps, [0, dim-1] and [-1, dim-1] for negative ones).
Expected<std::vector<TensorData>> sliceReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const TensorData& x = *operands[0];
  const TensorType& result = ctx.results[0];
  const Shape& shape = x.type.shape;
  const int64_t rank = x.type.rank();
  const std::vector<int64_t>& starts = ctx.getInts("starts");
  const std::vector<int64_t>& ends = ctx.getInts("ends");
  std::vector<int64_t> axes = ctx.getInts("axes");
  std::vector<int64_t> steps = ctx.getInts("steps");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return referenceError(ctx, "starts, ends, axes and steps differ in length");
  // 1. Every dim starts as "all of it, step 1".
  Shape out_shape = shape;
  std::vector<int64_t> first(shape.size(), 0), step(shape.size(), 1);
  std::vector<bool> sliced(shape.size(), false);
  // 2. Resolve each sliced axis to a first index, a step and an element count.
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = normalizeAxis(axes[i], rank);
    if (axis < 0)
      return referenceError(ctx, "axis " + std::to_string(axes[i]) + " is out of range for rank " + std::to_string(rank));
    if (sliced[axis]) return referenceError(ctx, "axis " + std::to_string(axes[i]) + " is sliced twice");
    if (steps[i] == 0) return referenceError(ctx, "step 0 on axis " + std::to_string(axes[i]));
    sliced[axis] = true;
    const int64_t dim = shape[axis];
    const int64_t s = steps[i];
    int64_t start = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t end = ends[i] < 0 ? ends[i] + dim : ends[i];
    int64_t count = 0;
    if (dim > 0) {
      if (s > 0) {
        start = std::min(std::max<int64_t>(start, 0), dim);
        end = std::min(std::max<int64_t>(end, 0), dim);
      } else {
        start = std::min(std::max<int64_t>(start, 0), dim - 1);
        end = std::min(std::max<int64_t>(end, -1), dim - 1);
      }
      const int64_t span = s > 0 ? end - start : start - end;
      const int64_t magnitude =
          s > 0 ? s : (s == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -s);
      count = span <= 0 ? 0 : (span - 1) / magnitude + 1;
    }
    out_shape[axis] = count;
    first[axis] = start;
    step[axis] = s;
  }
  if (out_shape != result.shape)
    return Status::internal("slice: evaluated shape " + shapeStr(out_shape) + " differs from the result type " + result.str());
  // 3. Result element idx reads input element Σ (first[d] + idx[d]·step[d]) · in_strides[d].
  const std::vector<int64_t> in_strides = rowMajorStrides(shape);
  int64_t base = 0;
  std::vector<int64_t> strides(shape.size(), 0);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (out_shape[d] == 0) return std::vector<TensorData>{TensorData{result, {}}};
    base += first[d] * in_strides[d];
    if (out_shape[d] > 1) strides[d] = in_strides[d] * step[d];  // a dim of size 1 never steps
  }
  return single(selectElements(x, result, stridedIndices(out_shape, strides, base)));
}

// Gather: result[outer..., j..., inner...] = data[outer..., indices[j...], inner...]; negative
// indices count from the end of the axis.
Expected<std::vector<TensorData>> gatherReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const TensorData &data = *operands[0], &indices = *operands[1];
  const Shape& shape = data.type.shape;
  const int64_t axis = normalizeAxis(ctx.getInt("axis"), data.type.rank());
  if (axis < 0) return referenceError(ctx, "axis " + std::to_string(ctx.getInt("axis")) + " is out of range");
  const int64_t dim = shape[axis];
  const int64_t outer = numelOf(Shape(shape.begin(), shape.begin() + axis));
  const int64_t inner = numelOf(Shape(shape.begin() + axis + 1, shape.end()));
  // 1. Read the indices as i64 and resolve negative ones.
  std::vector<int64_t> rows = readIndices(indices);
  for (int64_t& row : rows) {
    if (row < -dim || row >= dim)
      return referenceError(ctx, "index " + std::to_string(row) + " is out of range for axis " + std::to_string(axis) +
                                     " of size " + std::to_string(dim));
    if (row < 0) row += dim;
  }
  // 2. Result element (o, j, k) reads data element (o·dim + rows[j])·inner + k.
  std::vector<int64_t> source;
  source.reserve(static_cast<size_t>(outer * static_cast<int64_t>(rows.size()) * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t row : rows)
      for (int64_t k = 0; k < inner; ++k) source.push_back((o * dim + row) * inner + k);
  return single(selectElements(data, ctx.results[0], source));
}

Expected<std::vector<TensorData>> expandReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const TensorData& x = *operands[0];
  return single(selectElements(x, ctx.results[0], broadcastSourceIndices(x.type.shape, ctx.results[0].shape)));
}

Expected<std::vector<TensorData>> concatReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const TensorType& result = ctx.results[0];
  const int64_t axis = normalizeAxis(ctx.getInt("axis"), result.rank());
  const int64_t outer = numelOf(Shape(result.shape.begin(), result.shape.begin() + axis));
  const int64_t inner = numelOf(Shape(result.shape.begin() + axis + 1, result.shape.end()));
  const int64_t size = dtypeSize(result.dtype);
  TensorData out{result, std::vector<uint8_t>(static_cast<size_t>(result.bytes()))};
  // For each outer index, the operands' blocks follow each other along the axis.
  uint8_t* to = out.bytes.data();
  for (int64_t o = 0; o < outer; ++o) {
    for (const TensorData* operand : operands) {
      const int64_t block = operand->type.shape[axis] * inner * size;
      if (block > 0) std::memcpy(to, operand->bytes.data() + o * block, static_cast<size_t>(block));
      to += block;
    }
  }
  return std::vector<TensorData>{std::move(out)};
}

Expected<std::vector<TensorData>> splitReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const TensorData& x = *operands[0];
  const Shape& shape = x.type.shape;
  const int64_t axis = normalizeAxis(ctx.getInt("axis"), x.type.rank());
  const int64_t outer = numelOf(Shape(shape.begin(), shape.begin() + axis));
  const int64_t inner = numelOf(Shape(shape.begin() + axis + 1, shape.end()));
  const int64_t size = dtypeSize(x.type.dtype);
  const int64_t in_block = shape[axis] * inner * size;
  std::vector<TensorData> outs;
  int64_t offset = 0;  // bytes from the start of each outer block to this piece
  for (const TensorType& type : ctx.results) {
    const int64_t block = type.shape[axis] * inner * size;
    TensorData out{type, std::vector<uint8_t>(static_cast<size_t>(type.bytes()))};
    for (int64_t o = 0; o < outer && block > 0; ++o)
      std::memcpy(out.bytes.data() + o * block, x.bytes.data() + o * in_block + offset, static_cast<size_t>(block));
    offset += block;
    outs.push_back(std::move(out));
  }
  return outs;
}

// Trilu on the last two dims (row i, column j): upper keeps j - i >= k, lower keeps j - i <= k.
Expected<std::vector<TensorData>> triluReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const TensorData& x = *operands[0];
  const bool upper = ctx.getInt("upper") != 0;
  const int64_t k = ctx.getInt("k");
  const int64_t rows = x.type.shape[x.type.rank() - 2], cols = x.type.shape[x.type.rank() - 1];
  std::vector<int64_t> source(static_cast<size_t>(x.type.numel()));
  for (int64_t i = 0; i < static_cast<int64_t>(source.size()); ++i) {
    const int64_t diagonal_offset = i % cols - (i / cols) % rows;  // j - i
    const bool keep = upper ? diagonal_offset >= k : diagonal_offset <= k;
    source[i] = keep ? i : -1;
  }
  return single(selectElements(x, ctx.results[0], source));
}

// constant: the tensor of its value attribute (constant folding keeps constant nodes as they are).
Expected<std::vector<TensorData>> constantReference(const OpContext& ctx, std::span<const TensorData* const>) {
  return single(*ctx.getTensor("value"));
}

// gather_elements: result[i] = data[i with its axis coordinate replaced by indices[i]]; negative
// indices count from the end of the axis.
Expected<std::vector<TensorData>> gatherElementsReference(const OpContext& ctx,
                                                          std::span<const TensorData* const> operands) {
  const TensorData &data = *operands[0], &indices = *operands[1];
  auto source = gatherElementsSources(data.type.shape, indices, normalizeAxis(ctx.getInt("axis"), data.type.rank()));
  if (!source) return referenceError(ctx, source.status().message());
  return single(selectElements(data, ctx.results[0], *source));
}

// scatter_elements and scatter_nd: data with each update combined into the element it addresses
// (reduction none: replaced, in index order; add, mul, max, min).
Expected<std::vector<TensorData>> scatterReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const TensorData &data = *operands[0], &indices = *operands[1], &updates = *operands[2];
  Expected<std::vector<int64_t>> targets =
      ctx.def.id == OpId::scatter_elements
          ? gatherElementsSources(data.type.shape, indices, normalizeAxis(ctx.getInt("axis"), data.type.rank()))
          : gatherNdSources(data.type.shape, indices, 0);
  if (!targets) return referenceError(ctx, targets.status().message());
  const std::string& reduction = ctx.getString("reduction");
  return single(visitDType(data.type.dtype, [&]<class T>(T) -> TensorData {
    std::vector<T> out = readElements<T>(data);
    const std::vector<T> values = readElements<T>(updates);
    for (size_t i = 0; i < values.size(); ++i) {
      T& slot = out[static_cast<size_t>((*targets)[i])];
      if (reduction == "add") slot = addElements(slot, values[i]);
      else if (reduction == "mul") slot = static_cast<T>(slot * values[i]);
      else if (reduction == "max") slot = std::max(slot, values[i]);
      else if (reduction == "min") slot = std::min(slot, values[i]);
      else slot = values[i];
    }
    return makeTensor(ctx.results[0], out);
  }));
}

// gather_nd: each index tuple (after the batch prefix) selects a slice of data's trailing dims.
Expected<std::vector<TensorData>> gatherNdReference(const OpContext& ctx, std::span<const TensorData* const> operands) {
  const TensorData &data = *operands[0], &indices = *operands[1];
  CLEAVE_ASSIGN_OR_RETURN(std::vector<int64_t> source, gatherNdSources(data.type.shape, indices, ctx.getInt("batch_dims")));
  return single(selectElements(data, ctx.results[0], source));
}

// Sets the references constant folding uses.
void addShapeReferences(std::vector<OpDef>& table) {
  for (OpId id : {OpId::reshape, OpId::flatten, OpId::squeeze, OpId::unsqueeze})
    setFoldingReference(table, id, sameBytesReference, referenceDTypes);
  setFoldingReference(table, OpId::transpose, transposeReference, referenceDTypes);
  setFoldingReference(table, OpId::concat, concatReference, referenceDTypes);
  setFoldingReference(table, OpId::split, splitReference, referenceDTypes);
  setFoldingReference(table, OpId::slice, sliceReference, referenceDTypes);
  setFoldingReference(table, OpId::gather, gatherReference, referenceDTypes);
  setFoldingReference(table, OpId::gather_elements, gatherElementsReference, referenceDTypes);
  setFoldingReference(table, OpId::gather_nd, gatherNdReference, referenceDTypes);
  setFoldingReference(table, OpId::scatter_elements, scatterReference, referenceDTypes);
  setFoldingReference(table, OpId::scatter_nd, scatterReference, referenceDTypes);
  setFoldingReference(table, OpId::expand, expandReference, referenceDTypes);
  setFoldingReference(table, OpId::trilu, triluReference, referenceDTypes);
  appendedDef(table, OpId::constant).reference = constantReference;
}

}  // namespace

void addShapeOps(std::vector<OpDef>& table) {
  table.push_back(shapeOp(OpId::reshape, "reshape", "same elements in a new shape (-1 inferred, 0 copies)",
                          {requiredAttr("shape", AttrKind::kInts)}, checkedShapeRule<reshapeShape>, aliasCost,
                          reshapeLikeRule));
  table.push_back(shapeOp(OpId::flatten, "flatten", "2-D view: dims before axis times dims from axis",
                          {optionalInt("axis", 1)}, checkedShapeRule<flattenShape>, aliasCost, reshapeLikeRule));
  table.push_back(shapeOp(OpId::transpose, "transpose", "permutes dims (reverses them by default)",
                          {optionalInts("perm", {})}, checkedShapeRule<transposeShape>, copyCost,
                          transposeShardingRule));
  OpDef concat = shapeOp(OpId::concat, "concat", "joins operands along axis", {requiredAttr("axis", AttrKind::kInt)},
                         checkedShapeRule<concatShape>, copyCost, alongAxisShardingRule);
  concat.max_operands = -1;
  table.push_back(std::move(concat));
  table.push_back(shapeOp(OpId::split, "split", "cuts x along axis into pieces of the given sizes",
                          {requiredAttr("axis", AttrKind::kInt), requiredAttr("sizes", AttrKind::kInts)},
                          checkedShapeRule<splitShape>, copyCost, alongAxisShardingRule));
  table.push_back(shapeOp(OpId::slice, "slice", "strided sub-range along axes (ONNX Slice)",
                          {requiredAttr("starts", AttrKind::kInts), requiredAttr("ends", AttrKind::kInts),
                           optionalInts("axes", {}), optionalInts("steps", {})},
                          checkedShapeRule<sliceShape>, copyCost, sliceShardingRule));
  OpDef gather = shapeOp(OpId::gather, "gather", "picks entries of data along axis by indices",
                         {optionalInt("axis", 0), optionalInt("padding_idx", -1)}, checkedShapeRule<gatherShape>,
                         gatherCost, gatherShardingRule);
  gather.min_operands = gather.max_operands = 2;
  table.push_back(std::move(gather));
  OpDef gather_elements = shapeOp(OpId::gather_elements, "gather_elements",
                                  "picks one data element per index along axis (ONNX GatherElements, torch.gather)",
                                  {optionalInt("axis", 0)}, checkedShapeRule<gatherElementsShape>, gatherCost,
                                  gatherElementsShardingRule);
  gather_elements.min_operands = gather_elements.max_operands = 2;
  table.push_back(std::move(gather_elements));
  OpDef gather_nd = shapeOp(OpId::gather_nd, "gather_nd", "picks slices of data by index tuples (ONNX GatherND)",
                            {optionalInt("batch_dims", 0)}, checkedShapeRule<gatherNdShape>, gatherCost,
                            gatherNdShardingRule);
  gather_nd.min_operands = gather_nd.max_operands = 2;
  table.push_back(std::move(gather_nd));
  OpDef scatter_elements = shapeOp(OpId::scatter_elements, "scatter_elements",
                                   "data with updates written where gather_elements would read (ONNX ScatterElements)",
                                   {optionalInt("axis", 0), optionalString("reduction", "none")},
                                   checkedShapeRule<scatterShape>, scatterCost, scatterShardingRule);
  scatter_elements.min_operands = scatter_elements.max_operands = 3;
  table.push_back(std::move(scatter_elements));
  OpDef scatter_nd = shapeOp(OpId::scatter_nd, "scatter_nd",
                             "data with update slices written where gather_nd would read (ONNX ScatterND)",
                             {optionalString("reduction", "none")}, checkedShapeRule<scatterShape>, scatterCost,
                             scatterShardingRule);
  scatter_nd.min_operands = scatter_nd.max_operands = 3;
  table.push_back(std::move(scatter_nd));
  table.push_back(shapeOp(OpId::expand, "expand", "broadcasts x to the broadcast of its shape and `shape`",
                          {requiredAttr("shape", AttrKind::kInts)}, checkedShapeRule<expandShape>, copyCost,
                          broadcastShardingRule));
  table.push_back(shapeOp(OpId::squeeze, "squeeze", "removes size-1 dims (all of them by default)",
                          {optionalInts("axes", {})}, checkedShapeRule<squeezeShape>, aliasCost, squeezeShardingRule));
  table.push_back(shapeOp(OpId::unsqueeze, "unsqueeze", "inserts size-1 dims at result positions axes",
                          {requiredAttr("axes", AttrKind::kInts)}, checkedShapeRule<unsqueezeShape>, aliasCost,
                          unsqueezeShardingRule));
  table.push_back(shapeOp(OpId::trilu, "trilu", "keeps the upper or lower triangle of the last two dims",
                          {optionalInt("upper", 1), optionalInt("k", 0)}, checkedShapeRule<triluShape>, copyCost,
                          triluShardingRule));
  OpDef constant = shapeOp(OpId::constant, "constant", "the tensor in attribute value",
                           {requiredAttr("value", AttrKind::kTensor)}, checkedShapeRule<constantShape>, constantCost,
                           constantShardingRule);
  constant.min_operands = constant.max_operands = 0;
  table.push_back(std::move(constant));

  for (OpId id : {OpId::reshape, OpId::flatten, OpId::squeeze, OpId::unsqueeze}) {
    OpDef& def = appendedDef(table, id);
    def.view = true;
    def.reshape_like = true;
  }
  appendedDef(table, OpId::reshape).result_shape_attr = "shape";
  appendedDef(table, OpId::expand).result_shape_attr = "shape";

  // Gradient rules.
  appendedDef(table, OpId::reshape).gradient = reshapeGradient;
  appendedDef(table, OpId::flatten).gradient = reshapeGradient;
  appendedDef(table, OpId::squeeze).gradient = reshapeGradient;
  appendedDef(table, OpId::unsqueeze).gradient = reshapeGradient;
  appendedDef(table, OpId::transpose).gradient = transposeGradient;
  appendedDef(table, OpId::concat).gradient = concatGradient;
  appendedDef(table, OpId::split).gradient = splitGradient;
  appendedDef(table, OpId::slice).gradient = sliceGradient;
  appendedDef(table, OpId::gather).gradient = gatherLikeGradient<OpId::gather_grad>;
  appendedDef(table, OpId::gather_elements).gradient = gatherLikeGradient<OpId::gather_elements_grad>;
  appendedDef(table, OpId::gather_nd).gradient = gatherLikeGradient<OpId::gather_nd_grad>;
  appendedDef(table, OpId::scatter_elements).gradient = scatterGradient;
  appendedDef(table, OpId::scatter_nd).gradient = scatterGradient;
  appendedDef(table, OpId::expand).gradient = expandGradient;
  appendedDef(table, OpId::trilu).gradient = triluGradient;

  addShapeReferences(table);
}

}  // namespace cleave::ops
