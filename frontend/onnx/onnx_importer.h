// ONNX import: reads an .onnx model through libonnx and builds the equivalent cleave Graph.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/attribute.h"
#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// How symbolic dimensions of an ONNX model are made static.
struct OnnxImportOptions {
  // The batch: dim 0 of every graph input, symbolic or fixed by the export (a fixed-batch export is
  // imported at another batch wherever the exporter computed shapes from the input's dims); 0 keeps
  // fixed dims and gives symbolic ones 1.
  int64_t batch = 0;
  // The sequence length: dim 1 of every graph input where it is symbolic, and of every rank-2
  // integer input (token ids) where the export fixed it; 0 keeps fixed dims (a symbolic one is then
  // an error).
  int64_t seq_len = 0;
  // Graph inputs fixed to a value, by ONNX name: each becomes a constant instead of an input, so what
  // is computed from it folds (a model that takes a Reshape's shape or a Clip's bounds as inputs).
  std::map<std::string, TensorData> input_values;
};

// Imports the ONNX model at `path` (opsets 11 to 17; older ones are upgraded to 11 by libonnx's
// version converter): runs libonnx's checker and shape inference, turns float initializers into
// trainable parameters with their data (external data included; an Identity of one, which is how
// PyTorch's exporter writes initializers it merged for having equal values, becomes a parameter of
// its own), other initializers and Constant nodes into constants, graph inputs into inputs, nodes
// into cleave ops (through the converter table of onnx_converters.h), and folds every node whose operands are all constants (so Shape -> Gather ->
// Concat -> Reshape subgraphs become static shapes, evaluated at options.batch and options.seq_len:
// importing again at another batch is how a compile evaluates them for each program's rows).
// Symbolic dim 0 of an input becomes options.batch (or 1), symbolic dim 1 options.seq_len; other
// symbolic dims are an error, and so is a batch or length that the model's outputs do not follow
// (its exporter wrote the export's batch as a constant). An unsupported model gets one kBadInput
// error listing every unsupported op type with its node names and the opset.
Expected<Graph> importOnnxModel(const std::string& path, const OnnxImportOptions& options);

// The default-domain opsets the importer maps; a model at an older opset is first upgraded to
// kMinOnnxOpset by libonnx's version converter.
inline constexpr int64_t kMinOnnxOpset = 11;
inline constexpr int64_t kMaxOnnxOpset = 28;
// The newest opset and IR version Debian's libonnx (1.12) checks and infers shapes of; newer
// models are checked by cleave's own rules alone (docs/onnx.md says why).
inline constexpr int64_t kMaxLibonnxOpset = 17;
inline constexpr int64_t kMaxLibonnxIrVersion = 8;

// Whether the importer could take a model, judged from its opset and op types alone.
struct OnnxModelSupport {
  int64_t opset = -1;                         // the default-domain opset; -1 when none is imported
  std::vector<std::string> unsupported_ops;   // op types (domain-qualified outside ai.onnx), sorted, once each
  // Graph inputs and outputs that are not tensors of a cleave dtype, e.g. "input 'x' (sequence)".
  std::vector<std::string> unsupported_values;
  // True when the opset is at most kMaxOnnxOpset (older ones are upgraded) and every op type and
  // value type is mapped.
  bool supported() const {
    return opset >= 1 && opset <= kMaxOnnxOpset && unsupported_ops.empty() && unsupported_values.empty();
  }
};

// Parses the ONNX model at `path` (no checking) and reports its opset and what the importer lacks.
Expected<OnnxModelSupport> checkOnnxSupport(const std::string& path);

// Checks the converter table (frontend/onnx/onnx_converters.h): every entry has a converter and an
// opset range inside [kMinOnnxOpset, kMaxOnnxOpset], and the ranges of one op type do not overlap.
// The error (kInternal) names the op type.
Status checkOnnxConverterTable();

// Reads one serialized ONNX TensorProto (a conformance case's input_0.pb, say) into tensor data;
// `name` receives the tensor's name when not null.
Expected<TensorData> readOnnxTensorFile(const std::string& path, std::string* name = nullptr);

}  // namespace cleave
