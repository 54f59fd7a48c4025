// Model-local ONNX functions (ModelProto.functions, which PyTorch's torch.export exporter writes) inlined into the graph.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "ir/status.h"

namespace cleave {

// Replaces every node of `model`'s graph that calls one of the model's local functions (matched by
// domain and name) by the function's body, recursively: the function's inputs and outputs become
// the call's, its inner values get names of their own (prefixed by the call's node name), and
// attribute references (ref_attr_name) take the call's attribute or the function's default. The
// functions are then removed. A function that calls itself, or a reference to an attribute the call
// lacks and that has no default, is a kBadInput error naming `path` and the node.
Status inlineLocalFunctions(onnx::ModelProto& model, const std::string& path);

}  // namespace cleave
