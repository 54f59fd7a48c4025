// Per-rank figures of a plan for inspect: memory live at a program's peak, and bytes moved per comm kind.
#include "analysis/plan_report.h"

#include <algorithm>
#include <vector>

#include "ir/plan_storage.h"
#include "analysis/plan_timeline.h"

namespace cleave {
namespace {

// Sets the memory split of `report` to the bytes live at the peak of `program`.
void splitMemoryAtPeak(const planpb::RankPlan& rank, const planpb::Program& program, RankReport& report) {
  // 1. A storage holds gradients when any buffer in it is one (an all-reduce may write the
  //    gradient in place over a partial sum that has another name).
  std::vector<bool> holds_gradient(rank.buffers_size(), false);
  for (int32_t id = 0; id < rank.buffers_size(); ++id)
    if (rank.buffers(id).kind() == planpb::BUFFER_GRADIENT) holds_gradient[storageRoot(rank, id)] = true;

  // 2. Persistent storages are live throughout; the others change the live sums at their ends.
  const int64_t end = programEndTime(program);
  std::vector<int64_t> grad_change(end + 2, 0), activation_change(end + 2, 0);
  for (const StorageLifetime& lifetime : programLifetimes(rank, program)) {
    const planpb::Buffer& buffer = rank.buffers(lifetime.root);
    const int64_t bytes = std::max<int64_t>(bufferBytes(buffer), 0);
    switch (buffer.kind()) {
      case planpb::BUFFER_PARAM: report.param_bytes += bytes; break;
      case planpb::BUFFER_OPTIMIZER_STATE: report.optimizer_state_bytes += bytes; break;
      default: {
        auto& change = holds_gradient[lifetime.root] ? grad_change : activation_change;
        change[lifetime.first] += bytes;
        change[lifetime.last + 1] -= bytes;
      }
    }
  }
  // 3. Sweep the program's times; keep the split at the first time the live sum is largest.
  int64_t grads = 0, activations = 0, peak = -1;
  for (int64_t time = 0; time <= end; ++time) {
    grads += grad_change[time];
    activations += activation_change[time];
    if (grads + activations > peak) {
      peak = grads + activations;
      report.grad_bytes = grads;
      report.activation_bytes = activations;
    }
  }
}

}  // namespace

double RankReport::commBytes() const {
  double total = 0;
  for (double bytes : comm_bytes_by_kind) total += bytes;
  return total;
}

RankReport reportRank(const planpb::RankPlan& rank, std::string_view program_name) {
  RankReport report;
  report.rank = rank.rank();
  report.stage = rank.stage();
  report.dp_index = rank.dp_index();
  report.tp_index = rank.tp_index();
  for (const auto& program : rank.programs()) {
    report.instructions += program.instructions_size();
    report.peak_memory_bytes = std::max(report.peak_memory_bytes, program.peak_bytes());
  }
  const planpb::Program* program = findProgram(rank, program_name);
  if (!program) {
    for (int32_t id = 0; id < rank.buffers_size(); ++id) {
      const planpb::Buffer& buffer = rank.buffers(id);
      if (buffer.has_alias_of()) continue;
      int64_t bytes = std::max<int64_t>(bufferBytes(buffer), 0);
      if (buffer.kind() == planpb::BUFFER_PARAM) report.param_bytes += bytes;
      if (buffer.kind() == planpb::BUFFER_OPTIMIZER_STATE) report.optimizer_state_bytes += bytes;
    }
    return report;
  }
  splitMemoryAtPeak(rank, *program, report);
  for (const planpb::Instruction& instruction : program->instructions()) {
    std::optional<CommKind> kind = commKindOf(instruction.kind());
    if (!kind) continue;
    double full_bytes = static_cast<double>(commFullBytes(rank, instruction));
    report.comm_bytes_by_kind[static_cast<int>(*kind)] += commBytesPerRank(*kind, instruction.group_size(), full_bytes);
  }
  return report;
}

std::vector<WeightLayout> weightLayouts(const planpb::RankPlan& rank) {
  std::vector<WeightLayout> layouts;
  for (const auto& param : rank.parameters()) {
    const planpb::Buffer& buffer = rank.buffers(param.buffer());
    if (buffer.kind() != planpb::BUFFER_PARAM) continue;
    WeightLayout layout;
    layout.name = param.name();
    layout.dtype = parseDType(buffer.type().dtype()).value_or(DType::kF32);
    layout.shape.assign(buffer.type().shape().begin(), buffer.type().shape().end());
    layout.full_shape.assign(param.full_shape().begin(), param.full_shape().end());
    if (layout.full_shape.empty()) layout.full_shape = layout.shape;
    layout.model_shape.assign(param.model_shape().begin(), param.model_shape().end());
    if (layout.model_shape.empty()) layout.model_shape = layout.full_shape;
    for (size_t d = 0; d < layout.shape.size() && d < layout.full_shape.size(); ++d)
      if (layout.shape[d] != layout.full_shape[d]) layout.split_dims.push_back(static_cast<int>(d));
    for (const planpb::ShardStep& step : param.shard_steps())
      if (std::find(layout.split_axes.begin(), layout.split_axes.end(), step.axis()) == layout.split_axes.end())
        layout.split_axes.push_back(step.axis());
    // A plan written before shard steps were recorded: tensor parallelism split it.
    if (!layout.split_dims.empty() && layout.split_axes.empty()) layout.split_axes.push_back("tp");
    layouts.push_back(std::move(layout));
  }
  return layouts;
}

}  // namespace cleave
