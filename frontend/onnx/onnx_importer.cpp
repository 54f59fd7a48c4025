// ONNX import: reads an .onnx model through libonnx and builds the equivalent cleave Graph.
#include "frontend/onnx/onnx_importer.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "frontend/onnx/onnx_library_checks.h"
#include "ir/constant_eval.h"

namespace cleave {
namespace {

using TensorPtr = std::shared_ptr<const TensorData>;

// A cleave value name from an ONNX name: PyTorch's "/fc1/Gemm_output_0" becomes "fc1.Gemm", and
// characters outside [A-Za-z0-9_.] become '_' ("onnx::Conv_37" -> "onnx__Conv_37").
std::string sanitizeName(const std::string& onnx_name) {
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
TensorPtr intsTensor(const std::vector<int64_t>& ints, bool scalar = false) {
  auto data = std::make_shared<TensorData>();
  data->type = {DType::kI64, scalar ? Shape{} : Shape{static_cast<int64_t>(ints.size())}};
  data->bytes.resize(ints.size() * sizeof(int64_t));
  if (!ints.empty()) std::memcpy(data->bytes.data(), ints.data(), data->bytes.size());
  return data;
}

// `data` converted to `dtype` (through the constant evaluator's cast).
Expected<TensorPtr> castConstant(TensorPtr data, DType dtype) {
  if (data->type.dtype == dtype) return data;
  CLEAVE_ASSIGN_OR_RETURN(auto cast, evaluateConstantNode(OpId::cast, {{"to", std::string(dtypeName(dtype))}},
                                                          std::vector<const TensorData*>{data.get()},
                                                          std::vector<TensorType>{{dtype, data->type.shape}}));
  return TensorPtr(std::make_shared<TensorData>(std::move(cast.front())));
}

// A tensor of `dtype` and `shape` holding `values` (given as doubles, converted to dtype).
Expected<TensorPtr> numbersTensor(const std::vector<double>& values, DType dtype, Shape shape) {
  auto data = std::make_shared<TensorData>();
  data->type = {DType::kF64, std::move(shape)};
  data->bytes.resize(values.size() * sizeof(double));
  if (!values.empty()) std::memcpy(data->bytes.data(), values.data(), data->bytes.size());  // no memcpy of null
  return castConstant(std::move(data), dtype);
}

// The most elements a constant the importer computes (folds or fills) may have: a corrupt model
// must not make it allocate without bound. Real models fold shapes and masks, far below this.
constexpr int64_t kMaxFoldedElements = int64_t{1} << 26;

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

// The ONNX op types this importer maps, for the up-front unsupported-op check.
const std::set<std::string>& supportedOpTypes() {
  static const std::set<std::string> kTypes = {
      "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Neg", "Erf", "Tanh",
      "Sigmoid", "Relu", "Clip", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool",
      "BatchNormalization", "Flatten", "Reshape", "Transpose", "Concat", "Split", "Slice", "Gather",
      "Unsqueeze", "Squeeze", "Softmax", "LogSoftmax", "Cast", "Where", "Equal", "Less", "LessOrEqual",
      "Greater", "GreaterOrEqual", "ReduceMean", "ReduceSum", "ReduceMax", "Identity", "Dropout",
      "Constant", "Shape", "Expand", "Trilu", "LayerNormalization", "Not", "ConstantOfShape", "Range"};
  return kTypes;
}

// The ONNX op types the importer writes as compositions of cleave ops (OnnxImporter::importComposite).
const std::set<std::string>& compositeOpTypes() {
  static const std::set<std::string> kTypes = {
      "Abs", "Reciprocal", "Sign", "Max", "Min", "Sum", "Mean", "And", "Or", "Xor", "IsNaN", "IsInf", "CastLike",
      "Size", "EyeLike", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "ThresholdedRelu", "HardSigmoid", "HardSwish",
      "Softplus", "Softsign", "Shrink", "ReduceMin", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
      "ReduceLogSumExp", "GlobalMaxPool", "InstanceNormalization", "MeanVarianceNormalization", "DepthToSpace",
      "SpaceToDepth", "Tile", "Pad", "ConvTranspose"};
  return kTypes;
}

// Builds the Graph node by node; one instance per import.
class OnnxImporter {
 public:
  OnnxImporter(std::string path, const OnnxImportOptions& options, int64_t opset)
      : path_(std::move(path)), options_(options), opset_(opset) {}

  Expected<Graph> run(const onnx::GraphProto& onnx_graph);

 private:
  // Steps of run().
  Status importInitializers(const onnx::GraphProto& onnx_graph);
  Status importInputs(const onnx::GraphProto& onnx_graph);
  Status importNode(const onnx::NodeProto& node);
  Status importOutputs(const onnx::GraphProto& onnx_graph);

  // Helpers for node import.
  SourceLoc locOf(const onnx::NodeProto& node) const;
  std::string where(const onnx::NodeProto& node) const;
  Status nodeError(const onnx::NodeProto& node, const std::string& message) const;
  bool hasInput(const onnx::NodeProto& node, int index) const;
  // The graph value of ONNX tensor `name`, creating a constant node or parameter on first use.
  Expected<ValueId> valueOf(const onnx::NodeProto& node, const std::string& name);
  // The type of ONNX tensor `name` (a value, constant or parameter initializer).
  Expected<TensorType> typeOf(const onnx::NodeProto& node, const std::string& name);
  // The data of input `index`, which must be a constant.
  Expected<TensorPtr> constantInput(const onnx::NodeProto& node, int index);
  Expected<std::vector<int64_t>> constantInts(const onnx::NodeProto& node, int index);
  Expected<double> constantScalar(const onnx::NodeProto& node, int index);
  // Emits `op` on the given ONNX input names: folded when every input is a constant, else a node.
  Status emit(const onnx::NodeProto& node, OpId op, const std::vector<std::string>& inputs, AttrMap attrs,
              int result_count = 1);
  // emit with the results bound to the ONNX names `outputs` (intermediate steps of a decomposition).
  Status emitTo(const onnx::NodeProto& node, OpId op, const std::vector<std::string>& inputs, AttrMap attrs,
                const std::vector<std::string>& outputs);
  // ONNX ops that are compositions of cleave ops (compositeOpTypes()): Abs, Max, ReduceL2, Pad, ...
  Status importComposite(const onnx::NodeProto& node);
  // Emits `op` on internal operand values and returns its results (for multi-node lowerings).
  Expected<std::vector<ValueId>> emitValues(const onnx::NodeProto& node, OpId op, std::vector<ValueId> operands,
                                            AttrMap attrs, const std::string& result_hint);
  void bindConstant(const std::string& name, TensorPtr data) { constants_[name] = std::move(data); }
  // LayerNormalization's optional outputs Mean and InvStdDev, from reductions over dims axis..rank-1.
  Status layerNormStatistics(const onnx::NodeProto& node, int64_t axis, double epsilon);

  std::string path_;
  OnnxImportOptions options_;
  int64_t opset_;
  Graph graph_;
  std::unordered_map<std::string, ValueId> values_;         // ONNX tensor -> graph value
  std::unordered_map<std::string, TensorPtr> constants_;    // ONNX tensor -> known data (foldable)
  std::unordered_map<std::string, TensorPtr> parameters_;   // float initializers, made params on first use
};

// ONNX attribute accessors with defaults.
const onnx::AttributeProto* findAttr(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& attr : node.attribute())
    if (attr.name() == name) return &attr;
  return nullptr;
}
int64_t intAttr(const onnx::NodeProto& node, const std::string& name, int64_t fallback) {
  const auto* attr = findAttr(node, name);
  return attr ? attr->i() : fallback;
}
double floatAttr(const onnx::NodeProto& node, const std::string& name, double fallback) {
  const auto* attr = findAttr(node, name);
  return attr ? attr->f() : fallback;
}
std::string stringAttr(const onnx::NodeProto& node, const std::string& name, const std::string& fallback) {
  const auto* attr = findAttr(node, name);
  return attr ? attr->s() : fallback;
}
std::optional<std::vector<int64_t>> intsAttr(const onnx::NodeProto& node, const std::string& name) {
  const auto* attr = findAttr(node, name);
  if (!attr) return std::nullopt;
  return std::vector<int64_t>(attr->ints().begin(), attr->ints().end());
}

SourceLoc OnnxImporter::locOf(const onnx::NodeProto& node) const {
  std::string name = !node.name().empty() ? node.name() : node.op_type() + " -> " + node.output(0);
  return SourceLoc{path_, 0, 0, name};
}

std::string OnnxImporter::where(const onnx::NodeProto& node) const { return locOf(node).str() + ": " + node.op_type(); }

Status OnnxImporter::nodeError(const onnx::NodeProto& node, const std::string& message) const {
  return Status::badInput(where(node) + ": " + message);
}

bool OnnxImporter::hasInput(const onnx::NodeProto& node, int index) const {
  return index < node.input_size() && !node.input(index).empty();
}

Expected<ValueId> OnnxImporter::valueOf(const onnx::NodeProto& node, const std::string& name) {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  if (auto it = constants_.find(name); it != constants_.end()) {
    auto results = graph_.addNode(OpId::constant, {}, {{"value", it->second}}, locOf(node), {sanitizeName(name)});
    if (!results) return results.status();
    values_[name] = results->front();
    return results->front();
  }
  if (auto it = parameters_.find(name); it != parameters_.end()) {
    Initializer init;
    init.kind = "data";
    init.data = it->second;
    CLEAVE_ASSIGN_OR_RETURN(ValueId v, graph_.addParam(graph_.uniqueName(sanitizeName(name)), it->second->type, init));
    values_[name] = v;
    return v;
  }
  return nodeError(node, "input '" + name + "' is not defined before this node");
}

Expected<TensorType> OnnxImporter::typeOf(const onnx::NodeProto& node, const std::string& name) {
  if (auto it = values_.find(name); it != values_.end()) return graph_.values[it->second].type;
  if (auto it = constants_.find(name); it != constants_.end()) return it->second->type;
  if (auto it = parameters_.find(name); it != parameters_.end()) return it->second->type;
  return nodeError(node, "input '" + name + "' is not defined before this node");
}

Expected<TensorPtr> OnnxImporter::constantInput(const onnx::NodeProto& node, int index) {
  const std::string& name = node.input(index);
  if (auto it = constants_.find(name); it != constants_.end()) return it->second;
  if (auto it = parameters_.find(name); it != parameters_.end()) return it->second;
  return nodeError(node, "input " + std::to_string(index) + " ('" + name +
                             "') must be a constant (an initializer, a Constant or computable from static shapes)");
}

Expected<std::vector<int64_t>> OnnxImporter::constantInts(const onnx::NodeProto& node, int index) {
  CLEAVE_ASSIGN_OR_RETURN(TensorPtr data, constantInput(node, index));
  if (data->type.dtype != DType::kI64 && data->type.dtype != DType::kI32)
    return nodeError(node, "input " + std::to_string(index) + " must hold integers, not " + data->type.str());
  return tensorInts(*data);
}

Expected<double> OnnxImporter::constantScalar(const onnx::NodeProto& node, int index) {
  CLEAVE_ASSIGN_OR_RETURN(TensorPtr data, constantInput(node, index));
  if (data->type.numel() != 1) return nodeError(node, "input " + std::to_string(index) + " must hold one value");
  switch (data->type.dtype) {
    case DType::kF32: return static_cast<double>(data->as<float>()[0]);
    case DType::kF64: return data->as<double>()[0];
    case DType::kI64: return static_cast<double>(data->as<int64_t>()[0]);
    case DType::kI32: return static_cast<double>(data->as<int32_t>()[0]);
    case DType::kI8: return static_cast<double>(data->as<int8_t>()[0]);
    case DType::kU8:
    case DType::kBool: return static_cast<double>(data->as<uint8_t>()[0]);
    case DType::kF16:
    case DType::kBF16: break;
  }
  return nodeError(node, "input " + std::to_string(index) + " has unsupported type " + data->type.str());
}

Status OnnxImporter::emit(const onnx::NodeProto& node, OpId op, const std::vector<std::string>& inputs, AttrMap attrs,
                          int result_count) {
  return emitTo(node, op, inputs, std::move(attrs),
                std::vector<std::string>(node.output().begin(), node.output().begin() + result_count));
}

Status OnnxImporter::emitTo(const onnx::NodeProto& node, OpId op, const std::vector<std::string>& inputs, AttrMap attrs,
                            const std::vector<std::string>& outputs) {
  const int result_count = static_cast<int>(outputs.size());
  // 1. Fold when every input is a known constant and the constant evaluator handles the op.
  bool all_constant = true;
  std::vector<const TensorData*> constant_operands;
  std::vector<TensorType> operand_types;
  for (const auto& name : inputs) {
    auto it = constants_.find(name);
    if (it == constants_.end()) {
      all_constant = false;
      break;
    }
    constant_operands.push_back(it->second.get());
    operand_types.push_back(it->second->type);
  }
  if (all_constant) {
    auto types = inferResultTypes(opDef(op), operand_types, attrs);
    if (!types) return types.status().withContext(where(node) + ": ");
    bool small = std::all_of(types->begin(), types->end(),
                             [](const TensorType& type) { return checkFoldedShape(type.shape).isOk(); });
    if (small && isConstantEvaluable(op, operand_types, *types)) {
      auto results = evaluateConstantNode(op, attrs, constant_operands, *types);
      if (!results) return results.status().withContext(where(node) + ": ");
      for (int i = 0; i < result_count; ++i)
        bindConstant(outputs[i], std::make_shared<TensorData>(std::move((*results)[i])));
      return Status::ok();
    }
  }
  // 2. Otherwise add a node whose results are named after the ONNX outputs.
  std::vector<ValueId> operands;
  for (const auto& name : inputs) {
    CLEAVE_ASSIGN_OR_RETURN(ValueId v, valueOf(node, name));
    operands.push_back(v);
  }
  std::vector<std::string> names;
  for (int i = 0; i < result_count; ++i) names.push_back(sanitizeName(outputs[i]));
  auto results = graph_.addNode(op, std::move(operands), std::move(attrs), locOf(node), names);
  if (!results) return results.status();
  for (int i = 0; i < result_count; ++i) values_[outputs[i]] = (*results)[i];
  return Status::ok();
}

Expected<std::vector<ValueId>> OnnxImporter::emitValues(const onnx::NodeProto& node, OpId op,
                                                        std::vector<ValueId> operands, AttrMap attrs,
                                                        const std::string& result_hint) {
  return graph_.addNode(op, std::move(operands), std::move(attrs), locOf(node), {sanitizeName(result_hint)});
}

Status OnnxImporter::importInitializers(const onnx::GraphProto& onnx_graph) {
  for (const auto& initializer : onnx_graph.initializer()) {
    auto data = tensorFromOnnx(initializer, path_);
    if (!data) return data.status();
    // Float initializers are the model's weights; integer ones are shapes and indices.
    if (isFloat((*data)->type.dtype))
      parameters_[initializer.name()] = *data;
    else
      bindConstant(initializer.name(), *data);
  }
  return Status::ok();
}

Status OnnxImporter::importInputs(const onnx::GraphProto& onnx_graph) {
  for (const auto& entry : options_.input_values) {
    const std::string& name = entry.first;  // clang 14 cannot capture a structured binding
    bool found = std::any_of(onnx_graph.input().begin(), onnx_graph.input().end(),
                             [&](const onnx::ValueInfoProto& input) { return input.name() == name; });
    if (!found) return Status::badInput(path_ + ": a value is given for input '" + name + "', which the model lacks");
  }
  for (const auto& input : onnx_graph.input()) {
    if (parameters_.count(input.name()) || constants_.count(input.name())) continue;  // an initializer
    const auto& tensor_type = input.type().tensor_type();
    auto dtype = dtypeFromOnnx(tensor_type.elem_type());
    if (!dtype)
      return Status::badInput(path_ + ": input '" + input.name() + "' has ONNX element type " +
                              std::to_string(tensor_type.elem_type()) + ", which cleave does not support");
    if (auto fixed = options_.input_values.find(input.name()); fixed != options_.input_values.end()) {
      if (fixed->second.type.dtype != *dtype)
        return Status::badInput(path_ + ": input '" + input.name() + "' is " + std::string(dtypeName(*dtype)) +
                                "; the value given for it is " + fixed->second.type.str());
      bindConstant(input.name(), std::make_shared<TensorData>(fixed->second));
      continue;
    }
    if (!tensor_type.has_shape())
      return Status::badInput(path_ + ": input '" + input.name() + "' has no shape; cleave needs static shapes");
    TensorType type{*dtype, {}};
    for (int i = 0; i < tensor_type.shape().dim_size(); ++i) {
      const auto& dim = tensor_type.shape().dim(i);
      if (dim.has_dim_value()) {
        type.shape.push_back(dim.dim_value());
      } else if (i == 0) {
        type.shape.push_back(options_.batch > 0 ? options_.batch : 1);  // the symbolic batch dim
      } else {
        return Status::badInput(path_ + ": input '" + input.name() + "' has symbolic dim " + std::to_string(i) +
                                " ('" + dim.dim_param() + "'); only dim 0 (the batch) may be symbolic");
      }
    }
    CLEAVE_ASSIGN_OR_RETURN(ValueId v, graph_.addInput(sanitizeName(input.name()), type));
    values_[input.name()] = v;
  }
  return Status::ok();
}

Status OnnxImporter::importOutputs(const onnx::GraphProto& onnx_graph) {
  for (const auto& output : onnx_graph.output()) {
    onnx::NodeProto producer;  // outputs have no node; diagnostics name the output instead
    producer.set_name("output " + output.name());
    producer.set_op_type("output");
    producer.add_output(output.name());
    CLEAVE_ASSIGN_OR_RETURN(ValueId v, valueOf(producer, output.name()));
    // An output that is also an input or parameter, or already an output, goes through an identity.
    bool needs_identity = graph_.values[v].producer < 0 ||
                          std::find(graph_.outputs.begin(), graph_.outputs.end(), v) != graph_.outputs.end();
    if (needs_identity) {
      CLEAVE_ASSIGN_OR_RETURN(auto results, emitValues(producer, OpId::identity, {v}, {}, output.name()));
      v = results.front();
    }
    graph_.outputs.push_back(v);
  }
  return Status::ok();
}

Status OnnxImporter::importComposite(const onnx::NodeProto& node) {
  const std::string& type = node.op_type();
  auto fail = [&](const std::string& message) { return nodeError(node, message); };
  int step = 0;
  auto nextName = [&]() { return node.output(0) + "/" + std::to_string(step++); };
  // Adds `op` as an intermediate step and returns its result's name; finish() writes the node's output.
  auto apply = [&](OpId op, const std::vector<std::string>& inputs, AttrMap attrs = {}) -> Expected<std::string> {
    std::string name = nextName();
    CLEAVE_TRY(emitTo(node, op, inputs, std::move(attrs), {name}));
    return name;
  };
  auto finish = [&](OpId op, const std::vector<std::string>& inputs, AttrMap attrs = {}) {
    return emitTo(node, op, inputs, std::move(attrs), {node.output(0)});
  };
  // A constant of `dtype` and `shape` filled with `value`.
  auto filled = [&](double value, DType dtype, const Shape& shape = {}) -> Expected<std::string> {
    CLEAVE_TRY(checkFoldedShape(shape).withContext(where(node) + ": "));
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    auto data = numbersTensor(std::vector<double>(static_cast<size_t>(count), value), dtype, shape);
    if (!data) return data.status().withContext(where(node) + ": ");
    std::string name = nextName();
    bindConstant(name, *data);
    return name;
  };
  CLEAVE_ASSIGN_OR_RETURN(TensorType x_type, typeOf(node, node.input(0)));
  const std::string x = node.input(0);
  const DType dtype = x_type.dtype;
  const int64_t rank = x_type.rank();
  // where(x < 0, negative, x): the shape of LeakyRelu, PRelu, Elu, Celu and Abs.
  auto negativeElse = [&](const std::string& negative) -> Status {
    CLEAVE_ASSIGN_OR_RETURN(std::string zero, filled(0, dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string is_negative, apply(OpId::less, {x, zero}));
    return finish(OpId::where, {is_negative, negative, x});
  };
  auto absolute = [&]() -> Expected<std::string> {
    CLEAVE_ASSIGN_OR_RETURN(std::string zero, filled(0, dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string is_negative, apply(OpId::less, {x, zero}));
    CLEAVE_ASSIGN_OR_RETURN(std::string negated, apply(OpId::neg, {x}));
    return apply(OpId::where, {is_negative, negated, x});
  };
  // alpha * (exp(x / divisor) - 1), the negative side of Elu, Selu and Celu.
  auto expm1Scaled = [&](double alpha, double divisor) -> Expected<std::string> {
    std::string scaled_in = x;
    if (divisor != 1) {
      CLEAVE_ASSIGN_OR_RETURN(std::string d, filled(divisor, dtype));
      CLEAVE_ASSIGN_OR_RETURN(scaled_in, apply(OpId::div, {x, d}));
    }
    CLEAVE_ASSIGN_OR_RETURN(std::string e, apply(OpId::exp, {scaled_in}));
    CLEAVE_ASSIGN_OR_RETURN(std::string one, filled(1, dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string em1, apply(OpId::sub, {e, one}));
    CLEAVE_ASSIGN_OR_RETURN(std::string a, filled(alpha, dtype));
    return apply(OpId::mul, {em1, a});
  };
  std::vector<int64_t> spatial_axes;
  for (int64_t d = 2; d < rank; ++d) spatial_axes.push_back(d);

  // 1. Elementwise.
  if (type == "Abs") {
    CLEAVE_ASSIGN_OR_RETURN(std::string result, absolute());
    return finish(OpId::identity, {result});
  }
  if (type == "Reciprocal") {
    CLEAVE_ASSIGN_OR_RETURN(std::string one, filled(1, dtype));
    return finish(OpId::div, {one, x});
  }
  if (type == "Sign") {
    CLEAVE_ASSIGN_OR_RETURN(std::string zero, filled(0, dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string one, filled(1, dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string minus_one, filled(-1, dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string positive, apply(OpId::greater, {x, zero}));
    CLEAVE_ASSIGN_OR_RETURN(std::string negative, apply(OpId::less, {x, zero}));
    CLEAVE_ASSIGN_OR_RETURN(std::string non_positive, apply(OpId::where, {negative, minus_one, zero}));
    return finish(OpId::where, {positive, one, non_positive});
  }
  if (type == "Max" || type == "Min" || type == "Sum" || type == "Mean") {
    std::string result = x;
    for (int i = 1; i < node.input_size(); ++i) {
      if (type == "Max" || type == "Min") {
        CLEAVE_ASSIGN_OR_RETURN(std::string keep, apply(type == "Max" ? OpId::greater_equal : OpId::less_equal,
                                                        {result, node.input(i)}));
        CLEAVE_ASSIGN_OR_RETURN(result, apply(OpId::where, {keep, result, node.input(i)}));
      } else {
        CLEAVE_ASSIGN_OR_RETURN(result, apply(OpId::add, {result, node.input(i)}));
      }
    }
    if (type != "Mean") return finish(OpId::identity, {result});
    CLEAVE_ASSIGN_OR_RETURN(std::string count, filled(node.input_size(), dtype));
    return finish(OpId::div, {result, count});
  }
  if (type == "And" || type == "Or" || type == "Xor") {
    CLEAVE_ASSIGN_OR_RETURN(std::string flag, filled(type == "Or" ? 1 : 0, DType::kBool));
    if (type == "And") return finish(OpId::where, {x, node.input(1), flag});
    if (type == "Or") return finish(OpId::where, {x, flag, node.input(1)});
    CLEAVE_ASSIGN_OR_RETURN(std::string same, apply(OpId::equal, {x, node.input(1)}));
    return finish(OpId::equal, {same, flag});
  }
  if (type == "IsNaN") {
    CLEAVE_ASSIGN_OR_RETURN(std::string no, filled(0, DType::kBool));
    CLEAVE_ASSIGN_OR_RETURN(std::string self_equal, apply(OpId::equal, {x, x}));
    return finish(OpId::equal, {self_equal, no});
  }
  if (type == "IsInf") {
    bool positive = intAttr(node, "detect_positive", 1) != 0, negative = intAttr(node, "detect_negative", 1) != 0;
    CLEAVE_ASSIGN_OR_RETURN(std::string plus_inf, filled(INFINITY, dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string minus_inf, filled(-INFINITY, dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string is_plus, apply(OpId::equal, {x, plus_inf}));
    CLEAVE_ASSIGN_OR_RETURN(std::string is_minus, apply(OpId::equal, {x, minus_inf}));
    CLEAVE_ASSIGN_OR_RETURN(std::string yes, filled(1, DType::kBool));
    CLEAVE_ASSIGN_OR_RETURN(std::string no, filled(0, DType::kBool));
    if (positive && negative) return finish(OpId::where, {is_plus, yes, is_minus});
    return finish(OpId::where, {positive ? is_plus : is_minus, yes, no});
  }
  if (type == "CastLike") {
    CLEAVE_ASSIGN_OR_RETURN(TensorType like, typeOf(node, node.input(1)));
    return finish(OpId::cast, {x}, {{"to", std::string(dtypeName(like.dtype))}});
  }
  if (type == "LeakyRelu" || type == "PRelu") {
    std::string slope = type == "PRelu" ? node.input(1) : "";
    if (type == "LeakyRelu") {
      CLEAVE_ASSIGN_OR_RETURN(slope, filled(floatAttr(node, "alpha", 0.01), dtype));
    }
    CLEAVE_ASSIGN_OR_RETURN(std::string scaled, apply(OpId::mul, {x, slope}));
    return negativeElse(scaled);
  }
  if (type == "Elu" || type == "Celu") {
    double alpha = floatAttr(node, "alpha", 1.0);
    CLEAVE_ASSIGN_OR_RETURN(std::string negative, expm1Scaled(alpha, type == "Celu" ? alpha : 1.0));
    return negativeElse(negative);
  }
  if (type == "Selu") {
    CLEAVE_ASSIGN_OR_RETURN(std::string negative, expm1Scaled(floatAttr(node, "alpha", 1.67326319217681884765625), 1.0));
    CLEAVE_ASSIGN_OR_RETURN(std::string zero, filled(0, dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string positive, apply(OpId::greater, {x, zero}));
    CLEAVE_ASSIGN_OR_RETURN(std::string unscaled, apply(OpId::where, {positive, x, negative}));
    CLEAVE_ASSIGN_OR_RETURN(std::string gamma, filled(floatAttr(node, "gamma", 1.05070102214813232421875), dtype));
    return finish(OpId::mul, {unscaled, gamma});
  }
  if (type == "ThresholdedRelu") {
    CLEAVE_ASSIGN_OR_RETURN(std::string alpha, filled(floatAttr(node, "alpha", 1.0), dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string zero, filled(0, dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string above, apply(OpId::greater, {x, alpha}));
    return finish(OpId::where, {above, x, zero});
  }
  if (type == "HardSigmoid" || type == "HardSwish") {
    // clip(alpha * x + beta, 0, 1); HardSwish multiplies it by x, with alpha 1/6 and beta 1/2.
    bool swish = type == "HardSwish";
    CLEAVE_ASSIGN_OR_RETURN(std::string alpha, filled(swish ? 1.0 / 6 : floatAttr(node, "alpha", 0.2), dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string beta, filled(swish ? 0.5 : floatAttr(node, "beta", 0.5), dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string scaled, apply(OpId::mul, {x, alpha}));
    CLEAVE_ASSIGN_OR_RETURN(std::string shifted, apply(OpId::add, {scaled, beta}));
    AttrMap unit{{"min", 0.0}, {"max", 1.0}};
    if (!swish) return finish(OpId::clip, {shifted}, unit);
    CLEAVE_ASSIGN_OR_RETURN(std::string gate, apply(OpId::clip, {shifted}, unit));
    return finish(OpId::mul, {x, gate});
  }
  if (type == "Softplus") {
    CLEAVE_ASSIGN_OR_RETURN(std::string e, apply(OpId::exp, {x}));
    CLEAVE_ASSIGN_OR_RETURN(std::string one, filled(1, dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string sum, apply(OpId::add, {e, one}));
    return finish(OpId::log, {sum});
  }
  if (type == "Softsign") {
    CLEAVE_ASSIGN_OR_RETURN(std::string magnitude, absolute());
    CLEAVE_ASSIGN_OR_RETURN(std::string one, filled(1, dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string denominator, apply(OpId::add, {magnitude, one}));
    return finish(OpId::div, {x, denominator});
  }
  if (type == "Shrink") {
    double lambd = floatAttr(node, "lambd", 0.5), bias_value = floatAttr(node, "bias", 0.0);
    CLEAVE_ASSIGN_OR_RETURN(std::string low, filled(-lambd, dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string high, filled(lambd, dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string bias, filled(bias_value, dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string zero, filled(0, dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string below, apply(OpId::less, {x, low}));
    CLEAVE_ASSIGN_OR_RETURN(std::string above, apply(OpId::greater, {x, high}));
    CLEAVE_ASSIGN_OR_RETURN(std::string raised, apply(OpId::add, {x, bias}));
    CLEAVE_ASSIGN_OR_RETURN(std::string lowered, apply(OpId::sub, {x, bias}));
    CLEAVE_ASSIGN_OR_RETURN(std::string upper, apply(OpId::where, {above, lowered, zero}));
    return finish(OpId::where, {below, raised, upper});
  }

  // 2. Values computed from static shapes alone.
  if (type == "Size") {
    bindConstant(node.output(0), intsTensor({x_type.numel()}, /*scalar=*/true));
    return Status::ok();
  }
  if (type == "EyeLike") {
    if (rank != 2) return fail("the input must be 2-D, not " + x_type.str());
    DType eye_dtype = dtype;
    if (const auto* to = findAttr(node, "dtype")) {
      auto converted = dtypeFromOnnx(static_cast<int32_t>(to->i()));
      if (!converted) return fail("dtype " + std::to_string(to->i()) + " is not supported");
      eye_dtype = *converted;
    }
    int64_t k = intAttr(node, "k", 0);
    CLEAVE_TRY(checkFoldedShape(x_type.shape).withContext(where(node) + ": "));
    std::vector<double> values(static_cast<size_t>(x_type.numel()), 0.0);
    for (int64_t i = 0; i < x_type.shape[0]; ++i)
      if (i + k >= 0 && i + k < x_type.shape[1]) values[static_cast<size_t>(i * x_type.shape[1] + i + k)] = 1;
    auto eye = numbersTensor(values, eye_dtype, x_type.shape);
    if (!eye) return eye.status().withContext(where(node) + ": ");
    bindConstant(node.output(0), *eye);
    return Status::ok();
  }

  // 3. Reductions and normalisations.
  if (type.starts_with("Reduce")) {
    AttrMap reduce{{"keepdims", intAttr(node, "keepdims", 1)}};
    if (auto axes = intsAttr(node, "axes")) reduce["axes"] = *axes;
    if (type == "ReduceMin") {
      CLEAVE_ASSIGN_OR_RETURN(std::string negated, apply(OpId::neg, {x}));
      CLEAVE_ASSIGN_OR_RETURN(std::string largest, apply(OpId::reduce_max, {negated}, reduce));
      return finish(OpId::neg, {largest});
    }
    if (type == "ReduceL1") {
      CLEAVE_ASSIGN_OR_RETURN(std::string magnitude, absolute());
      return finish(OpId::reduce_sum, {magnitude}, reduce);
    }
    if (type == "ReduceL2" || type == "ReduceSumSquare") {
      CLEAVE_ASSIGN_OR_RETURN(std::string squared, apply(OpId::mul, {x, x}));
      if (type == "ReduceSumSquare") return finish(OpId::reduce_sum, {squared}, reduce);
      CLEAVE_ASSIGN_OR_RETURN(std::string sum, apply(OpId::reduce_sum, {squared}, reduce));
      return finish(OpId::sqrt, {sum});
    }
    if (type == "ReduceLogSum") {
      CLEAVE_ASSIGN_OR_RETURN(std::string sum, apply(OpId::reduce_sum, {x}, reduce));
      return finish(OpId::log, {sum});
    }
    // ReduceLogSumExp, shifted by the maximum: log(sum(exp(x - max))) + max.
    AttrMap kept = reduce;
    kept["keepdims"] = int64_t{1};
    CLEAVE_ASSIGN_OR_RETURN(std::string kept_max, apply(OpId::reduce_max, {x}, kept));
    CLEAVE_ASSIGN_OR_RETURN(std::string shifted, apply(OpId::sub, {x, kept_max}));
    CLEAVE_ASSIGN_OR_RETURN(std::string e, apply(OpId::exp, {shifted}));
    CLEAVE_ASSIGN_OR_RETURN(std::string sum, apply(OpId::reduce_sum, {e}, reduce));
    CLEAVE_ASSIGN_OR_RETURN(std::string log_sum, apply(OpId::log, {sum}));
    CLEAVE_ASSIGN_OR_RETURN(std::string max, apply(OpId::reduce_max, {x}, reduce));
    return finish(OpId::add, {log_sum, max});
  }
  if (type == "GlobalMaxPool") {
    return finish(OpId::reduce_max, {x}, {{"axes", spatial_axes}, {"keepdims", int64_t{1}}});
  }
  if (type == "InstanceNormalization" || type == "MeanVarianceNormalization") {
    // (x - mean) / sqrt(var + epsilon) over the spatial axes, then a per-channel scale and bias;
    // MeanVarianceNormalization: (x - mean) / (sqrt(var) + 1e-9) over its axes (default 0, 2, 3).
    bool instance = type == "InstanceNormalization";
    std::vector<int64_t> axes = instance ? spatial_axes : intsAttr(node, "axes").value_or(std::vector<int64_t>{0, 2, 3});
    AttrMap reduce{{"axes", axes}, {"keepdims", int64_t{1}}};
    CLEAVE_ASSIGN_OR_RETURN(std::string mean, apply(OpId::reduce_mean, {x}, reduce));
    CLEAVE_ASSIGN_OR_RETURN(std::string centered, apply(OpId::sub, {x, mean}));
    CLEAVE_ASSIGN_OR_RETURN(std::string squared, apply(OpId::mul, {centered, centered}));
    CLEAVE_ASSIGN_OR_RETURN(std::string variance, apply(OpId::reduce_mean, {squared}, reduce));
    if (!instance) {
      CLEAVE_ASSIGN_OR_RETURN(std::string deviation, apply(OpId::sqrt, {variance}));
      CLEAVE_ASSIGN_OR_RETURN(std::string tiny, filled(1e-9, dtype));
      CLEAVE_ASSIGN_OR_RETURN(std::string denominator, apply(OpId::add, {deviation, tiny}));
      return finish(OpId::div, {centered, denominator});
    }
    CLEAVE_ASSIGN_OR_RETURN(std::string epsilon, filled(floatAttr(node, "epsilon", 1e-5), dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string shifted, apply(OpId::add, {variance, epsilon}));
    CLEAVE_ASSIGN_OR_RETURN(std::string deviation, apply(OpId::sqrt, {shifted}));
    CLEAVE_ASSIGN_OR_RETURN(std::string normalized, apply(OpId::div, {centered, deviation}));
    std::string scale = node.input(1), bias = node.input(2);
    if (rank > 2) {  // [C] -> [C, 1, ...] to broadcast over the spatial dims
      std::vector<int64_t> trailing;
      for (int64_t d = 1; d < rank - 1; ++d) trailing.push_back(d);
      CLEAVE_ASSIGN_OR_RETURN(scale, apply(OpId::unsqueeze, {scale}, {{"axes", trailing}}));
      CLEAVE_ASSIGN_OR_RETURN(bias, apply(OpId::unsqueeze, {bias}, {{"axes", trailing}}));
    }
    CLEAVE_ASSIGN_OR_RETURN(std::string scaled, apply(OpId::mul, {normalized, scale}));
    return finish(OpId::add, {scaled, bias});
  }

  // 4. Data movement on static shapes.
  if (type == "DepthToSpace" || type == "SpaceToDepth") {
    if (rank != 4) return fail("the input must be 4-D, not " + x_type.str());
    int64_t block = intAttr(node, "blocksize", 0);
    if (block < 1) return fail("blocksize must be at least 1");
    const int64_t n = x_type.shape[0], c = x_type.shape[1], h = x_type.shape[2], w = x_type.shape[3];
    std::vector<int64_t> split_shape, perm, result_shape;
    if (type == "SpaceToDepth") {
      if (h % block || w % block) return fail("H and W of " + x_type.str() + " must be multiples of " + std::to_string(block));
      split_shape = {n, c, h / block, block, w / block, block};
      perm = {0, 3, 5, 1, 2, 4};
      result_shape = {n, c * block * block, h / block, w / block};
    } else {
      if (c % (block * block)) return fail("C of " + x_type.str() + " must be a multiple of " + std::to_string(block * block));
      bool crd = stringAttr(node, "mode", "DCR") == "CRD";
      split_shape = crd ? std::vector<int64_t>{n, c / (block * block), block, block, h, w}
                        : std::vector<int64_t>{n, block, block, c / (block * block), h, w};
      perm = crd ? std::vector<int64_t>{0, 1, 4, 2, 5, 3} : std::vector<int64_t>{0, 3, 4, 1, 5, 2};
      result_shape = {n, c / (block * block), h * block, w * block};
    }
    CLEAVE_ASSIGN_OR_RETURN(std::string split, apply(OpId::reshape, {x}, {{"shape", split_shape}}));
    CLEAVE_ASSIGN_OR_RETURN(std::string moved, apply(OpId::transpose, {split}, {{"perm", perm}}));
    return finish(OpId::reshape, {moved}, {{"shape", result_shape}});
  }
  if (type == "Tile") {
    CLEAVE_ASSIGN_OR_RETURN(auto repeats, constantInts(node, 1));
    if (static_cast<int64_t>(repeats.size()) != rank) return fail("repeats must have one value per dim of " + x_type.str());
    std::string result = x;
    for (int64_t axis = 0; axis < rank; ++axis) {
      if (repeats[axis] == 1) continue;
      if (repeats[axis] == 0) {
        CLEAVE_ASSIGN_OR_RETURN(result, apply(OpId::slice, {result}, {{"starts", std::vector<int64_t>{0}},
                                                                       {"ends", std::vector<int64_t>{0}},
                                                                       {"axes", std::vector<int64_t>{axis}}}));
        continue;
      }
      if (repeats[axis] < 0) return fail("repeats must be non-negative");
      CLEAVE_ASSIGN_OR_RETURN(result, apply(OpId::concat, std::vector<std::string>(repeats[axis], result), {{"axis", axis}}));
    }
    return finish(OpId::identity, {result});
  }
  if (type == "Pad") {
    // Per axis: crop negative pads with a slice, then concat the padding on each side: a constant
    // block, the edge row expanded, or the rows mirrored by a reversed slice.
    std::string mode = stringAttr(node, "mode", "constant");
    if (mode != "constant" && mode != "edge" && mode != "reflect") return fail("mode '" + mode + "' is not known");
    CLEAVE_ASSIGN_OR_RETURN(auto pads, constantInts(node, 1));
    if (static_cast<int64_t>(pads.size()) != 2 * rank) return fail("pads must have 2 values per dim of " + x_type.str());
    constexpr int64_t kPadLimit = int64_t{1} << 62;  // keeps the sums below from overflowing
    for (int64_t pad : pads)
      if (pad < -kPadLimit || pad > kPadLimit) return fail("pad " + std::to_string(pad) + " is out of range");
    double value = 0;
    if (hasInput(node, 2)) {
      CLEAVE_ASSIGN_OR_RETURN(value, constantScalar(node, 2));
    }
    Shape shape = x_type.shape;
    std::string result = x;
    auto sliceAxis = [&](const std::string& input, int64_t axis, int64_t start, int64_t end, int64_t stride) {
      return apply(OpId::slice, {input}, {{"starts", std::vector<int64_t>{start}}, {"ends", std::vector<int64_t>{end}},
                                          {"axes", std::vector<int64_t>{axis}}, {"steps", std::vector<int64_t>{stride}}});
    };
    for (int64_t axis = 0; axis < rank; ++axis) {
      int64_t before = pads[axis], after = pads[axis + rank], dim = shape[axis];
      if (before < 0 || after < 0) {
        int64_t start = std::max<int64_t>(0, -before), end = dim - std::max<int64_t>(0, -after);
        if (end < start) return fail("pads crop more than dim " + std::to_string(axis) + " of " + x_type.str() + " holds");
        CLEAVE_ASSIGN_OR_RETURN(result, sliceAxis(result, axis, start, end, 1));
        dim = shape[axis] = end - start;
        before = std::max<int64_t>(before, 0);
        after = std::max<int64_t>(after, 0);
      }
      if (before == 0 && after == 0) continue;
      if (mode != "constant" && dim == 0) return fail("mode '" + mode + "' cannot pad an empty dim");
      if (mode == "reflect" && (before >= dim || after >= dim))
        return fail("reflect pads must be smaller than dim " + std::to_string(axis) + " (" + std::to_string(dim) + ")");
      std::vector<std::string> parts;
      for (int side = 0; side < 2; ++side) {
        int64_t count = side == 0 ? before : after;
        if (count == 0) continue;
        Shape block_shape = shape;
        block_shape[axis] = count;
        std::string part;
        if (mode == "constant") {
          CLEAVE_ASSIGN_OR_RETURN(part, filled(value, dtype, block_shape));
        } else if (mode == "edge") {
          CLEAVE_ASSIGN_OR_RETURN(std::string edge, side == 0 ? sliceAxis(result, axis, 0, 1, 1)
                                                                : sliceAxis(result, axis, dim - 1, dim, 1));
          CLEAVE_ASSIGN_OR_RETURN(part, apply(OpId::expand, {edge}, {{"shape", block_shape}}));
        } else {  // reflect: rows before..1 in front, rows dim-2..dim-1-after behind (reversed slices)
          int64_t end = dim - 2 - count;
          CLEAVE_ASSIGN_OR_RETURN(part, side == 0 ? sliceAxis(result, axis, count, 0, -1)
                                                  : sliceAxis(result, axis, dim - 2, end < 0 ? -dim - 1 : end, -1));
        }
        parts.push_back(part);
        if (side == 0) parts.push_back(result);
      }
      if (before == 0) parts.insert(parts.begin(), result);
      CLEAVE_ASSIGN_OR_RETURN(result, apply(OpId::concat, parts, {{"axis", axis}}));
      shape[axis] += before + after;
    }
    return finish(OpId::identity, {result});
  }
  if (type == "ConvTranspose") {
    // The transpose of a convolution is its input gradient: conv2d_grad_input with x as dy and the
    // output shape from ONNX's rule, padding resolved as for Conv (or from output_shape).
    CLEAVE_ASSIGN_OR_RETURN(TensorType weight, typeOf(node, node.input(1)));
    if (rank != 4 || weight.rank() != 4) return fail("only 2-D transposed convolutions are supported");
    int64_t groups = intAttr(node, "group", 1);
    auto pairAttr = [&](const char* name, int64_t fallback) {
      return intsAttr(node, name).value_or(std::vector<int64_t>{fallback, fallback});
    };
    std::vector<int64_t> strides = pairAttr("strides", 1), dilations = pairAttr("dilations", 1);
    std::vector<int64_t> output_padding = pairAttr("output_padding", 0);
    std::vector<int64_t> pads = intsAttr(node, "pads").value_or(std::vector<int64_t>{0, 0, 0, 0});
    auto output_shape = intsAttr(node, "output_shape");
    std::string auto_pad = stringAttr(node, "auto_pad", "NOTSET");
    if (strides.size() != 2 || dilations.size() != 2 || output_padding.size() != 2 || pads.size() != 4)
      return fail("strides, dilations and output_padding need 2 values, pads 4");
    std::vector<int64_t> out(2);
    for (int i = 0; i < 2; ++i) {
      int64_t in = x_type.shape[2 + i], extent = (weight.shape[2 + i] - 1) * dilations[i] + 1;
      int64_t full = strides[i] * (in - 1) + output_padding[i] + extent;
      bool resolve = output_shape || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
      if (resolve) {
        int64_t target = output_shape ? (*output_shape)[output_shape->size() - 2 + i] : in * strides[i];
        // A target beyond the full extent adds rows at the end that no window reaches (as output_padding).
        int64_t total = std::max<int64_t>(full - target, 0);
        bool upper = auto_pad == "SAME_UPPER";
        pads[i] = upper ? total / 2 : total - total / 2;
        pads[2 + i] = total - pads[i];
        full = std::max(full, target);
      } else if (auto_pad == "VALID") {
        pads[i] = pads[2 + i] = 0;
      }
      out[i] = full - pads[i] - pads[2 + i];
    }
    AttrMap attrs{{"input_shape", std::vector<int64_t>{x_type.shape[0], weight.shape[1] * groups, out[0], out[1]}},
                  {"strides", strides}, {"pads", pads}, {"dilations", dilations}, {"groups", groups}};
    if (!hasInput(node, 2)) return finish(OpId::conv2d_grad_input, {x, node.input(1)}, attrs);
    CLEAVE_ASSIGN_OR_RETURN(std::string convolved, apply(OpId::conv2d_grad_input, {x, node.input(1)}, attrs));
    CLEAVE_ASSIGN_OR_RETURN(std::string bias, apply(OpId::unsqueeze, {node.input(2)}, {{"axes", std::vector<int64_t>{1, 2}}}));
    return finish(OpId::add, {convolved, bias});
  }
  return fail("op type is not supported");
}

Status OnnxImporter::layerNormStatistics(const onnx::NodeProto& node, int64_t axis, double epsilon) {
  CLEAVE_ASSIGN_OR_RETURN(TensorType x_type, typeOf(node, node.input(0)));
  int64_t first = normalizeAxis(axis, x_type.rank());
  if (first < 0) return nodeError(node, "axis " + std::to_string(axis) + " is out of range for " + x_type.str());
  std::vector<int64_t> axes;
  for (int64_t d = first; d < x_type.rank(); ++d) axes.push_back(d);
  AttrMap reduce{{"axes", axes}, {"keepdims", int64_t{1}}};
  // mean = reduce_mean(x); var = reduce_mean((x - mean)^2); inv_std = 1 / sqrt(var + epsilon). The
  // steps are named <Y>/<step>; Mean and InvStdDev keep their ONNX names (or steps, when unused).
  const std::string& x = node.input(0);
  const std::string step = node.output(0) + "/";
  auto output = [&](int index, const std::string& fallback) {
    return node.output_size() > index && !node.output(index).empty() ? node.output(index) : step + fallback;
  };
  const std::string mean = output(1, "mean"), inv_std = output(2, "inv_std");
  auto epsilon_data = numbersTensor({epsilon}, x_type.dtype, {});
  auto one_data = numbersTensor({1.0}, x_type.dtype, {});
  if (!epsilon_data || !one_data) return nodeError(node, "no scalar constants of " + x_type.str());
  bindConstant(step + "epsilon", *epsilon_data);
  bindConstant(step + "one", *one_data);
  CLEAVE_TRY(emitTo(node, OpId::reduce_mean, {x}, reduce, {mean}));
  CLEAVE_TRY(emitTo(node, OpId::sub, {x, mean}, {}, {step + "centered"}));
  CLEAVE_TRY(emitTo(node, OpId::mul, {step + "centered", step + "centered"}, {}, {step + "squared"}));
  CLEAVE_TRY(emitTo(node, OpId::reduce_mean, {step + "squared"}, reduce, {step + "variance"}));
  CLEAVE_TRY(emitTo(node, OpId::add, {step + "variance", step + "epsilon"}, {}, {step + "shifted"}));
  CLEAVE_TRY(emitTo(node, OpId::sqrt, {step + "shifted"}, {}, {step + "std"}));
  return emitTo(node, OpId::div, {step + "one", step + "std"}, {}, {inv_std});
}

// Attributes shared by Conv, MaxPool and AveragePool over a 2-D window `kernel` (dilated by
// `dilations`) on input `x`: strides (ONNX's default is 1, also for pooling) and pads, explicit or
// resolved from auto_pad (SAME_UPPER / SAME_LOWER put the odd pad at the end / the beginning).
Status windowAttrs(const onnx::NodeProto& node, const TensorType& x, const std::vector<int64_t>& kernel,
                   const std::vector<int64_t>& dilations, AttrMap& attrs,
                   const std::function<Status(std::string)>& fail) {
  std::vector<int64_t> strides = intsAttr(node, "strides").value_or(std::vector<int64_t>{1, 1});
  if (strides.size() != 2) return fail("strides must have 2 values");
  attrs["strides"] = strides;
  std::string auto_pad = stringAttr(node, "auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    if (auto pads = intsAttr(node, "pads")) attrs["pads"] = *pads;
    return Status::ok();
  }
  if (auto_pad == "VALID") return Status::ok();
  if (auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") return fail("auto_pad '" + auto_pad + "' is not known");
  if (x.rank() != 4) return fail("auto_pad needs a rank-4 input, not " + x.str());
  std::vector<int64_t> pads(4, 0);
  for (int i = 0; i < 2; ++i) {
    int64_t in = x.shape[2 + i], out = (in + strides[i] - 1) / strides[i];
    int64_t total = std::max<int64_t>(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in);
    int64_t smaller = total / 2;
    pads[i] = auto_pad == "SAME_UPPER" ? smaller : total - smaller;
    pads[2 + i] = total - pads[i];
  }
  attrs["pads"] = pads;
  return Status::ok();
}

Status OnnxImporter::importNode(const onnx::NodeProto& node) {
  const std::string& type = node.op_type();
  auto fail = [&](const std::string& message) { return nodeError(node, message); };
  static const std::map<std::string, OpId> kSimple = {
      {"MatMul", OpId::matmul}, {"Add", OpId::add}, {"Sub", OpId::sub}, {"Mul", OpId::mul}, {"Div", OpId::div},
      {"Pow", OpId::pow}, {"Sqrt", OpId::sqrt}, {"Exp", OpId::exp}, {"Log", OpId::log}, {"Neg", OpId::neg},
      {"Erf", OpId::erf}, {"Tanh", OpId::tanh}, {"Sigmoid", OpId::sigmoid}, {"Relu", OpId::relu},
      {"Where", OpId::where}, {"Equal", OpId::equal}, {"Less", OpId::less}, {"LessOrEqual", OpId::less_equal},
      {"Greater", OpId::greater}, {"GreaterOrEqual", OpId::greater_equal}, {"Identity", OpId::identity},
      {"GlobalAveragePool", OpId::global_avg_pool}};
  if (compositeOpTypes().count(type)) return importComposite(node);
  if (type == "Identity" && parameters_.count(node.input(0))) {
    // PyTorch's exporter merges initializers of equal value (LayerNorm's ones in every layer) into
    // one and gives each other name an Identity of it: each such name is a parameter of its own,
    // as it was before the export, so that training updates them apart.
    parameters_[node.output(0)] = parameters_[node.input(0)];
    return Status::ok();
  }
  if (auto it = kSimple.find(type); it != kSimple.end()) {
    std::vector<std::string> inputs(node.input().begin(), node.input().end());
    // Pow's exponent may have another dtype in ONNX; it is converted to the base's (folded when constant).
    if (type == "Pow") {
      CLEAVE_ASSIGN_OR_RETURN(TensorType base, typeOf(node, inputs[0]));
      CLEAVE_ASSIGN_OR_RETURN(TensorType exponent, typeOf(node, inputs[1]));
      if (exponent.dtype != base.dtype) {
        std::string converted = node.output(0) + "/exponent";
        CLEAVE_TRY(emitTo(node, OpId::cast, {inputs[1]}, {{"to", std::string(dtypeName(base.dtype))}}, {converted}));
        inputs[1] = converted;
      }
    }
    return emit(node, it->second, inputs, {});
  }
  if (type == "Gemm") {
    AttrMap attrs{{"alpha", floatAttr(node, "alpha", 1.0)}, {"beta", floatAttr(node, "beta", 1.0)},
                  {"transpose_a", intAttr(node, "transA", 0)}, {"transpose_b", intAttr(node, "transB", 0)}};
    std::vector<std::string> inputs = {node.input(0), node.input(1)};
    if (hasInput(node, 2)) inputs.push_back(node.input(2));
    return emit(node, OpId::gemm, inputs, attrs);
  }
  if (type == "Clip") {
    AttrMap attrs;
    if (opset_ < 11) return fail("Clip before opset 11 is not supported");
    if (hasInput(node, 1)) {
      CLEAVE_ASSIGN_OR_RETURN(attrs["min"], constantScalar(node, 1));
    }
    if (hasInput(node, 2)) {
      CLEAVE_ASSIGN_OR_RETURN(attrs["max"], constantScalar(node, 2));
    }
    return emit(node, OpId::clip, {node.input(0)}, attrs);
  }
  if (type == "Conv") {
    CLEAVE_ASSIGN_OR_RETURN(TensorType weight, typeOf(node, node.input(1)));
    if (weight.rank() != 4) return fail("only 2-D convolutions are supported (weight is " + weight.str() + ")");
    CLEAVE_ASSIGN_OR_RETURN(TensorType x, typeOf(node, node.input(0)));
    std::vector<int64_t> dilations = intsAttr(node, "dilations").value_or(std::vector<int64_t>{1, 1});
    if (dilations.size() != 2) return fail("dilations must have 2 values");
    AttrMap attrs{{"groups", intAttr(node, "group", 1)}, {"dilations", dilations}};
    CLEAVE_TRY(windowAttrs(node, x, {weight.shape[2], weight.shape[3]}, dilations, attrs, fail));
    std::vector<std::string> inputs = {node.input(0), node.input(1)};
    if (hasInput(node, 2)) inputs.push_back(node.input(2));
    return emit(node, OpId::conv2d, inputs, attrs);
  }
  if (type == "MaxPool" || type == "AveragePool") {
    if (node.output_size() > 1 && !node.output(1).empty()) return fail("the Indices output is not supported");
    auto kernel = intsAttr(node, "kernel_shape");
    if (!kernel || kernel->size() != 2) return fail("only 2-D pooling is supported");
    if (auto dilations = intsAttr(node, "dilations"))
      for (int64_t d : *dilations)
        if (d != 1) return fail("pooling dilations other than 1 are not supported");
    CLEAVE_ASSIGN_OR_RETURN(TensorType x, typeOf(node, node.input(0)));
    AttrMap attrs{{"kernel", *kernel}, {"ceil_mode", intAttr(node, "ceil_mode", 0)}};
    CLEAVE_TRY(windowAttrs(node, x, *kernel, {1, 1}, attrs, fail));
    if (type == "AveragePool") attrs["count_include_pad"] = intAttr(node, "count_include_pad", 0);
    return emit(node, type == "MaxPool" ? OpId::max_pool2d : OpId::avg_pool2d, {node.input(0)}, attrs);
  }
  if (type == "BatchNormalization") {
    if (intAttr(node, "training_mode", 0) != 0 || node.output_size() > 1)
      return fail("only the inference form (one output, training_mode=0) is supported");
    return emit(node, OpId::batch_norm, {node.input(0), node.input(1), node.input(2), node.input(3), node.input(4)},
                {{"epsilon", floatAttr(node, "epsilon", 1e-5)}});
  }
  if (type == "LayerNormalization") {
    if (intAttr(node, "stash_type", 1) != 1) return fail("stash_type other than 1 (f32) is not supported");
    std::vector<std::string> inputs = {node.input(0), node.input(1)};
    if (hasInput(node, 2)) inputs.push_back(node.input(2));
    int64_t axis = intAttr(node, "axis", -1);
    double epsilon = floatAttr(node, "epsilon", 1e-5);
    CLEAVE_TRY(emit(node, OpId::layer_norm, inputs, {{"axis", axis}, {"epsilon", epsilon}}));
    bool wants_statistics = (node.output_size() > 1 && !node.output(1).empty()) ||
                            (node.output_size() > 2 && !node.output(2).empty());
    return wants_statistics ? layerNormStatistics(node, axis, epsilon) : Status::ok();
  }
  if (type == "Flatten") return emit(node, OpId::flatten, {node.input(0)}, {{"axis", intAttr(node, "axis", 1)}});
  if (type == "Reshape") {
    CLEAVE_ASSIGN_OR_RETURN(auto shape, constantInts(node, 1));
    bool zero_dims = std::find(shape.begin(), shape.end(), 0) != shape.end();
    if (intAttr(node, "allowzero", 0) != 0 && zero_dims) {
      // With allowzero a 0 is a dim of size 0, not a copy: the result is empty, so a constant.
      CLEAVE_ASSIGN_OR_RETURN(TensorType x, typeOf(node, node.input(0)));
      if (x.numel() != 0 || std::find(shape.begin(), shape.end(), -1) != shape.end())
        return fail("allowzero=1 with shape " + TensorType{x.dtype, shape}.str() + " does not fit input " + x.str());
      auto empty = std::make_shared<TensorData>();
      empty->type = {x.dtype, shape};
      bindConstant(node.output(0), empty);
      return Status::ok();
    }
    return emit(node, OpId::reshape, {node.input(0)}, {{"shape", shape}});
  }
  if (type == "Expand") {
    CLEAVE_ASSIGN_OR_RETURN(auto shape, constantInts(node, 1));
    return emit(node, OpId::expand, {node.input(0)}, {{"shape", shape}});
  }
  if (type == "Transpose") {
    AttrMap attrs;
    if (auto perm = intsAttr(node, "perm")) attrs["perm"] = *perm;
    return emit(node, OpId::transpose, {node.input(0)}, attrs);
  }
  if (type == "Concat") {
    return emit(node, OpId::concat, {node.input().begin(), node.input().end()}, {{"axis", intAttr(node, "axis", 0)}});
  }
  if (type == "Split") {
    CLEAVE_ASSIGN_OR_RETURN(TensorType x, typeOf(node, node.input(0)));
    int64_t axis = intAttr(node, "axis", 0);
    int64_t normalized = normalizeAxis(axis, x.rank());
    if (normalized < 0) return fail("axis " + std::to_string(axis) + " is out of range for " + x.str());
    std::vector<int64_t> sizes;
    if (opset_ < 13 && intsAttr(node, "split")) {
      sizes = *intsAttr(node, "split");
    } else if (opset_ >= 13 && hasInput(node, 1)) {
      CLEAVE_ASSIGN_OR_RETURN(sizes, constantInts(node, 1));
    } else {
      int64_t parts = node.output_size(), dim = x.shape[normalized];
      if (dim % parts != 0) return fail("dim " + std::to_string(dim) + " does not split into " + std::to_string(parts) + " equal parts");
      sizes.assign(static_cast<size_t>(parts), dim / parts);
    }
    return emit(node, OpId::split, {node.input(0)}, {{"axis", axis}, {"sizes", sizes}}, node.output_size());
  }
  if (type == "Slice") {
    AttrMap attrs;
    CLEAVE_ASSIGN_OR_RETURN(attrs["starts"], constantInts(node, 1));
    CLEAVE_ASSIGN_OR_RETURN(attrs["ends"], constantInts(node, 2));
    if (hasInput(node, 3)) {
      CLEAVE_ASSIGN_OR_RETURN(attrs["axes"], constantInts(node, 3));
    }
    if (hasInput(node, 4)) {
      CLEAVE_ASSIGN_OR_RETURN(attrs["steps"], constantInts(node, 4));
    }
    return emit(node, OpId::slice, {node.input(0)}, attrs);
  }
  if (type == "Gather") {
    return emit(node, OpId::gather, {node.input(0), node.input(1)}, {{"axis", intAttr(node, "axis", 0)}});
  }
  if (type == "Unsqueeze" || type == "Squeeze") {
    AttrMap attrs;
    if (opset_ < 13) {
      if (auto axes = intsAttr(node, "axes")) attrs["axes"] = *axes;
    } else if (hasInput(node, 1)) {
      CLEAVE_ASSIGN_OR_RETURN(attrs["axes"], constantInts(node, 1));
    }
    if (type == "Unsqueeze" && !attrs.count("axes")) return fail("Unsqueeze needs axes");
    return emit(node, type == "Unsqueeze" ? OpId::unsqueeze : OpId::squeeze, {node.input(0)}, attrs);
  }
  if (type == "Softmax" || type == "LogSoftmax") {
    OpId op = type == "Softmax" ? OpId::softmax : OpId::log_softmax;
    CLEAVE_ASSIGN_OR_RETURN(TensorType x, typeOf(node, node.input(0)));
    int64_t axis = intAttr(node, "axis", opset_ < 13 ? 1 : -1);
    int64_t normalized = normalizeAxis(axis, x.rank());
    if (normalized < 0) return fail("axis " + std::to_string(axis) + " is out of range for " + x.str());
    if (opset_ >= 13 || normalized == x.rank() - 1) return emit(node, op, {node.input(0)}, {{"axis", axis}});
    // Before opset 13 the input is coerced to 2-D at `axis`: flatten, normalise rows, reshape back.
    CLEAVE_ASSIGN_OR_RETURN(ValueId input, valueOf(node, node.input(0)));
    CLEAVE_ASSIGN_OR_RETURN(auto flat, emitValues(node, OpId::flatten, {input}, {{"axis", normalized}}, node.output(0) + ".2d"));
    CLEAVE_ASSIGN_OR_RETURN(auto normed, emitValues(node, op, flat, {{"axis", int64_t{-1}}}, node.output(0) + ".2d"));
    CLEAVE_ASSIGN_OR_RETURN(auto result, emitValues(node, OpId::reshape, normed, {{"shape", x.shape}}, node.output(0)));
    values_[node.output(0)] = result.front();
    return Status::ok();
  }
  if (type == "Cast") {
    auto dtype = dtypeFromOnnx(static_cast<int32_t>(intAttr(node, "to", 0)));
    if (!dtype) return fail("cast to ONNX data type " + std::to_string(intAttr(node, "to", 0)) + " is not supported");
    return emit(node, OpId::cast, {node.input(0)}, {{"to", std::string(dtypeName(*dtype))}});
  }
  if (type == "ReduceMean" || type == "ReduceSum" || type == "ReduceMax") {
    OpId op = type == "ReduceMean" ? OpId::reduce_mean : type == "ReduceSum" ? OpId::reduce_sum : OpId::reduce_max;
    AttrMap attrs{{"keepdims", intAttr(node, "keepdims", 1)}};
    if (type == "ReduceSum" && opset_ >= 13) {
      std::vector<int64_t> axes;
      if (hasInput(node, 1)) {
        CLEAVE_ASSIGN_OR_RETURN(axes, constantInts(node, 1));
      }
      // No axes means every axis, or with noop_with_empty_axes=1 none: the identity.
      if (axes.empty() && intAttr(node, "noop_with_empty_axes", 0) != 0)
        return emit(node, OpId::identity, {node.input(0)}, {});
      attrs["axes"] = axes;
    } else if (auto axes = intsAttr(node, "axes")) {
      attrs["axes"] = *axes;
    }
    return emit(node, op, {node.input(0)}, attrs);
  }
  if (type == "Dropout") {
    // Inference (training_mode absent or false), or a ratio of 0: the identity, with a mask of ones.
    if (hasInput(node, 2)) {
      CLEAVE_ASSIGN_OR_RETURN(double training, constantScalar(node, 2));
      double ratio = 0.5;
      if (hasInput(node, 1)) {
        CLEAVE_ASSIGN_OR_RETURN(ratio, constantScalar(node, 1));
      }
      if (training != 0 && ratio != 0)
        return fail("training_mode=true with ratio " + std::to_string(ratio) +
                    " (random dropout) is not supported; export the model in eval mode");
    }
    CLEAVE_TRY(emit(node, OpId::identity, {node.input(0)}, {}));
    if (node.output_size() > 1 && !node.output(1).empty()) {
      CLEAVE_ASSIGN_OR_RETURN(TensorType x, typeOf(node, node.input(0)));
      auto mask = std::make_shared<TensorData>();
      mask->type = {DType::kBool, x.shape};
      mask->bytes.assign(static_cast<size_t>(x.numel()), 1);
      bindConstant(node.output(1), mask);
    }
    return Status::ok();
  }
  if (type == "Constant") {
    if (const auto* value = findAttr(node, "value")) {
      CLEAVE_ASSIGN_OR_RETURN(TensorPtr data, tensorFromOnnx(value->t(), path_));
      bindConstant(node.output(0), data);
    } else if (const auto* ints = findAttr(node, "value_ints")) {
      bindConstant(node.output(0), intsTensor({ints->ints().begin(), ints->ints().end()}));
    } else if (const auto* one_int = findAttr(node, "value_int")) {
      bindConstant(node.output(0), intsTensor({one_int->i()}, /*scalar=*/true));
    } else if (const auto* one_float = findAttr(node, "value_float")) {
      auto data = std::make_shared<TensorData>();
      data->type = {DType::kF32, {}};
      float f = one_float->f();
      data->bytes.resize(sizeof f);
      std::memcpy(data->bytes.data(), &f, sizeof f);
      bindConstant(node.output(0), data);
    } else {
      return fail("only the value, value_int, value_ints and value_float forms are supported");
    }
    return Status::ok();
  }
  if (type == "Shape") {
    CLEAVE_ASSIGN_OR_RETURN(TensorType x, typeOf(node, node.input(0)));
    int64_t rank = x.rank();
    auto clampIndex = [rank](int64_t i) { return std::clamp(i < 0 ? i + rank : i, int64_t{0}, rank); };
    int64_t start = clampIndex(intAttr(node, "start", 0)), end = clampIndex(intAttr(node, "end", rank));
    std::vector<int64_t> dims(x.shape.begin() + start, x.shape.begin() + std::max(start, end));
    bindConstant(node.output(0), intsTensor(dims));
    return Status::ok();
  }
  if (type == "Not") {
    // not(x) is equal(x, false); it folds when x is a constant.
    auto false_scalar = std::make_shared<TensorData>();
    false_scalar->type = {DType::kBool, {}};
    false_scalar->bytes = {0};
    std::string false_name = node.output(0) + "/false";
    bindConstant(false_name, false_scalar);
    return emit(node, OpId::equal, {node.input(0), false_name}, {});
  }
  if (type == "ConstantOfShape") {
    // Folded: a tensor of the (constant) shape filled with `value` (default f32 0).
    CLEAVE_ASSIGN_OR_RETURN(auto shape, constantInts(node, 0));
    TensorPtr fill;
    if (const auto* value = findAttr(node, "value")) {
      CLEAVE_ASSIGN_OR_RETURN(fill, tensorFromOnnx(value->t(), path_));
    } else {
      auto zero = std::make_shared<TensorData>();
      zero->type = {DType::kF32, {1}};
      zero->bytes.assign(sizeof(float), 0);
      fill = zero;
    }
    if (fill->type.numel() != 1) return fail("value must hold one element");
    CLEAVE_TRY(checkFoldedShape(shape).withContext(where(node) + ": "));
    auto data = std::make_shared<TensorData>();
    data->type = {fill->type.dtype, shape};
    for (int64_t i = 0; i < data->type.numel(); ++i) data->bytes.insert(data->bytes.end(), fill->bytes.begin(), fill->bytes.end());
    bindConstant(node.output(0), data);
    return Status::ok();
  }
  if (type == "Range") {
    // Folded: start, limit and delta are constant scalars; ONNX's count is max(ceil((limit-start)/delta), 0).
    CLEAVE_ASSIGN_OR_RETURN(TensorPtr start_data, constantInput(node, 0));
    CLEAVE_ASSIGN_OR_RETURN(double start, constantScalar(node, 0));
    CLEAVE_ASSIGN_OR_RETURN(double limit, constantScalar(node, 1));
    CLEAVE_ASSIGN_OR_RETURN(double delta, constantScalar(node, 2));
    if (delta == 0) return fail("delta must be non-zero");
    double elements = std::max(std::ceil((limit - start) / delta), 0.0);
    if (!(elements <= static_cast<double>(kMaxFoldedElements))) {  // also NaN
      char count[32];
      std::snprintf(count, sizeof count, "%g", elements);
      return fail(std::string("start, limit and delta give ") + count + " elements, over cleave's limit of " +
                  std::to_string(kMaxFoldedElements));
    }
    auto count = static_cast<int64_t>(elements);
    std::vector<double> values(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) values[static_cast<size_t>(i)] = start + static_cast<double>(i) * delta;
    auto range = numbersTensor(values, start_data->type.dtype, {count});
    if (!range) return range.status().withContext(where(node) + ": ");
    bindConstant(node.output(0), *range);
    return Status::ok();
  }
  if (type == "Trilu") {
    int64_t k = 0;
    if (hasInput(node, 1)) {
      CLEAVE_ASSIGN_OR_RETURN(auto ks, constantInts(node, 1));
      if (ks.size() != 1) return fail("k must hold one integer");
      k = ks[0];
    }
    return emit(node, OpId::trilu, {node.input(0)}, {{"upper", intAttr(node, "upper", 1)}, {"k", k}});
  }
  return fail("op type is not supported");
}

Expected<Graph> OnnxImporter::run(const onnx::GraphProto& onnx_graph) {
  // 1. Initializers, then the real inputs (a graph input that has an initializer is not one).
  CLEAVE_TRY(importInitializers(onnx_graph));
  CLEAVE_TRY(importInputs(onnx_graph));
  // 2. Nodes in the model's (topological) order; constant ones fold as they come.
  for (const auto& node : onnx_graph.node()) CLEAVE_TRY(importNode(node));
  // 3. Outputs.
  CLEAVE_TRY(importOutputs(onnx_graph));
  return std::move(graph_);
}

// The op type of `node` when the importer does not map it (domain-qualified outside ai.onnx), else nullopt.
std::optional<std::string> unsupportedOpType(const onnx::NodeProto& node) {
  bool default_domain = node.domain().empty() || node.domain() == "ai.onnx";
  if (default_domain && (supportedOpTypes().count(node.op_type()) || compositeOpTypes().count(node.op_type())))
    return std::nullopt;
  return default_domain ? node.op_type() : node.domain() + "::" + node.op_type();
}

// Lists every node whose op type the importer does not map, on one line; empty when all are supported.
std::string unsupportedOpsReport(const onnx::GraphProto& onnx_graph) {
  std::map<std::string, std::vector<std::string>> nodes_by_type;
  for (int i = 0; i < onnx_graph.node_size(); ++i) {
    const auto& node = onnx_graph.node(i);
    if (auto type = unsupportedOpType(node))
      nodes_by_type[*type].push_back(node.name().empty() ? "#" + std::to_string(i) : node.name());
  }
  std::string report;
  for (const auto& [type, names] : nodes_by_type) {
    report += std::string(report.empty() ? " " : "; ") + type + " (" + std::to_string(names.size()) + " node" +
              (names.size() > 1 ? "s" : "") + ": ";
    for (size_t i = 0; i < names.size() && i < 5; ++i) report += (i ? ", " : "") + names[i];
    if (names.size() > 5) report += ", ...";
    report += ")";
  }
  return report;
}

}  // namespace

namespace {

// Parses the ModelProto at `path`.
Expected<onnx::ModelProto> parseModel(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::badInput("cannot open ONNX model '" + path + "': " + std::strerror(errno));
  onnx::ModelProto model;
  if (!model.ParseFromIstream(&in)) return Status::badInput(path + ": not a valid ONNX model (protobuf parse failed)");
  if (!model.has_graph()) return Status::badInput(path + ": not a valid ONNX model (it has no graph)");
  return model;
}

// Every graph output must be computed by a node or be an input or initializer. libonnx's checker
// lets an undefined output through, and its version converter then crashes on it.
Status checkOutputsDefined(const onnx::GraphProto& graph, const std::string& path) {
  std::set<std::string> defined;
  for (const auto& input : graph.input()) defined.insert(input.name());
  for (const auto& initializer : graph.initializer()) defined.insert(initializer.name());
  for (const auto& node : graph.node()) defined.insert(node.output().begin(), node.output().end());
  for (const auto& output : graph.output())
    if (!defined.count(output.name()))
      return Status::badInput(path + ": graph output '" + output.name() +
                              "' is not computed by any node, nor an input or initializer");
  return Status::ok();
}

// The default-domain opset `model` imports; -1 when it imports none.
int64_t defaultOpset(const onnx::ModelProto& model) {
  int64_t opset = -1;
  for (const auto& import : model.opset_import())
    if (import.domain().empty() || import.domain() == "ai.onnx") opset = import.version();
  return opset;
}

}  // namespace

Expected<OnnxModelSupport> checkOnnxSupport(const std::string& path) {
  CLEAVE_ASSIGN_OR_RETURN(onnx::ModelProto model, parseModel(path));
  OnnxModelSupport support;
  support.opset = defaultOpset(model);
  std::set<std::string> unsupported;
  for (const auto& node : model.graph().node())
    if (auto type = unsupportedOpType(node)) unsupported.insert(*type);
  support.unsupported_ops.assign(unsupported.begin(), unsupported.end());
  auto checkValue = [&](const onnx::ValueInfoProto& value, const std::string& role) {
    std::string kind;
    if (!value.type().has_tensor_type())
      kind = value.type().has_sequence_type() ? "sequence" : value.type().has_optional_type() ? "optional" : "not a tensor";
    else if (!dtypeFromOnnx(value.type().tensor_type().elem_type()))
      kind = "ONNX element type " + std::to_string(value.type().tensor_type().elem_type());
    if (!kind.empty()) support.unsupported_values.push_back(role + " '" + value.name() + "' (" + kind + ")");
  };
  for (const auto& input : model.graph().input()) checkValue(input, "input");
  for (const auto& output : model.graph().output()) checkValue(output, "output");
  return support;
}

Expected<TensorData> readOnnxTensorFile(const std::string& path, std::string* name) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::badInput("cannot open ONNX tensor '" + path + "': " + std::strerror(errno));
  onnx::TensorProto tensor;
  if (!tensor.ParseFromIstream(&in)) return Status::badInput(path + ": not a serialized ONNX TensorProto");
  CLEAVE_ASSIGN_OR_RETURN(TensorPtr data, tensorFromOnnx(tensor, path));
  if (name) *name = tensor.name();
  return *data;
}

Expected<Graph> importOnnxModel(const std::string& path, const OnnxImportOptions& options) {
  // 1. Parse the ModelProto.
  CLEAVE_ASSIGN_OR_RETURN(onnx::ModelProto model, parseModel(path));

  // 2. The default-domain opset must be one cleave maps, or an older one to upgrade.
  int64_t opset = defaultOpset(model);
  if (opset < 0) return Status::badInput(path + ": the model imports no default-domain (ai.onnx) opset");
  if (opset > kMaxOnnxOpset)
    return Status::badInput(path + ": ONNX opset " + std::to_string(opset) + " is not supported (cleave imports opsets " +
                            std::to_string(kMinOnnxOpset) + " to " + std::to_string(kMaxOnnxOpset) +
                            ", and older ones through libonnx's version converter)");

  CLEAVE_TRY(checkOutputsDefined(model.graph(), path));

  // 3. libonnx's checker, its version converter for opsets below kMinOnnxOpset, and its shape
  //    inference (in a child process: libonnx crashes on some malformed models).
  CLEAVE_ASSIGN_OR_RETURN(model, checkConvertAndInferShapes(model, path, opset, kMinOnnxOpset));
  opset = std::max(opset, kMinOnnxOpset);

  // 4. One error for every unsupported op, before any conversion.
  std::string unsupported = unsupportedOpsReport(model.graph());
  if (!unsupported.empty())
    return Status::badInput(path + ": unsupported ONNX ops at opset " + std::to_string(opset) + ":" + unsupported);

  // 5. Convert.
  OnnxImporter importer(path, options, opset);
  return importer.run(model.graph());
}

}  // namespace cleave
