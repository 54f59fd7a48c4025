// ONNX tensors and names as cleave sees them: dtypes, TensorProto data, small constants the importer makes.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/attribute.h"
#include "ir/status.h"
#include "ir/tensor_type.h"

namespace cleave {

// Tensor data shared between the importer's constants, parameters and node attributes.
using TensorPtr = std::shared_ptr<const TensorData>;

// A cleave value name from an ONNX name: PyTorch's "/fc1/Gemm_output_0" becomes "fc1.Gemm", and
// characters outside [A-Za-z0-9_.] become '_' ("onnx::Conv_37" -> "onnx__Conv_37").
std::string sanitizeOnnxName(const std::string& onnx_name);

// The cleave dtype of an ONNX TensorProto data type; nullopt for types cleave lacks.
std::optional<DType> dtypeFromOnnx(int32_t onnx_type);

// Converts an ONNX tensor (raw, typed-field or external data next to `model_path`) into TensorData.
Expected<TensorPtr> tensorFromOnnx(const onnx::TensorProto& tensor, const std::string& model_path);

// The integers of an i64 or i32 tensor.
std::vector<int64_t> tensorInts(const TensorData& data);

// An i64 tensor holding `ints`, of shape [ints.size()] (or [] when `scalar`).
TensorPtr intsTensor(const std::vector<int64_t>& ints, bool scalar = false);

// A tensor of `dtype` and `shape` holding `values` (given as doubles, converted to dtype).
Expected<TensorPtr> numbersTensor(const std::vector<double>& values, DType dtype, Shape shape);

// The most elements a constant the importer computes (folds or fills) may have: a corrupt model
// must not make it allocate without bound. Real models fold shapes and masks, far below this.
inline constexpr int64_t kMaxFoldedElements = int64_t{1} << 26;

// Checks that a constant of `shape` may be computed: no negative dim, at most kMaxFoldedElements.
Status checkFoldedShape(const Shape& shape);

}  // namespace cleave
