// libonnx's checker, version converter and shape inference, in a child process: a model crashing libonnx is an error.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>

#include "ir/status.h"

namespace cleave {

// Runs libonnx on `model` (read from `path`): its checker (the path form, which also checks
// external-data files), its version converter up to `target_opset` when the model's default-domain
// opset `opset` is older, and its shape inference; returns the converted model with inferred
// shapes. libonnx throws on most malformed models but crashes on some, so it runs in a forked
// child process: either way the result is a kBadInput error naming the file and the step, with
// libonnx's message or the signal that ended it.
Expected<onnx::ModelProto> checkConvertAndInferShapes(const onnx::ModelProto& model, const std::string& path,
                                                      int64_t opset, int64_t target_opset);

}  // namespace cleave
