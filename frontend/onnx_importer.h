// ONNX import: reads an .onnx model through libonnx and builds the equivalent cleave Graph.
#pragma once

#include <cstdint>
#include <string>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// How symbolic dimensions of an ONNX model are made static.
struct OnnxImportOptions {
  // The value given to a symbolic batch dim (dim 0 of a graph input); 0 means 1.
  int64_t batch = 0;
};

// Imports the ONNX model at `path` (opsets 11 to 17): runs libonnx's checker and shape inference,
// turns float initializers into trainable parameters with their data (external data included),
// other initializers and Constant nodes into constants, graph inputs into inputs, nodes into cleave
// ops, and folds every node whose operands are all constants (so Shape -> Gather -> Concat ->
// Reshape subgraphs become static shapes). Symbolic dim 0 of an input becomes options.batch (or 1);
// other symbolic dims are an error. An unsupported model gets one kBadInput error listing every
// unsupported op type with its node names and the opset.
Expected<Graph> importOnnxModel(const std::string& path, const OnnxImportOptions& options);

}  // namespace cleave
