// Interleaved 1F1B's plans: merging the ranks of pp x V stages into pp ranks of V chunks each.
#include "passes/lowering/virtual_stage_merge.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "passes/lowering/pipeline_schedule.h"
#include "passes/training/optimizer.h"

namespace cleave {
namespace {

// Where chunk j's buffers go in the merged rank.
struct ChunkPlacement {
  int32_t first_id = 0;           // its buffer ids start here
  int64_t persistent_start = 0;   // its persistent bytes start here
  int64_t transient_start = 0;    // its other bytes start here
  int64_t persistent_bytes = 0;   // its persistent bytes (offsets below this are persistent)
};

// One chunk's "train" instructions cut at its steps: those before the first step, those of each
// (microbatch, backward) step in order, and those after the last.
struct ChunkSteps {
  std::vector<planpb::Instruction> before, after;
  std::map<std::pair<int, bool>, std::vector<planpb::Instruction>> of_step;
};

Expected<ChunkSteps> cutAtSteps(std::vector<planpb::Instruction> instructions, const std::string& where) {
  ChunkSteps cut;
  int first = -1, last = -1;
  for (int i = 0; i < static_cast<int>(instructions.size()); ++i)
    if (instructions[i].microbatch() >= 0) {
      if (first < 0) first = i;
      last = i;
    }
  if (first < 0) {
    cut.before = std::move(instructions);
    return cut;
  }
  std::pair<int, bool> current{-1, false};
  std::set<std::pair<int, bool>> done;
  for (int i = 0; i < static_cast<int>(instructions.size()); ++i) {
    planpb::Instruction& instruction = instructions[i];
    if (i < first) {
      cut.before.push_back(std::move(instruction));
      continue;
    }
    if (i > last) {
      cut.after.push_back(std::move(instruction));
      continue;
    }
    if (instruction.microbatch() >= 0) {
      std::pair<int, bool> key{instruction.microbatch(), instruction.backward()};
      if (key != current) {
        if (!done.insert(key).second)
          return Status::badInput(where + "the " + (key.second ? "backward" : "forward") + " step of microbatch " +
                                  std::to_string(key.first) + " is not contiguous (instruction " + std::to_string(i) +
                                  ")");
        current = key;
      }
    }
    cut.of_step[current].push_back(std::move(instruction));
  }
  return cut;
}

}  // namespace

Expected<planpb::Plan> mergeVirtualStages(const planpb::Plan& virtual_plan, int num_stages, int num_chunks) {
  const int total = virtual_plan.ranks_size();
  if (num_stages < 1 || num_chunks < 1 || total % num_chunks != 0)
    return Status::badInput("virtual stages: a plan of " + std::to_string(total) + " ranks does not split into " +
                            std::to_string(num_chunks) + " chunks");
  const int ranks = total / num_chunks;  // pp x dp x tp
  std::vector<const planpb::RankPlan*> by_number(total, nullptr);
  for (const planpb::RankPlan& rank : virtual_plan.ranks()) {
    if (rank.rank() < 0 || rank.rank() >= total || rank.has_same_program_as())
      return Status::badInput("virtual stages: rank " + std::to_string(rank.rank()) +
                              " is out of range or shares another's programs");
    by_number[rank.rank()] = &rank;
  }
  for (int r = 0; r < total; ++r)
    if (!by_number[r]) return Status::badInput("virtual stages: the plan has no rank " + std::to_string(r));
  const int microbatches = virtual_plan.strategy().microbatches();

  planpb::Plan merged = virtual_plan;
  merged.clear_ranks();
  merged.set_devices(ranks);
  merged.mutable_strategy()->set_pp(num_stages);
  merged.mutable_strategy()->set_virtual_stages(num_chunks);
  for (int n = 0; n < ranks; ++n) {
    planpb::RankPlan& out = *merged.add_ranks();
    std::vector<const planpb::RankPlan*> chunks;
    for (int j = 0; j < num_chunks; ++j) chunks.push_back(by_number[j * ranks + n]);
    out.set_rank(n);
    out.set_stage(chunks[0]->stage());
    out.set_dp_index(chunks[0]->dp_index());
    out.set_tp_index(chunks[0]->tp_index());
    auto chunkWhere = [&](int j) {
      return "rank " + std::to_string(n) + " (virtual stage " + std::to_string(chunks[j]->stage()) + "): ";
    };

    // 1. Buffers: persistent bytes of every chunk first, then their other bytes.
    std::vector<ChunkPlacement> placement(num_chunks);
    int64_t persistent = 0, transient = 0;
    int32_t ids = 0;
    for (int j = 0; j < num_chunks; ++j) persistent += chunks[j]->persistent_bytes();
    int64_t persistent_start = 0;
    for (int j = 0; j < num_chunks; ++j) {
      placement[j] = {ids, persistent_start, persistent + transient, chunks[j]->persistent_bytes()};
      ids += chunks[j]->buffers_size();
      persistent_start += chunks[j]->persistent_bytes();
      transient += chunks[j]->arena_bytes() - chunks[j]->persistent_bytes();
    }
    out.set_arena_bytes(persistent + transient);
    out.set_persistent_bytes(persistent);
    std::map<std::string, int> name_uses;
    std::set<std::string> parameter_names;
    int32_t step_counter = -1;             // the first chunk's step counter
    std::vector<int32_t> copied_counters;  // the other chunks'
    for (int j = 0; j < num_chunks; ++j) {
      const ChunkPlacement& place = placement[j];
      for (const planpb::Buffer& buffer : chunks[j]->buffers()) {
        planpb::Buffer& copy = *out.add_buffers();
        copy = buffer;
        copy.set_id(buffer.id() + place.first_id);
        copy.set_offset(buffer.offset() < place.persistent_bytes
                            ? place.persistent_start + buffer.offset()
                            : place.transient_start + buffer.offset() - place.persistent_bytes);
        if (buffer.has_alias_of()) copy.set_alias_of(buffer.alias_of() + place.first_id);
        if (name_uses[buffer.name()]++ > 0) copy.set_name(buffer.name() + "@" + std::to_string(chunks[j]->stage()));
      }
      for (const planpb::Parameter& parameter : chunks[j]->parameters()) {
        // Every chunk with parameters counts the steps in its own counter. The first such chunk's is
        // the parameter (the one a checkpoint keeps); the others' take its value at the start of
        // every step.
        if (parameter.name() == kStepParamName) {
          if (step_counter < 0) {
            step_counter = parameter.buffer() + place.first_id;
          } else {
            copied_counters.push_back(parameter.buffer() + place.first_id);
            continue;
          }
        }
        planpb::Parameter& copy = *out.add_parameters();
        copy = parameter;
        copy.set_buffer(parameter.buffer() + place.first_id);
        if (!parameter_names.insert(copy.name()).second)
          return Status::badInput(chunkWhere(j) + "parameter '" + parameter.name() +
                                  "' is used by two virtual stages of this rank; interleaving cannot place a "
                                  "weight shared by virtual stages " + std::to_string(num_stages) + " apart");
      }
    }

    // 2. Programs: instructions moved to the merged buffers and ranks.
    auto moved = [&](const planpb::Instruction& instruction, int j, const std::string& where)
        -> Expected<planpb::Instruction> {
      planpb::Instruction copy = instruction;
      for (auto* ids_of : {copy.mutable_operands(), copy.mutable_results()})
        for (int32_t& id : *ids_of)
          if (id >= 0) id += placement[j].first_id;
      const std::string what = where + (instruction.source().empty() ? "" : "(" + instruction.source() + ") ");
      if (copy.kind() == planpb::SEND || copy.kind() == planpb::RECV) {
        copy.set_peer(copy.peer() % ranks);
        if (copy.peer() == n)
          return Status::badInput(what + "a message between two virtual stages of this rank (from or to virtual stage " +
                                  std::to_string(by_number[instruction.peer()]->stage()) +
                                  "): a value used " + std::to_string(num_stages) +
                                  " stages after it is computed cannot be interleaved");
      }
      std::set<int32_t> members;
      for (int32_t& member : *copy.mutable_group()) {
        member %= ranks;
        if (!members.insert(member).second)
          return Status::badInput(what + "a collective over the pipeline lands twice on rank " +
                                  std::to_string(member) +
                                  " (a gradient norm or a tied weight summed over the stages): not supported "
                                  "with --virtual-stages");
      }
      return copy;
    };
    std::vector<std::string> program_names;
    for (int j = 0; j < num_chunks; ++j)
      for (const planpb::Program& program : chunks[j]->programs()) {
        bool listed = false;
        for (const std::string& name : program_names) listed = listed || name == program.name();
        if (!listed) program_names.push_back(program.name());
      }
    for (const std::string& name : program_names) {
      planpb::Program& program = *out.add_programs();
      program.set_name(name);
      std::vector<std::vector<planpb::Instruction>> instructions(num_chunks);
      for (int j = 0; j < num_chunks; ++j)
        for (const planpb::Program& source : chunks[j]->programs()) {
          if (source.name() != name) continue;
          const std::string where = chunkWhere(j) + "program '" + name + "': ";
          for (const planpb::Instruction& instruction : source.instructions()) {
            CLEAVE_ASSIGN_OR_RETURN(planpb::Instruction copy, moved(instruction, j, where));
            instructions[j].push_back(std::move(copy));
          }
          for (const planpb::NamedBuffer& input : source.inputs()) {
            planpb::NamedBuffer& copy = *program.add_inputs();
            copy = input;
            copy.set_buffer(input.buffer() + placement[j].first_id);
          }
          for (const planpb::NamedBuffer& output : source.outputs()) {
            planpb::NamedBuffer& copy = *program.add_outputs();
            copy = output;
            copy.set_buffer(output.buffer() + placement[j].first_id);
          }
          program.set_peak_bytes(program.peak_bytes() + source.peak_bytes());
        }
      auto append = [&](std::vector<planpb::Instruction>& list) {
        for (planpb::Instruction& instruction : list) *program.add_instructions() = std::move(instruction);
        list.clear();
      };
      if (name != "train" || !merged.has_training()) {
        for (auto& list : instructions) append(list);
        continue;
      }
      std::vector<ChunkSteps> cut;
      for (int j = 0; j < num_chunks; ++j) {
        CLEAVE_ASSIGN_OR_RETURN(ChunkSteps steps, cutAtSteps(std::move(instructions[j]), chunkWhere(j) + "program 'train': "));
        cut.push_back(std::move(steps));
      }
      for (int32_t counter : copied_counters) {
        planpb::Instruction& copy = *program.add_instructions();
        copy.set_kind(planpb::COPY);
        copy.add_operands(step_counter);
        copy.add_results(counter);
        copy.set_microbatch(-1);
        copy.set_source("virtual stages: the step counter of " + out.buffers(counter).name());
      }
      for (ChunkSteps& chunk : cut) append(chunk.before);
      for (const InterleavedStep& step : interleavedSchedule(out.stage(), num_stages, num_chunks, microbatches)) {
        auto found = cut[step.chunk].of_step.find({step.step.microbatch, step.step.backward});
        if (found == cut[step.chunk].of_step.end()) continue;
        append(found->second);
        cut[step.chunk].of_step.erase(found);
      }
      for (int j = 0; j < num_chunks; ++j)
        if (!cut[j].of_step.empty())
          return Status::badInput(chunkWhere(j) + "program 'train' has a step of microbatch " +
                                  std::to_string(cut[j].of_step.begin()->first.first) +
                                  " that the interleaved schedule of " + std::to_string(microbatches) +
                                  " microbatches does not run");
      for (ChunkSteps& chunk : cut) append(chunk.after);
    }
  }
  return merged;
}

}  // namespace cleave
