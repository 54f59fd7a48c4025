// Trained weights back into an ONNX model: the initializers' ONNX names by the names cleave gives
// them, and the model with its initializers' data replaced.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "ir/status.h"
#include "ir/tensor_type.h"

namespace cleave {

// A weight to write into a model: cleave's name for it, its type and its bytes (row-major).
struct OnnxWeight {
  std::string name;
  TensorType type;
  const void* data = nullptr;
};

// The ONNX name of every initializer of the model's main graph, keyed by the name cleave's importer
// gives it (sanitizeOnnxName: "onnx::MatMul_12" is "onnx__MatMul_12"). kBadInput naming the file
// when it is not an ONNX model.
Expected<std::map<std::string, std::string>> onnxInitializerNames(const std::string& model_path);

// The model at `model_path`, serialized, with the data of the initializer of each weight replaced
// (stored inline, external data included). kBadInput naming the weight when no initializer has its
// name, or its dtype or shape differs from the initializer's.
Expected<std::string> onnxModelWithWeights(const std::string& model_path, std::span<const OnnxWeight> weights);

}  // namespace cleave
