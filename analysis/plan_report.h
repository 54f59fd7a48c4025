// Per-rank figures of a plan for inspect: instructions, memory at the peak by kind, bytes moved per comm kind.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/plan.pb.h"
#include "analysis/cost_model.h"

namespace cleave {

// What one rank of a plan holds and moves, as `cleave inspect` shows it.
struct RankReport {
  int32_t rank = 0;
  int32_t stage = 0;
  int32_t dp_index = 0;
  int32_t tp_index = 0;
  int64_t instructions = 0;       // in all programs
  int64_t peak_memory_bytes = 0;  // the largest planned arena high-water mark of any program
  // Bytes live at the reported program's peak (the moment the most non-persistent bytes are live),
  // by what they hold (a storage holds gradients when any buffer in it is one). Parameters and
  // optimizer state are always live. Activations include the program's inputs and outputs.
  // Sizes are the tensors' own (before alignment and reuse).
  int64_t param_bytes = 0;
  int64_t grad_bytes = 0;
  int64_t optimizer_state_bytes = 0;
  int64_t activation_bytes = 0;
  // Bytes this rank moves in one run of the reported program, per CommKind (indexed by its value):
  // collectives as their algorithm moves them (commBytesPerRank), sends and recvs in full.
  std::array<double, kNumCommKinds> comm_bytes_by_kind{};

  // All bytes moved, every kind together.
  double commBytes() const;
};

// The figures of `rank` for program `program` (memory split and communication; a rank without
// that program reports its persistent bytes only).
RankReport reportRank(const planpb::RankPlan& rank, std::string_view program);

// How a rank holds one model weight: its block's shape, the whole tensor's, and the dims split over
// the tensor-parallel devices (the only axis that splits weights; empty: whole on this rank).
struct WeightLayout {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<int64_t> full_shape;
  std::vector<int> split_dims;
  std::vector<std::string> split_axes;  // the mesh axes the weight is split over ("tp", "dp": ZeRO 3), in order
  std::vector<int64_t> model_shape;     // the model's shape of the tensor, which full_shape reshapes or groups (Param::model)
};

// The model weights (not the optimizer state) `rank` holds, in the plan's order.
std::vector<WeightLayout> weightLayouts(const planpb::RankPlan& rank);

}  // namespace cleave
