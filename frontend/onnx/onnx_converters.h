// The one table from ONNX op type to converter: what the importer maps, at which opsets, and how.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <span>
#include <string_view>

#include "frontend/onnx/onnx_import_context.h"
#include "frontend/onnx/onnx_importer.h"
#include "ir/op_table.h"
#include "ir/status.h"

namespace cleave {

// Converts one ONNX node into cleave ops (or constants) through the import context.
using OnnxConvertFn = Status (*)(OnnxImportContext& ctx, const onnx::NodeProto& node);

// Adding an ONNX op is one entry in the table part of its family (converters_<family>.cpp) and
// one converter function there; the import, the "unsupported ONNX ops" diagnostic and
// checkOnnxSupport all read the table.

// One table entry: an ONNX op type of the default domain and the converter for the opsets
// first_opset..last_opset. An op whose meaning changed between opsets has one entry per range.
struct OnnxConverter {
  std::string_view op_type;
  OnnxConvertFn convert;
  int64_t first_opset = kMinOnnxOpset;
  int64_t last_opset = kMaxOnnxOpset;
};

// The converter of default-domain op `op_type` at `opset`; null when the importer does not map it.
const OnnxConverter* findOnnxConverter(std::string_view op_type, int64_t opset);

// Every entry of the table, sorted by op type then first opset.
std::span<const OnnxConverter> onnxConverters();

// The converter of an ONNX op that is one cleave op `op` on all the node's inputs, without attributes.
template <OpId op>
Status convertOneToOne(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  return ctx.emit(node, op, allInputs(node), {});
}

// The table's parts, one per op family (each defined in its converters_<family>.cpp).
std::span<const OnnxConverter> elementwiseConverters();
std::span<const OnnxConverter> activationConverters();
std::span<const OnnxConverter> reductionConverters();
std::span<const OnnxConverter> networkConverters();
std::span<const OnnxConverter> shapeConverters();
std::span<const OnnxConverter> constantConverters();
std::span<const OnnxConverter> einsumConverters();
std::span<const OnnxConverter> sequenceConverters();
std::span<const OnnxConverter> attentionConverters();

}  // namespace cleave
