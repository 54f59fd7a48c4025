// SPMD plans: validating same_program_as references and deriving a shared rank's programs.
#include "ir/shared_programs.h"

#include <array>
#include <map>
#include <string>
#include <vector>

#include "ir/device_mesh.h"
#include "ir/plan.pb.h"

namespace cleave {
namespace {

// A rank's place on the mesh: dp index, tp index, pipeline stage.
using Coord = std::array<int, 3>;

Coord coordOf(const planpb::RankPlan& rank) { return {rank.dp_index(), rank.tp_index(), rank.stage()}; }

// The index of mesh axis `axis` in a Coord, or -1.
int axisIndex(const std::string& axis) {
  if (axis == kDataAxis) return 0;
  if (axis == kTensorAxis) return 1;
  if (axis == kPipelineAxis) return 2;
  return -1;
}

std::string coordStr(const Coord& c) {
  return "(dp " + std::to_string(c[0]) + ", tp " + std::to_string(c[1]) + ", stage " + std::to_string(c[2]) + ")";
}

// The plan's ranks by number and by coordinates.
class MeshIndex {
 public:
  explicit MeshIndex(const planpb::Plan& plan) : by_number_(plan.devices(), nullptr) {
    for (const planpb::RankPlan& rank : plan.ranks()) {
      if (rank.rank() >= 0 && rank.rank() < plan.devices()) by_number_[rank.rank()] = &rank;
      by_coord_.emplace(coordOf(rank), rank.rank());
    }
  }

  const planpb::RankPlan* rank(int number) const {
    return number >= 0 && number < static_cast<int>(by_number_.size()) ? by_number_[number] : nullptr;
  }

  // The rank at `coord`, or -1.
  int rankAt(const Coord& coord) const {
    auto it = by_coord_.find(coord);
    return it == by_coord_.end() ? -1 : it->second;
  }

 private:
  std::vector<const planpb::RankPlan*> by_number_;
  std::map<Coord, int> by_coord_;
};

// Moves the ranks `members` (a collective group, or one peer) of the template at `from` to the
// rank at `to`: along an axis the members span, or where a member lies off the template's
// coordinate, the member keeps its coordinate; elsewhere it takes `to`'s.
template <typename Members>
Status moveRanks(const MeshIndex& mesh, const Coord& from, const Coord& to, Members& members) {
  std::vector<Coord> coords;
  for (int member : members) {
    const planpb::RankPlan* rank = mesh.rank(member);
    if (!rank) return Status::badInput("names rank " + std::to_string(member) + ", which the plan lacks");
    coords.push_back(coordOf(*rank));
  }
  std::array<bool, 3> spans{false, false, false};
  for (const Coord& c : coords)
    for (int axis = 0; axis < 3; ++axis) spans[axis] = spans[axis] || c[axis] != coords.front()[axis];
  for (size_t k = 0; k < coords.size(); ++k) {
    Coord moved = coords[k];
    for (int axis = 0; axis < 3; ++axis)
      if (!spans[axis] && moved[axis] == from[axis]) moved[axis] = to[axis];
    int number = mesh.rankAt(moved);
    if (number < 0) return Status::badInput("has no counterpart of rank " + std::to_string(members[k]) + " at " +
                                            coordStr(moved));
    members[k] = number;
  }
  return Status::ok();
}

// A slice of this rank's block (Instruction.shard_axis): its starts and ends along its one axis
// move by the difference in the axis's index times the block's size.
Status moveBlock(planpb::Instruction& instruction, const Coord& from, const Coord& to) {
  const int axis = axisIndex(instruction.shard_axis());
  auto& attrs = *instruction.mutable_attrs();
  auto starts = attrs.find("starts"), ends = attrs.find("ends");
  if (axis < 0 || instruction.kind() != planpb::KERNEL || instruction.op() != "slice" || starts == attrs.end() ||
      ends == attrs.end() || starts->second.ints().values_size() != 1 || ends->second.ints().values_size() != 1)
    return Status::badInput("a block over axis '" + instruction.shard_axis() +
                            "' must be a slice along one axis with starts and ends");
  const int64_t start = starts->second.ints().values(0), block = ends->second.ints().values(0) - start;
  const int64_t moved = start + (to[axis] - from[axis]) * block;
  starts->second.mutable_ints()->set_values(0, moved);
  ends->second.mutable_ints()->set_values(0, moved + block);
  return Status::ok();
}

Expected<planpb::RankPlan> derive(const MeshIndex& mesh, const planpb::RankPlan& rank) {
  if (!isSharedRank(rank)) return rank;
  const std::string where = "rank " + std::to_string(rank.rank()) + ", ";
  const planpb::RankPlan* shared = mesh.rank(rank.same_program_as());
  if (!shared) return Status::badInput(where + "names rank " + std::to_string(rank.same_program_as()) +
                                       "'s programs, which the plan lacks");
  const Coord from = coordOf(*shared), to = coordOf(rank);
  planpb::RankPlan derived = *shared;
  derived.set_rank(rank.rank());
  derived.set_dp_index(rank.dp_index());
  derived.set_tp_index(rank.tp_index());
  derived.set_stage(rank.stage());
  derived.set_same_program_as(rank.same_program_as());
  // Blocks of split tensors move along the axes whose index differs.
  for (planpb::Parameter& param : *derived.mutable_parameters()) {
    for (const planpb::ShardStep& step : param.shard_steps()) {
      const int axis = axisIndex(step.axis());
      if (axis < 0 || step.dim() < 0 || step.dim() >= param.shard_offset_size())
        return Status::badInput(where + "parameter '" + param.name() + "': a shard step along dim " +
                                std::to_string(step.dim()) + " over axis '" + step.axis() + "' does not fit it");
      param.set_shard_offset(step.dim(), param.shard_offset(step.dim()) + (to[axis] - from[axis]) * step.step());
    }
  }
  for (planpb::Program& program : *derived.mutable_programs()) {
    for (int i = 0; i < program.instructions_size(); ++i) {
      planpb::Instruction& instruction = *program.mutable_instructions(i);
      Status moved = Status::ok();
      if (instruction.group_size() > 0) moved = moveRanks(mesh, from, to, *instruction.mutable_group());
      if (moved && !instruction.shard_axis().empty()) moved = moveBlock(instruction, from, to);
      if (moved && (instruction.kind() == planpb::SEND || instruction.kind() == planpb::RECV)) {
        std::array<int, 1> peer{instruction.peer()};
        moved = moveRanks(mesh, from, to, peer);
        instruction.set_peer(peer[0]);
      }
      if (!moved)
        return moved.withContext(where + "program '" + program.name() + "', instruction " + std::to_string(i) + ": ");
    }
    for (auto* list : {program.mutable_inputs(), program.mutable_outputs()}) {
      for (planpb::NamedBuffer& named : *list) {
        if (!named.batch_split()) continue;
        const auto& shape = derived.buffers(named.buffer()).type().shape();
        const int64_t rows = shape.empty() ? 1 : shape[0];
        if (named.batch_offset() != from[0] * rows)
          return Status::badInput(where + "program '" + program.name() + "': batch-split '" + named.name() +
                                  "' of rank " + std::to_string(shared->rank()) + " starts at row " +
                                  std::to_string(named.batch_offset()) + ", not at dp_index * rows = " +
                                  std::to_string(from[0] * rows));
        named.set_batch_offset(to[0] * rows);
      }
    }
  }
  return derived;
}

}  // namespace

bool isSharedRank(const planpb::RankPlan& rank) { return rank.has_same_program_as() && rank.programs_size() == 0; }

Status validateSharedPrograms(const planpb::Plan& plan) {
  bool any = false;
  for (const planpb::RankPlan& rank : plan.ranks()) any = any || rank.has_same_program_as();
  if (!any) return Status::ok();
  const planpb::Strategy& strategy = plan.strategy();
  std::map<Coord, int> seen;
  for (const planpb::RankPlan& rank : plan.ranks()) {
    const Coord c = coordOf(rank);
    const std::string where = "rank " + std::to_string(rank.rank()) + ": ";
    if (c[0] < 0 || c[0] >= strategy.dp() || c[1] < 0 || c[1] >= strategy.tp() || c[2] < 0 || c[2] >= strategy.pp())
      return Status::badInput(where + "coordinates " + coordStr(c) + " lie outside the dp " +
                              std::to_string(strategy.dp()) + " x tp " + std::to_string(strategy.tp()) + " x pp " +
                              std::to_string(strategy.pp()) + " mesh");
    auto [other, fresh] = seen.emplace(c, rank.rank());
    if (!fresh) return Status::badInput(where + "has the coordinates " + coordStr(c) + " of rank " +
                                        std::to_string(other->second) + " too");
  }
  const MeshIndex mesh(plan);
  for (const planpb::RankPlan& rank : plan.ranks()) {
    if (!rank.has_same_program_as()) continue;
    const std::string where = "rank " + std::to_string(rank.rank()) + ": ";
    const int named = rank.same_program_as();
    const planpb::RankPlan* shared = mesh.rank(named);
    if (!shared || named == rank.rank())
      return Status::badInput(where + "same_program_as names rank " + std::to_string(named) +
                              (named == rank.rank() ? ", itself" : ", which the plan lacks"));
    if (shared->has_same_program_as())
      return Status::badInput(where + "same_program_as names rank " + std::to_string(named) +
                              ", which runs another rank's programs itself");
    if (shared->stage() != rank.stage())
      return Status::badInput(where + "runs the programs of rank " + std::to_string(named) + " at " +
                              coordStr(coordOf(*shared)) + ", another stage than its own " + coordStr(coordOf(rank)));
    if (rank.programs_size() == 0 && (rank.buffers_size() > 0 || rank.parameters_size() > 0))
      return Status::badInput(where + "holds buffers or parameters but runs the programs of rank " +
                              std::to_string(named));
  }
  return Status::ok();
}

const planpb::RankPlan& rankRunning(const planpb::Plan& plan, const planpb::RankPlan& rank) {
  if (!isSharedRank(rank)) return rank;
  for (const planpb::RankPlan& other : plan.ranks())
    if (other.rank() == rank.same_program_as()) return other;
  return rank;
}

Expected<planpb::RankPlan> derivedRankPlan(const planpb::Plan& plan, int rank) {
  const MeshIndex mesh(plan);
  const planpb::RankPlan* found = mesh.rank(rank);
  if (!found) return Status::badInput("the plan has no rank " + std::to_string(rank));
  return derive(mesh, *found);
}

Status expandSharedPrograms(planpb::Plan& plan) {
  std::vector<std::pair<int, planpb::RankPlan>> derived;
  {
    const MeshIndex mesh(plan);
    for (int index = 0; index < plan.ranks_size(); ++index) {
      if (!isSharedRank(plan.ranks(index))) continue;
      CLEAVE_ASSIGN_OR_RETURN(planpb::RankPlan rank, derive(mesh, plan.ranks(index)));
      derived.emplace_back(index, std::move(rank));
    }
  }
  for (auto& [index, rank] : derived) *plan.mutable_ranks(index) = std::move(rank);
  return Status::ok();
}

}  // namespace cleave
