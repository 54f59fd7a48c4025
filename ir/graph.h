// Graph: values, nodes in program order, inputs, parameters and outputs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ir/attribute.h"
#include "ir/held_layout.h"
#include "ir/op_table.h"
#include "ir/source_loc.h"
#include "ir/status.h"
#include "ir/tensor_type.h"

namespace cleave {

// Index of a value in Graph::values.
using ValueId = int32_t;
constexpr ValueId kNoValue = -1;

// A tensor-valued SSA value: a graph input, a parameter, or a node result.
struct Value {
  std::string name;  // unique in the graph; printed as %name
  TensorType type;
  int32_t producer = -1;     // index of the producing node; -1 for inputs and parameters
  int32_t result_index = 0;  // which result of the producer
};

// One op application. Results are values this node defines.
struct Node {
  OpId op;
  std::vector<ValueId> operands;
  std::vector<ValueId> results;
  AttrMap attrs;
  SourceLoc loc;
};

// How a parameter gets its first value: a seeded initializer, or stored data.
// Initializer kinds: zeros, ones, constant(value), normal(mean, std), uniform(low, high),
// xavier_uniform(gain), xavier_normal(gain), kaiming_uniform(a, mode), kaiming_normal(a, mode), data.
struct Initializer {
  std::string kind = "zeros";
  AttrMap args;                                  // e.g. {"std": 0.02, "seed": 7}
  std::shared_ptr<const TensorData> data;        // set when kind == "data"
};

// True when `kind` is one of the Initializer kinds above (including "data").
bool isInitializerKind(std::string_view kind);

// A trainable (or frozen) tensor of the model.
struct Param {
  ValueId value = kNoValue;
  Initializer init;
  bool trainable = true;
  // Set on a device's graph when the parameter is one block of a tensor split over devices: the
  // whole tensor's shape and the block's start in it (the initializer runs over the whole shape).
  std::vector<int64_t> full_shape;
  std::vector<int64_t> shard_offset;
  // How shard_offset follows from the device's mesh coordinates: along `dim`, index on `axis`
  // times `step`, summed (tp blocks, then ZeRO's dp blocks of them). Plans record them so that
  // ranks sharing one program derive their own offsets (ir/shared_programs.h).
  struct ShardStep {
    int64_t dim = 0;
    std::string axis;
    int64_t step = 0;
  };
  std::vector<ShardStep> shard_steps;
  // Set (model.shape) when the graph holds the tensor in another shape than the model gives it, its
  // elements in the same row-major order (a fused projection's weight [in, parts·out] held as [in, parts, out],
  // passes/partition/fused_projections.h): the model's shape, which checkpoints reshape through and
  // exports write; or grouping it (a fused projection of unequal parts held as [groups, in,
  // width / groups]): the parts' sizes and dim too (ir/held_layout.h). full_shape and shard_offset
  // are in the held shape.
  HeldLayout model;
};

// A state update: after a step, parameter `target` takes the value `new_value` (optimizer steps,
// momentum buffers, the step counter). Printed as `update %target = %new_value`.
struct StateUpdate {
  ValueId target = kNoValue;
  ValueId new_value = kNoValue;
};

// A whole model graph. Nodes are kept in a valid topological (program) order.
class Graph {
 public:
  std::string name = "main";
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<ValueId> inputs;
  std::vector<Param> params;
  std::vector<ValueId> outputs;
  std::vector<StateUpdate> updates;  // roots like outputs: passes keep what they need

  // Adds a graph input.
  Expected<ValueId> addInput(const std::string& value_name, TensorType type);
  // Adds a parameter.
  Expected<ValueId> addParam(const std::string& value_name, TensorType type, Initializer init, bool trainable = true);
  // Appends a node whose result types come from the op's shape rule; result names are made
  // unique from `result_names` (or from the op name when empty). Errors name the op and `loc`.
  Expected<std::vector<ValueId>> addNode(OpId op, std::vector<ValueId> operands, AttrMap attrs = {},
                                         SourceLoc loc = {}, std::vector<std::string> result_names = {});
  // Appends a node with given result types (the parser does this; the verifier checks them).
  Expected<std::vector<ValueId>> addNodeWithTypes(OpId op, std::vector<ValueId> operands, AttrMap attrs,
                                                  SourceLoc loc, std::vector<std::string> result_names,
                                                  std::vector<TensorType> result_types);

  // Gives value `v` the name `new_name`; an error when another value already has it.
  Status renameValue(ValueId v, const std::string& new_name);
  // The value named `value_name`, or kNoValue.
  ValueId findValue(std::string_view value_name) const;
  // A name not yet used in the graph, made from `hint` ("x" -> "x", "x_1", ...).
  std::string uniqueName(std::string_view hint);
  // The parameter entry for `v`, or nullptr when `v` is not a parameter.
  const Param* findParam(ValueId v) const;
  Param* findParam(ValueId v) { return const_cast<Param*>(std::as_const(*this).findParam(v)); }
  bool isInput(ValueId v) const;

  // Removes the nodes with dead[i] set, then drops values nothing defines and renumbers ids.
  void eraseNodes(const std::vector<bool>& dead);
  // The same, also dropping the erased nodes' entries from `node_labels` (one per node; empty or
  // null: none), as the passes that keep a pipeline step per node need.
  void eraseNodes(const std::vector<bool>& dead, std::vector<int64_t>* node_labels);
  // Drops values that are no longer defined or used and renumbers the rest (ids change).
  void compact();
  // For each value, the indices of the nodes that use it (a node using it twice appears twice).
  std::vector<std::vector<int32_t>> computeUsers() const;
  // For each value, whether the graph reads it after its nodes: a graph output or a state update's
  // new value (what a pass may not rewrite away or retype).
  std::vector<bool> valuesReadAfterNodes() const;

  // Sum of parameter elements.
  int64_t parameterCount() const;
  // True when a node is of the gradient or optimizer family: the graph is a training step.
  bool trains() const;

 private:
  ValueId newValue(const std::string& value_name, TensorType type);
  // Gives the name index the ids of `remap` (old id -> new id, kNoValue: dropped).
  void remapNameIndex(const std::vector<ValueId>& remap);
  void rebuildParamIndex();
  std::unordered_map<std::string, ValueId> by_name_;
  // Position in `params` of each parameter's value, kept by addParam and compact (the only places
  // that add or renumber parameters); findParam checks every hit and falls back to a scan.
  std::unordered_map<ValueId, size_t> param_position_;
  std::unordered_map<std::string, int64_t> next_suffix_;
};

// The diagnostic prefix for a node: "loc: op '%result': ".
std::string nodeContext(const Graph& graph, const Node& node);

}  // namespace cleave
