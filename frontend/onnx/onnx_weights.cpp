// Trained weights back into an ONNX model.
#include "frontend/onnx/onnx_weights.h"

#include <onnx/onnx_pb.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "frontend/onnx/onnx_tensors.h"

namespace cleave {
namespace {

Expected<onnx::ModelProto> readModel(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::badInput("cannot open ONNX model '" + path + "': " + std::strerror(errno));
  onnx::ModelProto model;
  if (!model.ParseFromIstream(&in) || !model.has_graph())
    return Status::badInput(path + ": not a valid ONNX model");
  return model;
}

}  // namespace

Expected<std::map<std::string, std::string>> onnxInitializerNames(const std::string& model_path) {
  CLEAVE_ASSIGN_OR_RETURN(onnx::ModelProto model, readModel(model_path));
  std::map<std::string, std::string> names;
  for (const auto& initializer : model.graph().initializer())
    names.emplace(sanitizeOnnxName(initializer.name()), initializer.name());
  return names;
}

// Steps: index the initializers by cleave name; check each weight against its initializer; replace
// the initializer's data with the weight's bytes, inline; bring external data inline; serialize.
Expected<std::string> onnxModelWithWeights(const std::string& model_path, std::span<const OnnxWeight> weights) {
  CLEAVE_ASSIGN_OR_RETURN(onnx::ModelProto model, readModel(model_path));
  std::map<std::string, onnx::TensorProto*> by_name;
  for (auto& initializer : *model.mutable_graph()->mutable_initializer())
    by_name.emplace(sanitizeOnnxName(initializer.name()), &initializer);
  for (const OnnxWeight& weight : weights) {
    auto it = by_name.find(weight.name);
    if (it == by_name.end())
      return Status::badInput(model_path + ": no initializer holds weight '" + weight.name +
                              "' (was the plan compiled from this model?)");
    onnx::TensorProto& initializer = *it->second;
    std::optional<DType> dtype = dtypeFromOnnx(initializer.data_type());
    TensorType initial{dtype.value_or(weight.type.dtype), Shape(initializer.dims().begin(), initializer.dims().end())};
    if (!dtype || initial != weight.type)
      return Status::badInput(model_path + ": initializer '" + initializer.name() + "' is " +
                              (dtype ? initial.str() : "of ONNX type " + std::to_string(initializer.data_type())) +
                              ", the trained weight is " + weight.type.str());
    // Only the bytes change: every typed field and external reference goes, raw_data holds the data.
    onnx::TensorProto replaced;
    replaced.set_name(initializer.name());
    replaced.set_data_type(initializer.data_type());
    *replaced.mutable_dims() = initializer.dims();
    replaced.set_doc_string(initializer.doc_string());
    replaced.set_raw_data(static_cast<const char*>(weight.data), static_cast<size_t>(weight.type.bytes()));
    initializer = std::move(replaced);
  }
  // The other initializers that lie in external files come inline, so the model stands alone.
  for (auto& initializer : *model.mutable_graph()->mutable_initializer()) {
    if (initializer.data_location() != onnx::TensorProto::EXTERNAL) continue;
    CLEAVE_ASSIGN_OR_RETURN(TensorPtr data, tensorFromOnnx(initializer, model_path));
    initializer.clear_external_data();
    initializer.clear_data_location();
    initializer.set_raw_data(reinterpret_cast<const char*>(data->bytes.data()), data->bytes.size());
  }
  if (model.ByteSizeLong() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return Status::badInput(model_path + ": the model with its weights inline is over protobuf's 2 GB limit");
  std::string bytes;
  if (!model.SerializeToString(&bytes)) return Status::internal(model_path + ": cannot serialize the ONNX model");
  return bytes;
}

}  // namespace cleave
