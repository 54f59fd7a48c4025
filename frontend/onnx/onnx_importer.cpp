// ONNX import: reads an .onnx model through libonnx and builds the equivalent cleave Graph.
#include "frontend/onnx/onnx_importer.h"

#include <google/protobuf/stubs/logging.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <unordered_set>

#include "frontend/onnx/onnx_converters.h"
#include "frontend/onnx/onnx_functions.h"
#include "frontend/onnx/onnx_import_context.h"
#include "frontend/onnx/onnx_library_checks.h"
#include "frontend/onnx/onnx_newer_fields.h"
#include "frontend/onnx/onnx_tensors.h"

namespace cleave {
namespace {

// Whether `b` holds exactly the transpose of `a` (both rank 2, same dtype).
bool isTransposeOf(const TensorData& b, const TensorData& a) {
  if (a.type.dtype != b.type.dtype || a.type.rank() != 2 || b.type.rank() != 2 || a.type.shape[0] != b.type.shape[1] ||
      a.type.shape[1] != b.type.shape[0] || a.bytes.size() != b.bytes.size())
    return false;
  const int64_t rows = a.type.shape[0], cols = a.type.shape[1];
  const size_t size = static_cast<size_t>(dtypeSize(a.type.dtype));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      if (std::memcmp(a.bytes.data() + (i * cols + j) * size, b.bytes.data() + (j * rows + i) * size, size) != 0)
        return false;
  return true;
}

// PyTorch's exporter folds the transpose of a tied weight (GPT-2's and T5's LM head reads the token
// embedding, transposed) into an initializer of its own, named by the exporter ("onnx::MatMul_592").
// Such an initializer that is exactly the transpose of another becomes transpose(that parameter), so
// that training keeps the two tied, as PyTorch does.
void tieTransposedInitializers(OnnxImportContext& ctx, const std::vector<std::pair<std::string, TensorPtr>>& floats) {
  for (const auto& [name, data] : floats) {
    if (name.rfind("onnx::", 0) != 0 || data->type.rank() != 2) continue;
    for (const auto& [source, source_data] : floats) {
      if (source == name || source.rfind("onnx::", 0) == 0) continue;
      if (isTransposeOf(*data, *source_data)) {
        ctx.tieTransposed(name, source);
        break;
      }
    }
  }
}

// A one-element initializer named as the exporters name the constants they make, not PyTorch's
// parameters (those keep their module path): torch.onnx's dynamo exporter's val_<n>, the
// TorchScript exporter's onnx::<op>_<n>. GELU's √2, 1 and 0.5, an attention scale: never trained.
bool isExporterScalar(const std::string& name, const TensorData& data) {
  if (data.type.numel() != 1) return false;
  if (name.rfind("onnx::", 0) == 0) return true;
  return name.size() > 4 && name.rfind("val_", 0) == 0 &&
         std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The initializers torch.export's ONNX exporter marks as buffers or constant tensors, not parameters
// (its value_info metadata "pkg.torch.export.graph_signature.InputSpec.kind"): Llama's rotary
// inv_freq, a registered mask. PyTorch does not train them, so cleave keeps them frozen. Other
// exporters do not mark them; `cleave compile --freeze` names such weights.
std::unordered_set<std::string> torchExportBuffers(const onnx::GraphProto& onnx_graph) {
  std::unordered_set<std::string> buffers;
  auto collect = [&buffers](const onnx::ValueInfoProto& info) {
    const std::string kind =
        metadataProperty(info, kValueInfoMetadataPropsField, "pkg.torch.export.graph_signature.InputSpec.kind");
    if (kind == "BUFFER" || kind == "CONSTANT_TENSOR") buffers.insert(info.name());
  };
  for (const auto& info : onnx_graph.value_info()) collect(info);
  for (const auto& info : onnx_graph.input()) collect(info);
  return buffers;
}

// Float initializers become parameters on first use (the model's weights); others are constants.
Status importInitializers(OnnxImportContext& ctx, const onnx::GraphProto& onnx_graph) {
  std::vector<std::pair<std::string, TensorPtr>> floats;
  for (const auto& initializer : onnx_graph.initializer()) {
    auto data = tensorFromOnnx(initializer, ctx.path());
    if (!data) return data.status();
    // Float initializers are the model's weights; integer ones are shapes and indices.
    if (isFloat((*data)->type.dtype) && !isExporterScalar(initializer.name(), **data)) {
      ctx.bindParameter(initializer.name(), *data);
      floats.emplace_back(initializer.name(), *data);
    } else {
      ctx.bindConstant(initializer.name(), *data);
    }
  }
  tieTransposedInitializers(ctx, floats);
  return Status::ok();
}

// Graph inputs without an initializer become graph inputs, or constants when options fix their value.
Status importInputs(OnnxImportContext& ctx, const onnx::GraphProto& onnx_graph) {
  for (const auto& entry : ctx.options().input_values) {
    const std::string& name = entry.first;  // clang 14 cannot capture a structured binding
    bool found = std::any_of(onnx_graph.input().begin(), onnx_graph.input().end(),
                             [&](const onnx::ValueInfoProto& input) { return input.name() == name; });
    if (!found) return Status::badInput(ctx.path() + ": a value is given for input '" + name + "', which the model lacks");
  }
  for (const auto& input : onnx_graph.input()) {
    if (ctx.isParameter(input.name()) || ctx.isConstant(input.name())) continue;  // an initializer
    const auto& tensor_type = input.type().tensor_type();
    auto dtype = dtypeFromOnnx(tensor_type.elem_type());
    if (!dtype)
      return Status::badInput(ctx.path() + ": input '" + input.name() + "' has ONNX element type " +
                              std::to_string(tensor_type.elem_type()) + ", which cleave does not support");
    if (auto fixed = ctx.options().input_values.find(input.name()); fixed != ctx.options().input_values.end()) {
      if (fixed->second.type.dtype != *dtype)
        return Status::badInput(ctx.path() + ": input '" + input.name() + "' is " + std::string(dtypeName(*dtype)) +
                                "; the value given for it is " + fixed->second.type.str());
      ctx.bindConstant(input.name(), std::make_shared<TensorData>(fixed->second));
      continue;
    }
    if (!tensor_type.has_shape())
      return Status::badInput(ctx.path() + ": input '" + input.name() + "' has no shape; cleave needs static shapes");
    TensorType type{*dtype, {}};
    for (int i = 0; i < tensor_type.shape().dim_size(); ++i) {
      const auto& dim = tensor_type.shape().dim(i);
      if (dim.has_dim_value()) {
        type.shape.push_back(dim.dim_value());
      } else if (i == 0) {
        type.shape.push_back(ctx.options().batch > 0 ? ctx.options().batch : 1);  // the symbolic batch dim
      } else {
        return Status::badInput(ctx.path() + ": input '" + input.name() + "' has symbolic dim " + std::to_string(i) +
                                " ('" + dim.dim_param() + "'); " +
                                (i == 1 ? "give the sequence length (--seq-len)" : "only dims 0 (batch) and 1 (sequence) may be symbolic"));
      }
    }
    CLEAVE_ASSIGN_OR_RETURN(ValueId v, ctx.graph().addInput(sanitizeOnnxName(input.name()), type));
    ctx.bindValue(input.name(), v);
  }
  return Status::ok();
}

// The graph outputs, in the model's order.
Status importOutputs(OnnxImportContext& ctx, const onnx::GraphProto& onnx_graph) {
  for (const auto& output : onnx_graph.output()) {
    onnx::NodeProto producer;  // outputs have no node; diagnostics name the output instead
    producer.set_name("output " + output.name());
    producer.set_op_type("output");
    producer.add_output(output.name());
    CLEAVE_ASSIGN_OR_RETURN(ValueId v, ctx.valueOf(producer, output.name()));
    // An output that is also an input or parameter, or already an output, goes through an identity.
    bool needs_identity = ctx.graph().values[v].producer < 0 ||
                          std::find(ctx.graph().outputs.begin(), ctx.graph().outputs.end(), v) != ctx.graph().outputs.end();
    if (needs_identity) {
      CLEAVE_ASSIGN_OR_RETURN(auto results, ctx.emitValues(producer, OpId::identity, {v}, {}, output.name()));
      v = results.front();
    }
    ctx.graph().outputs.push_back(v);
  }
  return Status::ok();
}

// Converts one node through its entry in the converter table.
// Converters read the inputs and outputs their op's schema promises, so a node with fewer than its
// schema's least (libonnx's schema of the model's opset, or the newest it knows; one input for an op
// newer than libonnx, Gelu) is refused first: libonnx's checker does not run on every model (a newer
// opset, an IR version it does not know), and protobuf checks indices only in some builds. Where
// protobuf does check and throws, that too becomes an error naming the node.
Status importNode(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  const OnnxConverter* converter = findOnnxConverter(node.op_type(), ctx.opset());
  if (!converter) return ctx.nodeError(node, "op type is not supported");
  if (node.output_size() == 0 || node.output(0).empty()) return ctx.nodeError(node, "the node has no output");
  const onnx::OpSchema* schema =
      onnx::OpSchemaRegistry::Schema(node.op_type(), static_cast<int>(ctx.opset()), onnx::ONNX_DOMAIN);
  const int least_inputs = schema ? schema->min_input() : 1;
  const int least_outputs = schema ? schema->min_output() : 1;
  auto count = [](int n, const std::string& what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); };
  if (node.input_size() < least_inputs || node.output_size() < least_outputs)
    return ctx.nodeError(node, "malformed node (" + std::to_string(node.input_size()) + " inputs, " +
                                   std::to_string(node.output_size()) + " outputs): " + node.op_type() +
                                   " needs at least " + count(least_inputs, "input") + " and " +
                                   count(least_outputs, "output"));
  // protobuf logs before it throws; the error below says it all.
  google::protobuf::LogHandler* previous = google::protobuf::SetLogHandler(nullptr);
  Status status;
  try {
    status = converter->convert(ctx, node);
  } catch (const std::exception& e) {
    status = ctx.nodeError(node, "malformed node (" + std::to_string(node.input_size()) + " inputs, " +
                                     std::to_string(node.output_size()) + " outputs): " + e.what());
  }
  google::protobuf::SetLogHandler(previous);
  return status;
}

// Builds the graph of `onnx_graph` into `ctx`.
Expected<Graph> importGraph(OnnxImportContext& ctx, const onnx::GraphProto& onnx_graph) {
  // 1. Initializers, then the real inputs (a graph input that has an initializer is not one).
  CLEAVE_TRY(importInitializers(ctx, onnx_graph));
  CLEAVE_TRY(importInputs(ctx, onnx_graph));
  // 2. Nodes in the model's (topological) order; constant ones fold as they come.
  for (const auto& node : onnx_graph.node()) CLEAVE_TRY(importNode(ctx, node));
  // 3. Outputs.
  CLEAVE_TRY(importOutputs(ctx, onnx_graph));
  return std::move(ctx.graph());
}

// The op type of `node` when the importer does not map it at `opset` (domain-qualified outside ai.onnx), else nullopt.
std::optional<std::string> unsupportedOpType(const onnx::NodeProto& node, int64_t opset) {
  bool default_domain = node.domain().empty() || node.domain() == "ai.onnx";
  if (default_domain && findOnnxConverter(node.op_type(), opset)) return std::nullopt;
  return default_domain ? node.op_type() : node.domain() + "::" + node.op_type();
}

// Lists every node whose op type the importer does not map at `opset`, on one line; empty when all are supported.
std::string unsupportedOpsReport(const onnx::GraphProto& onnx_graph, int64_t opset) {
  std::map<std::string, std::vector<std::string>> nodes_by_type;
  for (int i = 0; i < onnx_graph.node_size(); ++i) {
    const auto& node = onnx_graph.node(i);
    if (auto type = unsupportedOpType(node, opset))
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

// Sets the batch and sequence length of options on the graph inputs (initializers listed as inputs
// are left alone): dim 0 of every input of rank >= 1 takes the batch; dim 1 takes the length where it
// is symbolic or the input holds token ids (rank 2, integer). When a dim the export fixed changes,
// the shapes the file records for values and outputs no longer hold and are dropped (shape inference
// recomputes them). Returns the batch and length the export fixed where they differ from options'
// (0 where they do not).
struct ExportDims {
  int64_t batch = 0;
  int64_t seq_len = 0;
};
ExportDims setInputDims(onnx::ModelProto& model, const OnnxImportOptions& options) {
  std::set<std::string> initializers;
  for (const auto& initializer : model.graph().initializer()) initializers.insert(initializer.name());
  bool changed_fixed = false;
  ExportDims fixed;
  for (auto& input : *model.mutable_graph()->mutable_input()) {
    if (initializers.count(input.name()) || !input.type().has_tensor_type() || !input.type().tensor_type().has_shape())
      continue;
    auto* tensor_type = input.mutable_type()->mutable_tensor_type();
    auto* shape = tensor_type->mutable_shape();
    auto setDim = [&](int i, int64_t value) {
      auto* dim = shape->mutable_dim(i);
      if (dim->has_dim_value() && dim->dim_value() != value) changed_fixed = true;
      dim->set_dim_value(value);
    };
    if (options.batch > 0 && shape->dim_size() >= 1) {
      if (shape->dim(0).has_dim_value() && shape->dim(0).dim_value() != options.batch)
        fixed.batch = shape->dim(0).dim_value();
      setDim(0, options.batch);
    }
    const bool token_ids = shape->dim_size() == 2 && (tensor_type->elem_type() == onnx::TensorProto::INT64 ||
                                                      tensor_type->elem_type() == onnx::TensorProto::INT32);
    if (options.seq_len > 0 && shape->dim_size() >= 2 && (!shape->dim(1).has_dim_value() || token_ids)) {
      if (shape->dim(1).has_dim_value() && shape->dim(1).dim_value() != options.seq_len)
        fixed.seq_len = shape->dim(1).dim_value();
      setDim(1, options.seq_len);
    }
  }
  if (changed_fixed) {
    model.mutable_graph()->clear_value_info();
    for (auto& output : *model.mutable_graph()->mutable_output())
      if (output.type().has_tensor_type()) output.mutable_type()->mutable_tensor_type()->clear_shape();
  }
  return fixed;
}

// The note an import error gets when the model runs at a batch or length its export fixed.
std::string fixedDimsNote(const ExportDims& fixed, const OnnxImportOptions& options) {
  std::string at, exported, compile;
  if (fixed.batch > 0) {
    at = "batch " + std::to_string(options.batch);
    exported = "a fixed batch of " + std::to_string(fixed.batch);
    compile = "--batch " + std::to_string(fixed.batch);
  }
  if (fixed.seq_len > 0) {
    at += (at.empty() ? "" : ", ") + std::string("sequence length ") + std::to_string(options.seq_len);
    exported += (exported.empty() ? "" : " and ") + std::string("a fixed length of ") + std::to_string(fixed.seq_len);
    compile += (compile.empty() ? "" : " ") + std::string("--seq-len ") + std::to_string(fixed.seq_len);
  }
  return " (at " + at + "; the model was exported at " + exported +
         " and this node's constants hold it: export it with symbolic dims (dynamic_axes, dynamic_shapes), or "
         "compile it at " + compile + ")";
}

// After importing a fixed-batch export at another batch: every output of rank >= 1 must have the
// new batch as its dim 0, or the exporter wrote the old batch into the model as a constant.
Status checkOutputsFollowBatch(const Graph& graph, const std::string& path, int64_t batch) {
  for (ValueId v : graph.outputs) {
    const Value& output = graph.values[v];
    if (output.type.rank() == 0 || output.type.shape[0] == batch) continue;
    return Status::badInput(path + ": output '" + output.name + "' is " + output.type.str() + " at batch " +
                            std::to_string(batch) + ": the export fixed its batch inside the model (a constant "
                            "shape, not one computed from the input), so it runs only at the batch it was exported at");
  }
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
  CLEAVE_TRY(inlineLocalFunctions(model, path));
  OnnxModelSupport support;
  support.opset = defaultOpset(model);
  // Ops are judged at the opset the model is imported at (an older one is upgraded first).
  const int64_t import_opset = std::clamp(support.opset, kMinOnnxOpset, kMaxOnnxOpset);
  std::set<std::string> unsupported;
  for (const auto& node : model.graph().node())
    if (auto type = unsupportedOpType(node, import_opset)) unsupported.insert(*type);
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
  const std::unordered_set<std::string> buffers = torchExportBuffers(model.graph());  // before value_info may go
  const ExportDims fixed = setInputDims(model, options);

  // 3. libonnx's checker, its version converter for opsets below kMinOnnxOpset, and its shape
  //    inference (in a child process: libonnx crashes on some malformed models), for the opsets and
  //    IR versions it knows. Newer models (torch.export's) are checked by cleave's own rules: every
  //    node's inputs defined before it, every op's shape rule while converting.
  if (opset <= kMaxLibonnxOpset && model.ir_version() <= kMaxLibonnxIrVersion) {
    CLEAVE_ASSIGN_OR_RETURN(model, checkConvertAndInferShapes(model, path, opset, kMinOnnxOpset));
    opset = std::max(opset, kMinOnnxOpset);
  } else if (opset < kMinOnnxOpset) {
    return Status::badInput(path + ": ONNX opset " + std::to_string(opset) + " with IR version " +
                            std::to_string(model.ir_version()) + " is not supported (libonnx's version converter "
                            "reads IR versions up to " + std::to_string(kMaxLibonnxIrVersion) + ")");
  }
  CLEAVE_TRY(inlineLocalFunctions(model, path));

  // 4. One error for every unsupported op, before any conversion.
  std::string unsupported = unsupportedOpsReport(model.graph(), opset);
  if (!unsupported.empty())
    return Status::badInput(path + ": unsupported ONNX ops at opset " + std::to_string(opset) + ":" + unsupported);

  // 5. Convert.
  OnnxImportContext ctx(path, options, opset);
  ctx.setExportBatch(fixed.batch);
  for (const std::string& name : buffers) ctx.markBuffer(name);
  auto imported = importGraph(ctx, model.graph());
  if (!imported && (fixed.batch > 0 || fixed.seq_len > 0))
    return Status::badInput(imported.status().message() + fixedDimsNote(fixed, options));
  CLEAVE_TRY(imported.status());
  Graph graph = std::move(*imported);
  if (fixed.batch > 0) CLEAVE_TRY(checkOutputsFollowBatch(graph, path, options.batch));
  return graph;
}

}  // namespace cleave
