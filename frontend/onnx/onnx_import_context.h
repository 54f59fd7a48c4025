// The importer's graph-building state, which every ONNX op converter receives: values, constants, diagnostics.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "frontend/onnx/onnx_importer.h"
#include "frontend/onnx/onnx_tensors.h"
#include "ir/graph.h"
#include "ir/op_table.h"
#include "ir/source_loc.h"

namespace cleave {

// The Graph under construction and what the importer knows of each ONNX tensor name: a graph
// value, constant data (which folds the nodes that use it), or a float initializer that becomes a
// parameter on first use. One instance per import.
class OnnxImportContext {
 public:
  OnnxImportContext(std::string path, const OnnxImportOptions& options, int64_t opset)
      : path_(std::move(path)), options_(options), opset_(opset) {}

  // The model file, for diagnostics.
  const std::string& path() const { return path_; }
  // How symbolic dims and fixed inputs are handled.
  const OnnxImportOptions& options() const { return options_; }
  // The default-domain opset the model is imported at (after any upgrade).
  int64_t opset() const { return opset_; }
  // The graph built so far.
  Graph& graph() { return graph_; }

  // Diagnostics: the node's source location, "<loc>: <op type>", and a kBadInput error prefixed with it.
  SourceLoc locOf(const onnx::NodeProto& node) const;
  std::string where(const onnx::NodeProto& node) const;
  Status nodeError(const onnx::NodeProto& node, const std::string& message) const;

  // Whether ONNX tensor `name` is a known constant, or a float initializer not yet made a parameter.
  bool isConstant(const std::string& name) const { return constants_.count(name) > 0; }
  bool isParameter(const std::string& name) const { return parameters_.count(name) > 0; }
  // Binds `name` to known data: uses of it fold.
  void bindConstant(const std::string& name, TensorPtr data) { constants_[name] = std::move(data); }
  // Binds `name` to data that becomes a trainable parameter (named after it) on first use.
  void bindParameter(const std::string& name, TensorPtr data) { parameters_[name] = std::move(data); }
  // Makes `alias` a parameter of its own holding the initial data of parameter `name`.
  void aliasParameter(const std::string& alias, const std::string& name) { parameters_[alias] = parameters_[name]; }
  // Makes initializer `name` the transpose of parameter initializer `source` (a tied weight whose
  // transpose the exporter folded): its first use emits transpose(source).
  void tieTransposed(const std::string& name, const std::string& source) { transposed_[name] = source; }
  // Binds ONNX sequence `name` to the tensors it holds, in order (sequences exist only while importing).
  void bindSequence(const std::string& name, std::vector<std::string> elements) { sequences_[name] = std::move(elements); }
  // The tensors of sequence `name`; an error naming the node when it is not a known sequence.
  Expected<std::vector<std::string>> sequenceOf(const onnx::NodeProto& node, const std::string& name) const;
  // Binds `name` to a graph value.
  void bindValue(const std::string& name, ValueId value) { values_[name] = value; }
  // Makes float initializer `name` a buffer: a parameter that training does not update by
  // gradients (BatchNormalization's running statistics); call before its first use.
  void markBuffer(const std::string& name) { buffers_.insert(name); }
  // After each step, initializer `target` (a buffer) takes the value of ONNX tensor `new_value`.
  Status addStateUpdate(const onnx::NodeProto& node, const std::string& target, const std::string& new_value);

  // The graph value of ONNX tensor `name`, creating a constant node or parameter on first use.
  Expected<ValueId> valueOf(const onnx::NodeProto& node, const std::string& name);
  // The type of ONNX tensor `name` (a value, constant or parameter initializer).
  Expected<TensorType> typeOf(const onnx::NodeProto& node, const std::string& name);
  // The data of input `index`, which must be a constant (or an initializer).
  Expected<TensorPtr> constantInput(const onnx::NodeProto& node, int index);
  // Input `index` as constant integers (i64 or i32).
  Expected<std::vector<int64_t>> constantInts(const onnx::NodeProto& node, int index);
  // Input `index` as one constant number.
  Expected<double> constantScalar(const onnx::NodeProto& node, int index);

  // Imports a model traced at fixed batch `export_batch` at options.batch instead: targets of
  // reshapes and expands with that batch in dim 0 (or a multiple of it, batch x length) take the new
  // batch, and constants with that many equal rows (masks, position and token-type ids broadcast over
  // the batch) as many rows as the new batch has, where a node reads them.
  void setExportBatch(int64_t export_batch) { export_batch_ = export_batch; }

  // Emits `op` on the given ONNX input names with its results bound to the node's first
  // `result_count` outputs: folded when every input is a constant, else a node.
  Status emit(const onnx::NodeProto& node, OpId op, const std::vector<std::string>& inputs, AttrMap attrs,
              int result_count = 1);
  // emit with the results bound to the ONNX names `outputs` (intermediate steps of a decomposition).
  Status emitTo(const onnx::NodeProto& node, OpId op, const std::vector<std::string>& inputs, AttrMap attrs,
                const std::vector<std::string>& outputs);
  // Adds `op` on graph values (never folded) and returns its results, named after `result_hint`.
  Expected<std::vector<ValueId>> emitValues(const onnx::NodeProto& node, OpId op, std::vector<ValueId> operands,
                                            AttrMap attrs, const std::string& result_hint);

 private:
  std::string path_;
  OnnxImportOptions options_;
  int64_t opset_;
  Graph graph_;
  std::unordered_map<std::string, ValueId> values_;         // ONNX tensor -> graph value
  std::unordered_map<std::string, TensorPtr> constants_;    // ONNX tensor -> known data (foldable)
  std::unordered_map<std::string, TensorPtr> parameters_;   // float initializers, made params on first use
  std::unordered_set<std::string> buffers_;                 // initializers that become non-trainable params
  std::unordered_map<std::string, std::string> transposed_;  // tied initializer -> the parameter it transposes
  std::unordered_map<std::string, std::vector<std::string>> sequences_;  // ONNX sequence -> its tensors' names
  int64_t export_batch_ = 0;  // the batch a fixed-batch export was traced at, when imported at another
  // A constant of the export's batch that a node about to be added reads, at options.batch rows.
  void rebatchConstant(const std::string& name);
  // A reshape or expand target written at the export's batch, at options.batch.
  void rebatchTarget(OpId op, ValueId operand, AttrMap& attrs) const;
};

// Whether input `index` of `node` is present (not absent, not the empty name).
bool hasInput(const onnx::NodeProto& node, int index);
// Every input name of `node`, in order.
std::vector<std::string> allInputs(const onnx::NodeProto& node);
// Whether output `index` of `node` is present (not absent, not the empty name).
bool hasOutput(const onnx::NodeProto& node, int index);

// ONNX attribute accessors, with the default when the attribute is absent.
const onnx::AttributeProto* findAttr(const onnx::NodeProto& node, const std::string& name);
int64_t intAttr(const onnx::NodeProto& node, const std::string& name, int64_t fallback);
double floatAttr(const onnx::NodeProto& node, const std::string& name, double fallback);
std::string stringAttr(const onnx::NodeProto& node, const std::string& name, const std::string& fallback);
std::optional<std::vector<int64_t>> intsAttr(const onnx::NodeProto& node, const std::string& name);

}  // namespace cleave
