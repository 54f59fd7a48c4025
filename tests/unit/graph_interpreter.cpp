// A graph interpreter for tests: runs each node's CPU kernel on buffers it allocates.
#include "tests/unit/graph_interpreter.h"

#include <cstring>

#include "runtime/device/kernel.h"

namespace cleave::test {
namespace {

template <class T>
void fill(TensorData& tensor, const std::vector<double>& elements) {
  for (size_t i = 0; i < elements.size() && i < tensor.bytes.size() / sizeof(T); ++i) {
    T value = static_cast<T>(elements[i]);
    std::memcpy(tensor.bytes.data() + i * sizeof(T), &value, sizeof(T));
  }
}

template <class T>
void read(const TensorData& tensor, std::vector<double>& elements) {
  for (size_t i = 0; i < elements.size(); ++i) {
    T value;
    std::memcpy(&value, tensor.bytes.data() + i * sizeof(T), sizeof(T));
    elements[i] = static_cast<double>(value);
  }
}

}  // namespace

Expected<TensorMap> evaluateGraph(const Graph& graph, const TensorMap& feeds) {
  std::vector<TensorData> values(graph.values.size());
  // 1. Inputs and parameters come from the feeds, checked against their declared types.
  std::vector<ValueId> fed = graph.inputs;
  for (const Param& p : graph.params) fed.push_back(p.value);
  for (ValueId v : fed) {
    const Value& value = graph.values[v];
    auto it = feeds.find(value.name);
    if (it == feeds.end()) return Status::badInput("evaluateGraph: no tensor fed for '%" + value.name + "'");
    if (it->second.type != value.type)
      return Status::badInput("evaluateGraph: '%" + value.name + "' is " + value.type.str() + ", the feed is " +
                              it->second.type.str());
    values[v] = it->second;
  }
  // 2. Each node runs its kernel on freshly allocated result buffers.
  // Kernels get arena addresses in plans, never null: an empty tensor points at this placeholder.
  alignas(64) static uint8_t empty_tensor[64];
  for (const Node& node : graph.nodes) {
    runtime::CpuKernel kernel = runtime::findCpuKernel(node.op);
    if (!kernel) return Status::internal(nodeContext(graph, node) + "no CPU kernel for " + std::string(opName(node.op)));
    std::vector<TensorType> operand_types, result_types;
    std::vector<const void*> inputs;
    std::vector<void*> outputs;
    for (ValueId v : node.operands) {
      operand_types.push_back(graph.values[v].type);
      inputs.push_back(values[v].bytes.empty() ? empty_tensor : values[v].bytes.data());
    }
    for (ValueId r : node.results) {
      result_types.push_back(graph.values[r].type);
      values[r].type = graph.values[r].type;
      values[r].bytes.assign(static_cast<size_t>(values[r].type.bytes()), 0);
      outputs.push_back(values[r].bytes.empty() ? empty_tensor : values[r].bytes.data());
    }
    runtime::KernelCall call{OpContext{opDef(node.op), operand_types, result_types, node.attrs}, inputs, outputs, 1};
    Status status = kernel(call);
    if (!status) return status.withContext(nodeContext(graph, node));
  }
  TensorMap by_name;
  for (size_t v = 0; v < graph.values.size(); ++v) by_name.emplace(graph.values[v].name, std::move(values[v]));
  return by_name;
}

TensorMap applyUpdates(const Graph& graph, const TensorMap& values, TensorMap feeds) {
  for (const StateUpdate& update : graph.updates)
    feeds[graph.values[update.target].name] = values.at(graph.values[update.new_value].name);
  return feeds;
}

TensorData makeTensor(const TensorType& type, const std::vector<double>& elements) {
  TensorData tensor{type, std::vector<uint8_t>(static_cast<size_t>(type.bytes()))};
  switch (type.dtype) {
    case DType::kF32: fill<float>(tensor, elements); break;
    case DType::kF64: fill<double>(tensor, elements); break;
    case DType::kI64: fill<int64_t>(tensor, elements); break;
    case DType::kI32: fill<int32_t>(tensor, elements); break;
    case DType::kBool: fill<uint8_t>(tensor, elements); break;
    default: break;  // other dtypes are not used by the tests
  }
  return tensor;
}

std::vector<double> toDoubles(const TensorData& tensor) {
  std::vector<double> elements(static_cast<size_t>(tensor.type.numel()));
  switch (tensor.type.dtype) {
    case DType::kF32: read<float>(tensor, elements); break;
    case DType::kF64: read<double>(tensor, elements); break;
    case DType::kI64: read<int64_t>(tensor, elements); break;
    case DType::kI32: read<int32_t>(tensor, elements); break;
    case DType::kBool: read<uint8_t>(tensor, elements); break;
    default: break;
  }
  return elements;
}

}  // namespace cleave::test
