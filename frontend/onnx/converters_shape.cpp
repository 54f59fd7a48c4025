// ONNX converters of data movement on static shapes: Reshape, Transpose, Concat, Split, Slice, Pad, Tile, ...
#include <algorithm>
#include <regex>

#include "frontend/onnx/onnx_composite.h"
#include "frontend/onnx/onnx_converters.h"
#include "frontend/onnx/onnx_newer_fields.h"

namespace cleave {
namespace {

// PyTorch's exporter merges initializers of equal value (LayerNorm's ones in every layer) into one
// and gives each other name an Identity of it: each such name is a parameter of its own, as it was
// before the export, so that training updates them apart.
Status convertIdentity(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  if (ctx.isParameter(node.input(0))) {
    ctx.aliasParameter(node.output(0), node.input(0));
    return Status::ok();
  }
  return ctx.emit(node, OpId::identity, allInputs(node), {});
}

Status convertFlatten(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  return ctx.emit(node, OpId::flatten, {node.input(0)}, {{"axis", intAttr(node, "axis", 1)}});
}

Status convertReshape(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(auto shape, ctx.constantInts(node, 1));
  bool zero_dims = std::find(shape.begin(), shape.end(), 0) != shape.end();
  if (intAttr(node, "allowzero", 0) != 0 && zero_dims) {
    // With allowzero a 0 is a dim of size 0, not a copy: the result is empty, so a constant.
    CLEAVE_ASSIGN_OR_RETURN(TensorType x, ctx.typeOf(node, node.input(0)));
    if (x.numel() != 0 || std::find(shape.begin(), shape.end(), -1) != shape.end())
      return ctx.nodeError(node, "allowzero=1 with shape " + TensorType{x.dtype, shape}.str() + " does not fit input " +
                                     x.str());
    auto empty = std::make_shared<TensorData>();
    empty->type = {x.dtype, shape};
    ctx.bindConstant(node.output(0), empty);
    return Status::ok();
  }
  return ctx.emit(node, OpId::reshape, {node.input(0)}, {{"shape", shape}});
}

Status convertExpand(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(auto shape, ctx.constantInts(node, 1));
  return ctx.emit(node, OpId::expand, {node.input(0)}, {{"shape", shape}});
}

Status convertTranspose(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  AttrMap attrs;
  if (auto perm = intsAttr(node, "perm")) attrs["perm"] = *perm;
  return ctx.emit(node, OpId::transpose, {node.input(0)}, attrs);
}

Status convertConcat(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  return ctx.emit(node, OpId::concat, allInputs(node), {{"axis", intAttr(node, "axis", 0)}});
}

// Split into the given sizes (the `split` attribute before opset 13, an optional constant input
// from 13), or into as many equal parts as the node has outputs.
template <bool sizes_as_input>
Status convertSplit(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(TensorType x, ctx.typeOf(node, node.input(0)));
  int64_t axis = intAttr(node, "axis", 0);
  int64_t normalized = normalizeAxis(axis, x.rank());
  if (normalized < 0) return ctx.nodeError(node, "axis " + std::to_string(axis) + " is out of range for " + x.str());
  std::vector<int64_t> sizes;
  if (!sizes_as_input && intsAttr(node, "split")) {
    sizes = *intsAttr(node, "split");
  } else if (sizes_as_input && hasInput(node, 1)) {
    CLEAVE_ASSIGN_OR_RETURN(sizes, ctx.constantInts(node, 1));
  } else {
    // Equal parts, one per output; from opset 18 (num_outputs) the last part may be smaller.
    int64_t parts = node.output_size(), dim = x.shape[normalized];
    if (ctx.opset() >= 18 && findAttr(node, "num_outputs") && intAttr(node, "num_outputs", 0) != parts)
      return ctx.nodeError(node, "num_outputs is " + std::to_string(intAttr(node, "num_outputs", 0)) + " but the node has " +
                                     std::to_string(parts) + " outputs");
    if (dim % parts != 0 && ctx.opset() < 18)
      return ctx.nodeError(node, "dim " + std::to_string(dim) + " does not split into " + std::to_string(parts) +
                                     " equal parts");
    int64_t chunk = (dim + parts - 1) / parts;
    if (chunk * (parts - 1) >= dim && parts > 1)
      return ctx.nodeError(node, "dim " + std::to_string(dim) + " does not split into " + std::to_string(parts) +
                                     " non-empty parts");
    sizes.assign(static_cast<size_t>(parts), chunk);
    sizes.back() = dim - chunk * (parts - 1);
  }
  return ctx.emit(node, OpId::split, {node.input(0)}, {{"axis", axis}, {"sizes", sizes}}, node.output_size());
}

Status convertSlice(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  AttrMap attrs;
  CLEAVE_ASSIGN_OR_RETURN(attrs["starts"], ctx.constantInts(node, 1));
  CLEAVE_ASSIGN_OR_RETURN(attrs["ends"], ctx.constantInts(node, 2));
  if (hasInput(node, 3)) {
    CLEAVE_ASSIGN_OR_RETURN(attrs["axes"], ctx.constantInts(node, 3));
  }
  if (hasInput(node, 4)) {
    CLEAVE_ASSIGN_OR_RETURN(attrs["steps"], ctx.constantInts(node, 4));
  }
  return ctx.emit(node, OpId::slice, {node.input(0)}, attrs);
}

// The padding_idx of an nn.Embedding lookup, from the FX node torch.export's exporter records with
// the Gather ("...aten.embedding.default](args = (%weight, %ids, 0), ..."); -1 when it has none.
int64_t embeddingPaddingIndex(const onnx::NodeProto& node) {
  static const std::regex kEmbedding(R"(aten\.embedding\.default\]\(args = \(%[^,()]+, %[^,()]+, (-?[0-9]+)[,)])");
  const std::string fx_node = metadataProperty(node, kNodeMetadataPropsField, "pkg.torch.onnx.fx_node");
  std::smatch match;
  return std::regex_search(fx_node, match, kEmbedding) ? std::stoll(match[1].str()) : -1;
}

// Gather; an embedding lookup keeps nn.Embedding's padding_idx (torch.export's exports say it; ONNX's
// Gather has no such attribute), whose row then gets no gradient from the lookup.
Status convertGather(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  AttrMap attrs{{"axis", intAttr(node, "axis", 0)}};
  if (const int64_t padding = embeddingPaddingIndex(node); padding >= 0 && ctx.isParameter(node.input(0)))
    attrs["padding_idx"] = padding;
  return ctx.emit(node, OpId::gather, {node.input(0), node.input(1)}, attrs);
}

Status convertGatherElements(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  return ctx.emit(node, OpId::gather_elements, {node.input(0), node.input(1)}, {{"axis", intAttr(node, "axis", 0)}});
}

Status convertGatherND(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  return ctx.emit(node, OpId::gather_nd, {node.input(0), node.input(1)}, {{"batch_dims", intAttr(node, "batch_dims", 0)}});
}

// ScatterElements and ScatterND (reduction from opset 16; max and min from 18).
template <OpId op>
Status convertScatter(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  AttrMap attrs{{"reduction", stringAttr(node, "reduction", "none")}};
  if (op == OpId::scatter_elements) attrs["axis"] = intAttr(node, "axis", 0);
  return ctx.emit(node, op, {node.input(0), node.input(1), node.input(2)}, attrs);
}

// Unsqueeze and Squeeze (`op`) on the axes of the `axes` attribute before opset 13, of an optional
// constant input from 13; Unsqueeze needs them.
template <OpId op, bool axes_as_input>
Status convertSqueezeLike(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  AttrMap attrs;
  if (!axes_as_input) {
    if (auto axes = intsAttr(node, "axes")) attrs["axes"] = *axes;
  } else if (hasInput(node, 1)) {
    CLEAVE_ASSIGN_OR_RETURN(attrs["axes"], ctx.constantInts(node, 1));
  }
  if (op == OpId::unsqueeze && !attrs.count("axes")) return ctx.nodeError(node, "Unsqueeze needs axes");
  return ctx.emit(node, op, {node.input(0)}, attrs);
}

Status convertTrilu(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  int64_t k = 0;
  if (hasInput(node, 1)) {
    CLEAVE_ASSIGN_OR_RETURN(auto ks, ctx.constantInts(node, 1));
    if (ks.size() != 1) return ctx.nodeError(node, "k must hold one integer");
    k = ks[0];
  }
  return ctx.emit(node, OpId::trilu, {node.input(0)}, {{"upper", intAttr(node, "upper", 1)}, {"k", k}});
}

// TensorScatter (opset 24): a KV cache's update written into it along `axis` (the sequence) at each
// batch row's write index (0 without write_indices; modulo the cache length in circular mode).
// Composed: the update padded to the cache's length with the cache's tail (the result at index 0),
// then each cache position s takes the padded update's element at s - index[b] (wrapped when
// circular) where that lies inside the update, and keeps the cache's elsewhere.
Status convertTensorScatter(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  const TensorType& cache_type = c.xType();
  CLEAVE_ASSIGN_OR_RETURN(TensorType update_type, ctx.typeOf(node, node.input(1)));
  const int64_t rank = c.rank();
  const int64_t axis = normalizeAxis(intAttr(node, "axis", -2), rank);
  if (axis <= 0) return c.fail("axis must name a dim of " + cache_type.str() + " other than the batch (0)");
  const std::string mode = stringAttr(node, "mode", "linear");
  if (mode != "linear" && mode != "circular") return c.fail("mode must be linear or circular, not '" + mode + "'");
  const int64_t length = cache_type.shape[axis], written = update_type.shape.size() == cache_type.shape.size()
                                                                 ? update_type.shape[axis] : -1;
  Shape expected_update = cache_type.shape;
  expected_update[axis] = written;
  if (update_type.dtype != cache_type.dtype || written < 0 || written > length || update_type.shape != expected_update)
    return c.fail("update " + update_type.str() + " must be the cache " + cache_type.str() +
                  " with at most its length along axis " + std::to_string(axis));
  std::string padded = node.input(1);
  if (written < length) {
    CLEAVE_ASSIGN_OR_RETURN(std::string tail, c.apply(OpId::slice, {c.x()}, {{"starts", std::vector<int64_t>{written}},
                                                                             {"ends", std::vector<int64_t>{length}},
                                                                             {"axes", std::vector<int64_t>{axis}}}));
    CLEAVE_ASSIGN_OR_RETURN(padded, c.apply(OpId::concat, {padded, tail}, {{"axis", axis}}));
  }
  if (!hasInput(node, 2)) return c.finish(OpId::identity, {padded});

  // positions s along the axis, [1, ..., length, 1, ...]; the write indices as [batch, 1, ...].
  const int64_t batch = cache_type.shape[0];
  CLEAVE_ASSIGN_OR_RETURN(TensorType indices_type, ctx.typeOf(node, node.input(2)));
  if (indices_type.dtype != DType::kI64 || indices_type.shape != Shape{batch})
    return c.fail("write_indices must be i64[" + std::to_string(batch) + "], got " + indices_type.str());
  Shape position_shape(static_cast<size_t>(rank), 1), index_shape(static_cast<size_t>(rank), 1);
  position_shape[axis] = length;
  index_shape[0] = batch;
  auto positions = std::make_shared<TensorData>();
  positions->type = {DType::kI64, position_shape};
  positions->bytes.resize(static_cast<size_t>(length * 8));
  for (int64_t s = 0; s < length; ++s) positions->as<int64_t>()[s] = s;
  const std::string position_name = node.output(0) + "/positions";
  ctx.bindConstant(position_name, positions);
  CLEAVE_ASSIGN_OR_RETURN(std::string index, c.apply(OpId::reshape, {node.input(2)}, {{"shape", index_shape}}));
  // The update element position s reads: s - index, or in circular mode (s - index) mod length, with
  // index >= 0: (s - index mod length + length) mod length.
  std::string source;
  if (mode == "linear") {
    CLEAVE_ASSIGN_OR_RETURN(source, c.apply(OpId::sub, {position_name, index}));
  } else {
    CLEAVE_ASSIGN_OR_RETURN(std::string cycle, c.filled(static_cast<double>(length), DType::kI64));
    auto modulo = [&](const std::string& x) -> Expected<std::string> {  // x >= 0: truncating division floors
      CLEAVE_ASSIGN_OR_RETURN(std::string quotient, c.apply(OpId::div, {x, cycle}));
      CLEAVE_ASSIGN_OR_RETURN(std::string whole, c.apply(OpId::mul, {quotient, cycle}));
      return c.apply(OpId::sub, {x, whole});
    };
    CLEAVE_ASSIGN_OR_RETURN(std::string wrapped_index, modulo(index));
    CLEAVE_ASSIGN_OR_RETURN(std::string shifted, c.apply(OpId::sub, {position_name, wrapped_index}));
    CLEAVE_ASSIGN_OR_RETURN(std::string lifted, c.apply(OpId::add, {shifted, cycle}));
    CLEAVE_ASSIGN_OR_RETURN(source, modulo(lifted));
  }
  CLEAVE_ASSIGN_OR_RETURN(std::string zero, c.filled(0, DType::kI64));
  CLEAVE_ASSIGN_OR_RETURN(std::string count, c.filled(static_cast<double>(written), DType::kI64));
  CLEAVE_ASSIGN_OR_RETURN(std::string from_start, c.apply(OpId::greater_equal, {source, zero}));
  CLEAVE_ASSIGN_OR_RETURN(std::string before_end, c.apply(OpId::less, {source, count}));
  CLEAVE_ASSIGN_OR_RETURN(std::string no, c.filled(0, DType::kBool));
  CLEAVE_ASSIGN_OR_RETURN(std::string inside, c.apply(OpId::where, {from_start, before_end, no}));
  CLEAVE_ASSIGN_OR_RETURN(std::string clamped, c.apply(OpId::where, {inside, source, zero}));
  CLEAVE_ASSIGN_OR_RETURN(std::string gather_index,
                          c.apply(OpId::expand, {clamped}, {{"shape", std::vector<int64_t>(cache_type.shape)}}));
  CLEAVE_ASSIGN_OR_RETURN(std::string moved, c.apply(OpId::gather_elements, {padded, gather_index}, {{"axis", axis}}));
  return c.finish(OpId::where, {inside, moved, c.x()});
}

// DepthToSpace and SpaceToDepth: reshape to expose the blocks, transpose them into place, reshape back.
Status blocksToFrom(OnnxImportContext& ctx, const onnx::NodeProto& node, bool space_to_depth) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  const TensorType& x_type = c.xType();
  if (c.rank() != 4) return c.fail("the input must be 4-D, not " + x_type.str());
  int64_t block = intAttr(node, "blocksize", 0);
  if (block < 1) return c.fail("blocksize must be at least 1");
  const int64_t n = x_type.shape[0], ch = x_type.shape[1], h = x_type.shape[2], w = x_type.shape[3];
  // The depth of a block's pixel: DCR (the default) puts the block position outside the channel
  // (depth-column-row), CRD inside it (column-row-depth; SpaceToDepth has it from opset 28).
  const std::string mode = stringAttr(node, "mode", "DCR");
  if (mode != "DCR" && mode != "CRD") return c.fail("mode must be DCR or CRD, not '" + mode + "'");
  const bool crd = mode == "CRD";
  std::vector<int64_t> split_shape, perm, result_shape;
  if (space_to_depth) {
    if (h % block || w % block)
      return c.fail("H and W of " + x_type.str() + " must be multiples of " + std::to_string(block));
    split_shape = {n, ch, h / block, block, w / block, block};
    perm = crd ? std::vector<int64_t>{0, 1, 3, 5, 2, 4} : std::vector<int64_t>{0, 3, 5, 1, 2, 4};
    result_shape = {n, ch * block * block, h / block, w / block};
  } else {
    if (ch % (block * block))
      return c.fail("C of " + x_type.str() + " must be a multiple of " + std::to_string(block * block));
    split_shape = crd ? std::vector<int64_t>{n, ch / (block * block), block, block, h, w}
                      : std::vector<int64_t>{n, block, block, ch / (block * block), h, w};
    perm = crd ? std::vector<int64_t>{0, 1, 4, 2, 5, 3} : std::vector<int64_t>{0, 3, 4, 1, 5, 2};
    result_shape = {n, ch / (block * block), h * block, w * block};
  }
  CLEAVE_ASSIGN_OR_RETURN(std::string split, c.apply(OpId::reshape, {c.x()}, {{"shape", split_shape}}));
  CLEAVE_ASSIGN_OR_RETURN(std::string moved, c.apply(OpId::transpose, {split}, {{"perm", perm}}));
  return c.finish(OpId::reshape, {moved}, {{"shape", result_shape}});
}
Status convertDepthToSpace(OnnxImportContext& ctx, const onnx::NodeProto& node) { return blocksToFrom(ctx, node, false); }
Status convertSpaceToDepth(OnnxImportContext& ctx, const onnx::NodeProto& node) { return blocksToFrom(ctx, node, true); }

// Tile repeats each dim by concatenating copies (repeats 0: an empty slice).
Status convertTile(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(auto repeats, ctx.constantInts(node, 1));
  if (static_cast<int64_t>(repeats.size()) != c.rank())
    return c.fail("repeats must have one value per dim of " + c.xType().str());
  std::string result = c.x();
  for (int64_t axis = 0; axis < c.rank(); ++axis) {
    if (repeats[axis] == 1) continue;
    if (repeats[axis] == 0) {
      CLEAVE_ASSIGN_OR_RETURN(result, c.apply(OpId::slice, {result}, {{"starts", std::vector<int64_t>{0}},
                                                                       {"ends", std::vector<int64_t>{0}},
                                                                       {"axes", std::vector<int64_t>{axis}}}));
      continue;
    }
    if (repeats[axis] < 0) return c.fail("repeats must be non-negative");
    CLEAVE_ASSIGN_OR_RETURN(result,
                            c.apply(OpId::concat, std::vector<std::string>(repeats[axis], result), {{"axis", axis}}));
  }
  return c.finish(OpId::identity, {result});
}

// Per axis: crop negative pads with a slice, then concat the padding on each side: a constant
// block, the edge row expanded, the rows mirrored by a reversed slice, or (wrap) the rows repeated.
Status convertPad(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  const TensorType& x_type = c.xType();
  const int64_t rank = c.rank();
  std::string mode = stringAttr(node, "mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect" && mode != "wrap")
    return c.fail("mode '" + mode + "' is not known");
  CLEAVE_ASSIGN_OR_RETURN(auto pads, ctx.constantInts(node, 1));
  if (hasInput(node, 3)) {  // opset 18: the pads are for these axes only
    CLEAVE_ASSIGN_OR_RETURN(auto axes, ctx.constantInts(node, 3));
    if (pads.size() != 2 * axes.size()) return c.fail("pads must have 2 values per axis of the axes input");
    std::vector<int64_t> full(static_cast<size_t>(2 * rank), 0);
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t axis = normalizeAxis(axes[i], rank);
      if (axis < 0) return c.fail("axis " + std::to_string(axes[i]) + " is out of range for " + x_type.str());
      full[axis] = pads[i];
      full[axis + rank] = pads[i + axes.size()];
    }
    pads = full;
  }
  if (static_cast<int64_t>(pads.size()) != 2 * rank) return c.fail("pads must have 2 values per dim of " + x_type.str());
  constexpr int64_t kPadLimit = int64_t{1} << 62;  // keeps the sums below from overflowing
  for (int64_t pad : pads)
    if (pad < -kPadLimit || pad > kPadLimit) return c.fail("pad " + std::to_string(pad) + " is out of range");
  double value = 0;
  if (hasInput(node, 2)) {
    CLEAVE_ASSIGN_OR_RETURN(value, ctx.constantScalar(node, 2));
  }
  Shape shape = x_type.shape;
  std::string result = c.x();
  auto sliceAxis = [&](const std::string& input, int64_t axis, int64_t start, int64_t end, int64_t stride) {
    return c.apply(OpId::slice, {input}, {{"starts", std::vector<int64_t>{start}}, {"ends", std::vector<int64_t>{end}},
                                          {"axes", std::vector<int64_t>{axis}}, {"steps", std::vector<int64_t>{stride}}});
  };
  for (int64_t axis = 0; axis < rank; ++axis) {
    int64_t before = pads[axis], after = pads[axis + rank], dim = shape[axis];
    if (before < 0 || after < 0) {
      int64_t start = std::max<int64_t>(0, -before), end = dim - std::max<int64_t>(0, -after);
      if (end < start) return c.fail("pads crop more than dim " + std::to_string(axis) + " of " + x_type.str() + " holds");
      CLEAVE_ASSIGN_OR_RETURN(result, sliceAxis(result, axis, start, end, 1));
      dim = shape[axis] = end - start;
      before = std::max<int64_t>(before, 0);
      after = std::max<int64_t>(after, 0);
    }
    if (before == 0 && after == 0) continue;
    if (mode != "constant" && dim == 0) return c.fail("mode '" + mode + "' cannot pad an empty dim");
    if (mode == "reflect" && (before >= dim || after >= dim))
      return c.fail("reflect pads must be smaller than dim " + std::to_string(axis) + " (" + std::to_string(dim) + ")");
    std::vector<std::string> parts;
    for (int side = 0; side < 2; ++side) {
      int64_t count = side == 0 ? before : after;
      if (count == 0) continue;
      Shape block_shape = shape;
      block_shape[axis] = count;
      std::string part;
      if (mode == "constant") {
        CLEAVE_ASSIGN_OR_RETURN(part, c.filled(value, c.dtype(), block_shape));
      } else if (mode == "edge") {
        CLEAVE_ASSIGN_OR_RETURN(std::string edge, side == 0 ? sliceAxis(result, axis, 0, 1, 1)
                                                              : sliceAxis(result, axis, dim - 1, dim, 1));
        CLEAVE_ASSIGN_OR_RETURN(part, c.apply(OpId::expand, {edge}, {{"shape", block_shape}}));
      } else if (mode == "wrap") {  // the rows continued periodically (opset 19): the last ones in front
        const int64_t copies = (count + dim - 1) / dim;
        std::string periodic = result;
        if (copies > 1) {
          CLEAVE_ASSIGN_OR_RETURN(periodic, c.apply(OpId::concat, std::vector<std::string>(copies, result), {{"axis", axis}}));
        }
        CLEAVE_ASSIGN_OR_RETURN(part, side == 0 ? sliceAxis(periodic, axis, copies * dim - count, copies * dim, 1)
                                                : sliceAxis(periodic, axis, 0, count, 1));
      } else {  // reflect: rows before..1 in front, rows dim-2..dim-1-after behind (reversed slices)
        int64_t end = dim - 2 - count;
        CLEAVE_ASSIGN_OR_RETURN(part, side == 0 ? sliceAxis(result, axis, count, 0, -1)
                                                : sliceAxis(result, axis, dim - 2, end < 0 ? -dim - 1 : end, -1));
      }
      parts.push_back(part);
      if (side == 0) parts.push_back(result);
    }
    if (before == 0) parts.insert(parts.begin(), result);
    CLEAVE_ASSIGN_OR_RETURN(result, c.apply(OpId::concat, parts, {{"axis", axis}}));
    shape[axis] += before + after;
  }
  return c.finish(OpId::identity, {result});
}

constexpr OnnxConverter kShapeConverters[] = {
    {"Concat", convertConcat},
    {"DepthToSpace", convertDepthToSpace},
    {"Expand", convertExpand},
    {"Flatten", convertFlatten},
    {"Gather", convertGather},
    {"GatherElements", convertGatherElements},
    {"GatherND", convertGatherND},
    {"Identity", convertIdentity},
    {"Pad", convertPad},
    {"Reshape", convertReshape},
    {"ScatterElements", convertScatter<OpId::scatter_elements>},
    {"ScatterND", convertScatter<OpId::scatter_nd>},
    {"Slice", convertSlice},
    {"SpaceToDepth", convertSpaceToDepth},
    {"Split", convertSplit<false>, 11, 12},
    {"Split", convertSplit<true>, 13},
    {"Squeeze", convertSqueezeLike<OpId::squeeze, false>, 11, 12},
    {"Squeeze", convertSqueezeLike<OpId::squeeze, true>, 13},
    {"TensorScatter", convertTensorScatter, 24},
    {"Tile", convertTile},
    {"Transpose", convertTranspose},
    {"Trilu", convertTrilu},
    {"Unsqueeze", convertSqueezeLike<OpId::unsqueeze, false>, 11, 12},
    {"Unsqueeze", convertSqueezeLike<OpId::unsqueeze, true>, 13},
};

}  // namespace

std::span<const OnnxConverter> shapeConverters() { return kShapeConverters; }

}  // namespace cleave
