// Model-local ONNX functions (ModelProto.functions, which PyTorch's torch.export exporter writes) inlined into the graph.
#include "frontend/onnx/onnx_functions.h"

#include <map>
#include <set>
#include <unordered_map>
#include <vector>

#include "frontend/onnx/onnx_newer_fields.h"

namespace cleave {
namespace {

std::string overloadOf(const google::protobuf::Message& message, int number) {
  auto values = unknownStrings(message, number);
  return values.empty() ? std::string() : values.back();
}

std::string functionKey(const std::string& domain, const std::string& name, const std::string& overload) {
  return domain + "::" + name + "::" + overload;
}

// One model's functions and the state of inlining them.
class FunctionInliner {
 public:
  FunctionInliner(const onnx::ModelProto& model, const std::string& path) : path_(path) {
    for (const auto& function : model.functions()) {
      auto& entry = functions_[functionKey(function.domain(), function.name(),
                                           overloadOf(function, kFunctionOverloadField))];
      entry.body = &function;
      for (const std::string& bytes : unknownStrings(function, kFunctionAttributeProtoField)) {
        onnx::AttributeProto attr;
        if (attr.ParseFromString(bytes)) entry.defaults[attr.name()] = attr;
      }
    }
  }

  // Appends `node` to `out`, or its function's body with every call in it inlined.
  Status expand(const onnx::NodeProto& node, std::vector<const onnx::FunctionProto*>& active,
                google::protobuf::RepeatedPtrField<onnx::NodeProto>& out) {
    auto found = functions_.find(functionKey(node.domain(), node.op_type(), overloadOf(node, kNodeOverloadField)));
    if (found == functions_.end()) {
      *out.Add() = node;
      return Status::ok();
    }
    const Function& function = found->second;
    const onnx::FunctionProto& body = *function.body;
    const std::string call = node.name().empty() ? body.name() : node.name();
    for (const auto* caller : active)
      if (caller == &body)
        return Status::badInput(path_ + " (node '" + call + "'): local function '" + body.name() + "' calls itself");
    if (node.input_size() > body.input_size() || node.output_size() > body.output_size())
      return Status::badInput(path_ + " (node '" + call + "'): calls local function '" + body.name() + "' with " +
                              std::to_string(node.input_size()) + " inputs and " + std::to_string(node.output_size()) +
                              " outputs; it takes " + std::to_string(body.input_size()) + " and gives " +
                              std::to_string(body.output_size()));
    // 1. Formal inputs and outputs name the call's; inner values get a prefix unique to this call.
    const std::string prefix = call + (used_prefixes_.count(call) ? "#" + std::to_string(used_prefixes_.size()) : "") + "/";
    used_prefixes_.insert(call);
    std::unordered_map<std::string, std::string> renamed;
    for (int i = 0; i < body.input_size(); ++i) renamed[body.input(i)] = i < node.input_size() ? node.input(i) : "";
    for (int i = 0; i < body.output_size(); ++i)
      renamed[body.output(i)] = i < node.output_size() ? node.output(i) : prefix + body.output(i);
    auto rename = [&](const std::string& name) {
      if (name.empty()) return name;
      auto it = renamed.find(name);
      return it != renamed.end() ? it->second : prefix + name;
    };
    std::map<std::string, const onnx::AttributeProto*> call_attrs;
    for (const auto& attr : node.attribute()) call_attrs[attr.name()] = &attr;

    // 2. Each inner node renamed, its attribute references resolved, then expanded in turn.
    active.push_back(&body);
    for (const auto& inner : body.node()) {
      onnx::NodeProto copy = inner;
      copy.set_name(prefix + (inner.name().empty() ? inner.op_type() : inner.name()));
      for (auto& input : *copy.mutable_input()) input = rename(input);
      for (auto& output : *copy.mutable_output()) output = rename(output);
      google::protobuf::RepeatedPtrField<onnx::AttributeProto> attrs;
      for (const auto& attr : inner.attribute()) {
        if (attr.ref_attr_name().empty()) {
          *attrs.Add() = attr;
          continue;
        }
        const onnx::AttributeProto* source = nullptr;
        if (auto it = call_attrs.find(attr.ref_attr_name()); it != call_attrs.end()) source = it->second;
        else if (auto d = function.defaults.find(attr.ref_attr_name()); d != function.defaults.end()) source = &d->second;
        if (!source) continue;  // neither given nor defaulted: the attribute is absent (ONNX's rule)
        onnx::AttributeProto* resolved = attrs.Add();
        *resolved = *source;
        resolved->set_name(attr.name());
      }
      *copy.mutable_attribute() = std::move(attrs);
      CLEAVE_TRY(expand(copy, active, out));
    }
    active.pop_back();
    return Status::ok();
  }

 private:
  struct Function {
    const onnx::FunctionProto* body = nullptr;
    std::map<std::string, onnx::AttributeProto> defaults;
  };
  std::string path_;
  std::unordered_map<std::string, Function> functions_;
  std::set<std::string> used_prefixes_;
};

}  // namespace

Status inlineLocalFunctions(onnx::ModelProto& model, const std::string& path) {
  if (model.functions_size() == 0) return Status::ok();
  google::protobuf::RepeatedPtrField<onnx::NodeProto> inlined;
  {
    FunctionInliner inliner(model, path);
    std::vector<const onnx::FunctionProto*> active;
    for (const auto& node : model.graph().node()) CLEAVE_TRY(inliner.expand(node, active, inlined));
  }
  *model.mutable_graph()->mutable_node() = std::move(inlined);
  model.clear_functions();
  return Status::ok();
}

}  // namespace cleave
