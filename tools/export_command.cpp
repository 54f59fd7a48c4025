// `cleave export`: a training run's weights out of cleave, as safetensors under the model's own
// parameter names, or as the original ONNX model with the trained weights.
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "analysis/plan_report.h"
#include "frontend/onnx/onnx_weights.h"
#include "ir/plan.h"
#include "ir/plan.pb.h"
#include "runtime/io/file_io.h"
#include "runtime/io/safetensors.h"
#include "runtime/train/checkpoint.h"
#include "tools/cli_common.h"
#include "tools/plan_commands.h"

namespace cleave::cli {
namespace {

// The whole type of every weight (not optimizer state) of the plan, by name, in the model's shape
// (a plan may hold a weight reshaped: WeightLayout::model_shape).
std::map<std::string, TensorType> planWeights(const planpb::Plan& plan) {
  std::map<std::string, TensorType> weights;
  for (const planpb::RankPlan& rank : plan.ranks())
    for (const WeightLayout& layout : weightLayouts(rank))
      weights.emplace(layout.name, TensorType{layout.dtype, layout.model_shape});
  return weights;
}

}  // namespace

// Steps: read the plan and the checkpoint's weights and check they belong together; find the
// model's own names (an ONNX model's initializers); write safetensors or ONNX.
int runExport(const ExportFlags& flags) {
  const bool to_onnx = endsWith(flags.output, ".onnx");
  if (!to_onnx && !endsWith(flags.output, ".safetensors"))
    return reportError(Status::usage("-o " + flags.output + ": export writes FILE.safetensors or FILE.onnx"));
  auto plan = readPlanFile(flags.plan);
  if (!plan) return reportError(plan.status());
  auto checkpoint = runtime::readLatestCheckpoint(flags.checkpoint_dir, /*weights_only=*/true);
  if (!checkpoint) return reportError(checkpoint.status());

  // 1. The checkpoint holds exactly the plan's weights.
  const std::map<std::string, TensorType> weights = planWeights(**plan);
  std::set<std::string> saved;
  for (const auto& tensor : checkpoint->tensors) {
    saved.insert(tensor.name);
    auto it = weights.find(tensor.name);
    if (it == weights.end())
      return reportError(Status::badInput("checkpoint '" + checkpoint->path + "' has weight '" + tensor.name +
                                          "' that " + flags.plan + " does not; it was saved from another model"));
    if (it->second != tensor.type)  // both in the model's shape (readLatestCheckpoint, WeightLayout::model_shape)
      return reportError(Status::badInput("checkpoint '" + checkpoint->path + "': weight '" + tensor.name + "' is " +
                                          tensor.type.str() + ", " + flags.plan + " has " + it->second.str()));
  }
  for (const auto& [name, type] : weights)
    if (!saved.count(name))
      return reportError(Status::badInput("checkpoint '" + checkpoint->path + "' has no weight '" + name + "' (" +
                                          type.str() + ") of " + flags.plan));

  // 2. The model the plan was compiled from, and the names it gives its weights.
  std::string model = flags.model.empty() ? (*plan)->model_file() : flags.model;
  const bool onnx_model = endsWith(model, ".onnx");
  if (to_onnx && !onnx_model)
    return reportError(Status::usage("-o " + flags.output + " writes the ONNX model the plan was compiled from, and " +
                                     flags.plan + " was compiled from '" + model +
                                     "' (give the ONNX model with --model, or write .safetensors)"));
  std::map<std::string, std::string> own_names;
  if (onnx_model) {
    std::error_code ec;
    if (!std::filesystem::exists(model, ec))
      return reportError(Status::badInput("cannot find the model '" + model + "' that " + flags.plan +
                                          " was compiled from (give its path with --model)"));
    auto names = onnxInitializerNames(model);
    if (!names) return reportError(names.status());
    own_names = std::move(*names);
  }

  // 3. The file.
  Status written;
  if (to_onnx) {
    std::vector<OnnxWeight> trained;
    for (const auto& tensor : checkpoint->tensors) trained.push_back({tensor.name, tensor.type, tensor.data.data()});
    auto bytes = onnxModelWithWeights(model, trained);
    if (!bytes) return reportError(bytes.status());
    written = runtime::writeFileAtomically(flags.output, [&](runtime::FileWriter& out) { return out.write(*bytes); });
  } else {
    std::vector<runtime::SafetensorsEntry> entries;
    for (const auto& tensor : checkpoint->tensors) {
      auto own = own_names.find(tensor.name);
      entries.push_back({own == own_names.end() ? tensor.name : own->second, tensor.type, tensor.data.data()});
    }
    // PyTorch's BatchNorm counts its training batches in a buffer ONNX does not keep; without it
    // load_state_dict(strict=True) refuses the file. It gets the checkpoint's step.
    std::set<std::string> names;
    for (const auto& entry : entries) names.insert(entry.name);
    const int64_t batches_tracked = checkpoint->state.step;
    const std::string mean = ".running_mean";
    for (const std::string& name : names) {
      if (!endsWith(name, mean)) continue;
      std::string module = name.substr(0, name.size() - mean.size());
      if (names.count(module + ".running_var") && !names.count(module + ".num_batches_tracked"))
        entries.push_back({module + ".num_batches_tracked", TensorType{DType::kI64, {}}, &batches_tracked});
    }
    std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                   {"producer", "cleave"},
                                                   {"model", model},
                                                   {"step", std::to_string(checkpoint->state.step)}};
    written = runtime::writeSafetensors(flags.output, entries, metadata);
  }
  if (!written) return reportError(written);
  std::printf("wrote %s: %zu weights of %s at step %lld\n", flags.output.c_str(), checkpoint->tensors.size(),
              model.c_str(), static_cast<long long>(checkpoint->state.step));
  return 0;
}

}  // namespace cleave::cli
