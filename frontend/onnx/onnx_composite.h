// Writes one ONNX node as a composition of cleave ops: named intermediate steps, filled constants, the final op.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

#include "frontend/onnx/onnx_import_context.h"

namespace cleave {

// The steps of a composite conversion of one node. Intermediate results are named
// "<output 0>/<step>" in the order they are made; finish() writes the node's output 0.
class OnnxComposite {
 public:
  // Starts a composition of `node`, whose input 0 (`x`) must be defined.
  static Expected<OnnxComposite> start(OnnxImportContext& ctx, const onnx::NodeProto& node);

  // Input 0 of the node, its type, dtype and rank.
  const std::string& x() const { return node_->input(0); }
  const TensorType& xType() const { return x_type_; }
  DType dtype() const { return x_type_.dtype; }
  int64_t rank() const { return x_type_.rank(); }
  // The dims after batch and channel: 2..rank-1.
  std::vector<int64_t> spatialAxes() const;

  // Adds `op` as an intermediate step and returns its result's name.
  Expected<std::string> apply(OpId op, const std::vector<std::string>& inputs, AttrMap attrs = {});
  // Adds `op` as the last step, writing the node's output 0.
  Status finish(OpId op, const std::vector<std::string>& inputs, AttrMap attrs = {});
  // A constant of `dtype` and `shape` filled with `value`; returns its name.
  Expected<std::string> filled(double value, DType dtype, const Shape& shape = {});
  // |x| as where(x < 0, -x, x); returns its name.
  Expected<std::string> absolute() { return absolute(x()); }
  // The same of another value of the node's dtype.
  Expected<std::string> absolute(const std::string& value);
  // A kBadInput error about the node.
  Status fail(const std::string& message) const { return ctx_->nodeError(*node_, message); }

 private:
  OnnxComposite(OnnxImportContext& ctx, const onnx::NodeProto& node, TensorType x_type)
      : ctx_(&ctx), node_(&node), x_type_(std::move(x_type)) {}
  std::string nextName() { return node_->output(0) + "/" + std::to_string(step_++); }

  OnnxImportContext* ctx_;
  const onnx::NodeProto* node_;
  TensorType x_type_;
  int step_ = 0;
};

}  // namespace cleave
