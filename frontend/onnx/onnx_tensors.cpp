// ONNX tensors and names as cleave sees them: dtypes, TensorProto data, small constants the importer makes.
#include "frontend/onnx/onnx_tensors.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ir/constant_eval.h"

namespace cleave {
namespace {

// Copies a repeated proto field into `out` as little-endian T elements.
template <class T, class Field>
void copyField(const Field& field, std::vector<uint8_t>& out) {
  out.resize(field.size() * sizeof(T));
  T* data = reinterpret_cast<T*>(out.data());
  for (int i = 0; i < field.size(); ++i) data[i] = static_cast<T>(field.Get(i));
}

// Reads the external-data bytes of `tensor` from the file next to the model.
Status readExternalData(const onnx::TensorProto& tensor, const std::string& model_path, std::vector<uint8_t>& out) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& entry : tensor.external_data()) {
    if (entry.key() == "location") location = entry.value();
    if (entry.key() != "offset" && entry.key() != "length") continue;
    int64_t& number = entry.key() == "offset" ? offset : length;
    const std::string& text = entry.value();
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
    if (error != std::errc() || end != text.data() + text.size() || number < 0)
      return Status::badInput(model_path + ": initializer '" + tensor.name() + "': external data " + entry.key() +
                              " '" + text + "' is not a byte count");
  }
  auto file = std::filesystem::path(model_path).parent_path() / location;
  std::ifstream in(file, std::ios::binary | std::ios::ate);
  if (location.empty() || !in)
    return Status::badInput(model_path + ": initializer '" + tensor.name() + "': cannot open external data '" +
                            file.string() + "'");
  const int64_t file_bytes = static_cast<int64_t>(in.tellg());
  if (length < 0) length = std::max<int64_t>(file_bytes - offset, 0);
  if (offset > file_bytes || length > file_bytes - offset)
    return Status::badInput(model_path + ": initializer '" + tensor.name() + "': external data '" + file.string() +
                            "' is shorter than offset " + std::to_string(offset) + " + length " + std::to_string(length));
  out.resize(static_cast<size_t>(length));
  in.seekg(offset);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
  if (!in)
    return Status::badInput(model_path + ": initializer '" + tensor.name() + "': cannot read external data '" +
                            file.string() + "'");
  return Status::ok();
}

// `data` converted to `dtype` (through the constant evaluator's cast).
Expected<TensorPtr> castConstant(TensorPtr data, DType dtype) {
  if (data->type.dtype == dtype) return data;
  CLEAVE_ASSIGN_OR_RETURN(auto cast, evaluateConstantNode(OpId::cast, {{"to", std::string(dtypeName(dtype))}},
                                                          std::vector<const TensorData*>{data.get()},
                                                          std::vector<TensorType>{{dtype, data->type.shape}}));
  return TensorPtr(std::make_shared<TensorData>(std::move(cast.front())));
}

}  // namespace

// A cleave value name from an ONNX name: PyTorch's "/fc1/Gemm_output_0" becomes "fc1.Gemm", and
// characters outside [A-Za-z0-9_.] become '_' ("onnx::Conv_37" -> "onnx__Conv_37").
std::string sanitizeOnnxName(const std::string& onnx_name) {
  std::string name = onnx_name;
  while (!name.empty() && name[0] == '/') name.erase(0, 1);
  const std::string first_output = "_output_0";
  if (name.size() > first_output.size() && name.ends_with(first_output)) name.resize(name.size() - first_output.size());
  for (char& c : name)
    if (c == '/') c = '.';
    else if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') c = '_';
  if (name.empty() || (!std::isalpha(static_cast<unsigned char>(name[0])) && name[0] != '_')) name = "v" + name;
  return name;
}

// The cleave dtype of an ONNX TensorProto data type; nullopt for types cleave lacks.
std::optional<DType> dtypeFromOnnx(int32_t onnx_type) {
  switch (onnx_type) {
    case onnx::TensorProto::FLOAT: return DType::kF32;
    case onnx::TensorProto::FLOAT16: return DType::kF16;
    case onnx::TensorProto::BFLOAT16: return DType::kBF16;
    case onnx::TensorProto::DOUBLE: return DType::kF64;
    case onnx::TensorProto::INT64: return DType::kI64;
    case onnx::TensorProto::INT32: return DType::kI32;
    case onnx::TensorProto::INT8: return DType::kI8;
    case onnx::TensorProto::UINT8: return DType::kU8;
    case onnx::TensorProto::BOOL: return DType::kBool;
    default: return std::nullopt;
  }
}

// Converts an ONNX tensor (raw, typed-field or external data) into TensorData.
Expected<TensorPtr> tensorFromOnnx(const onnx::TensorProto& tensor, const std::string& model_path) {
  auto dtype = dtypeFromOnnx(tensor.data_type());
  if (!dtype)
    return Status::badInput(model_path + ": tensor '" + tensor.name() + "' has ONNX data type " +
                            std::to_string(tensor.data_type()) + ", which cleave does not support");
  auto data = std::make_shared<TensorData>();
  data->type.dtype = *dtype;
  for (int64_t dim : tensor.dims()) data->type.shape.push_back(dim);
  if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
    CLEAVE_TRY(readExternalData(tensor, model_path, data->bytes));
  } else if (tensor.has_raw_data()) {
    data->bytes.assign(tensor.raw_data().begin(), tensor.raw_data().end());
  } else {
    switch (*dtype) {
      case DType::kF32: copyField<float>(tensor.float_data(), data->bytes); break;
      case DType::kF64: copyField<double>(tensor.double_data(), data->bytes); break;
      case DType::kI64: copyField<int64_t>(tensor.int64_data(), data->bytes); break;
      case DType::kI32: copyField<int32_t>(tensor.int32_data(), data->bytes); break;
      case DType::kI8: copyField<int8_t>(tensor.int32_data(), data->bytes); break;
      case DType::kU8:
      case DType::kBool: copyField<uint8_t>(tensor.int32_data(), data->bytes); break;
      case DType::kF16:
      case DType::kBF16: copyField<uint16_t>(tensor.int32_data(), data->bytes); break;
    }
  }
  if (static_cast<int64_t>(data->bytes.size()) != data->type.bytes())
    return Status::badInput(model_path + ": tensor '" + tensor.name() + "' of type " + data->type.str() + " holds " +
                            std::to_string(data->bytes.size()) + " bytes, expected " +
                            std::to_string(data->type.bytes()));
  return TensorPtr(std::move(data));
}

// The integers of an i64 or i32 tensor.
std::vector<int64_t> tensorInts(const TensorData& data) {
  std::vector<int64_t> ints(static_cast<size_t>(data.type.numel()));
  for (size_t i = 0; i < ints.size(); ++i)
    ints[i] = data.type.dtype == DType::kI64 ? data.as<int64_t>()[i] : data.as<int32_t>()[i];
  return ints;
}

// An i64 tensor holding `ints`, of shape [ints.size()] (or [] when `scalar`).
TensorPtr intsTensor(const std::vector<int64_t>& ints, bool scalar) {
  auto data = std::make_shared<TensorData>();
  data->type = {DType::kI64, scalar ? Shape{} : Shape{static_cast<int64_t>(ints.size())}};
  data->bytes.resize(ints.size() * sizeof(int64_t));
  if (!ints.empty()) std::memcpy(data->bytes.data(), ints.data(), data->bytes.size());
  return data;
}

// A tensor of `dtype` and `shape` holding `values` (given as doubles, converted to dtype).
Expected<TensorPtr> numbersTensor(const std::vector<double>& values, DType dtype, Shape shape) {
  auto data = std::make_shared<TensorData>();
  data->type = {DType::kF64, std::move(shape)};
  data->bytes.resize(values.size() * sizeof(double));
  if (!values.empty()) std::memcpy(data->bytes.data(), values.data(), data->bytes.size());  // no memcpy of null
  return castConstant(std::move(data), dtype);
}

// Checks that a constant of `shape` may be computed: no negative dim, at most kMaxFoldedElements.
Status checkFoldedShape(const Shape& shape) {
  int64_t elements = 1;
  for (int64_t dim : shape) {
    if (dim < 0) return Status::badInput("a constant of shape " + shapeStr(shape) + " has a negative dim");
    if (__builtin_mul_overflow(elements, dim, &elements) || elements > kMaxFoldedElements)
      elements = kMaxFoldedElements + 1;
  }
  if (elements > kMaxFoldedElements)
    return Status::badInput("a constant of shape " + shapeStr(shape) + " is too large to compute (over " +
                            std::to_string(kMaxFoldedElements) + " elements)");
  return Status::ok();
}

}  // namespace cleave
