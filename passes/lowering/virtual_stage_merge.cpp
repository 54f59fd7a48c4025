// Interleaved 1F1B's plans: merging the ranks of pp x V stages into pp ranks of V chunks each.
#include "passes/lowering/virtual_stage_merge.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ir/shared_programs.h"
#include "passes/lowering/memory_planner.h"
#include "passes/lowering/pipeline_schedule.h"
#include "passes/training/gradient_clipping.h"
#include "passes/training/optimizer.h"

namespace cleave {
namespace {

// "(model.cir:12:3) " for an instruction that came from a model node, else nothing: what error
// messages name it by.
std::string sourceOf(const planpb::Instruction& instruction) {
  return instruction.source().empty() ? "" : "(" + instruction.source() + ") ";
}

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

// The collectives over the pipeline that `parts` (one per virtual stage of a rank, alike: an
// all-reduce summing one buffer) take part in, as one all-reduce of the merged ranks: the parts'
// operands summed into the first part's result, all-reduced over the group's distinct ranks, and
// copied to the other parts' results.
Expected<std::vector<planpb::Instruction>> combinedCollective(const std::vector<planpb::Instruction>& parts,
                                                             const std::string& where) {
  const planpb::Instruction& first = parts[0];
  std::multiset<int32_t> group(first.group().begin(), first.group().end());
  for (const planpb::Instruction& part : parts)
    if (part.kind() != planpb::ALL_REDUCE || part.reduce_op() != "sum" || part.operands_size() != 1 ||
        part.results_size() != 1 || std::multiset<int32_t>(part.group().begin(), part.group().end()) != group)
      return Status::badInput(where + sourceOf(part) +
                              "a collective over the pipeline in which two virtual stages of this rank take part "
                              "that is not the same all-reduce sum of one buffer in each: not supported with "
                              "--virtual-stages");
  const int32_t total = first.results(0);
  auto instruction = [&](planpb::InstructionKind kind, std::vector<int32_t> operands, int32_t result) {
    planpb::Instruction made;
    made.set_kind(kind);
    for (int32_t id : operands) made.add_operands(id);
    made.add_results(result);
    made.set_microbatch(-1);
    made.set_source(first.source());
    return made;
  };
  std::vector<planpb::Instruction> out;
  if (first.operands(0) != total) out.push_back(instruction(planpb::COPY, {first.operands(0)}, total));
  for (size_t j = 1; j < parts.size(); ++j) {
    planpb::Instruction sum = instruction(planpb::KERNEL, {total, parts[j].operands(0)}, total);
    sum.set_op("add");
    out.push_back(std::move(sum));
  }
  planpb::Instruction reduce = first;
  reduce.set_operands(0, total);
  reduce.clear_group();
  std::set<int32_t> seen;
  for (int32_t member : first.group())
    if (seen.insert(member).second) reduce.add_group(member);
  out.push_back(std::move(reduce));
  for (size_t j = 1; j < parts.size(); ++j) out.push_back(instruction(planpb::COPY, {total}, parts[j].results(0)));
  return out;
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
    if (rank.rank() < 0 || rank.rank() >= total)
      return Status::badInput("virtual stages: rank " + std::to_string(rank.rank()) + " is out of range");
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
  std::vector<planpb::RankPlan> derived;  // chunks derived from shared programs (see below)
  derived.reserve(static_cast<size_t>(total));
  for (int n = 0; n < ranks; ++n) {
    planpb::RankPlan& out = *merged.add_ranks();
    std::vector<const planpb::RankPlan*> chunks;
    for (int j = 0; j < num_chunks; ++j) chunks.push_back(by_number[j * ranks + n]);
    out.set_rank(n);
    out.set_stage(chunks[0]->stage());
    out.set_dp_index(chunks[0]->dp_index());
    out.set_tp_index(chunks[0]->tp_index());
    // A rank whose stages all run their first rank's programs (SPMD) runs the merged first rank's:
    // the first rank of virtual stage j x P + s merges into the first rank of stage s, and what a
    // shared rank derives from it (groups, peers, rows, blocks) follows its own coordinates alike.
    bool all_shared = true;
    for (const planpb::RankPlan* chunk : chunks)
      all_shared = all_shared && chunk->has_same_program_as() &&
                   chunk->same_program_as() % ranks == chunks[0]->same_program_as() % ranks;
    if (all_shared) {
      out.set_same_program_as(chunks[0]->same_program_as() % ranks);
      continue;
    }
    for (const planpb::RankPlan*& chunk : chunks) {
      if (!chunk->has_same_program_as()) continue;
      CLEAVE_ASSIGN_OR_RETURN(planpb::RankPlan own, derivedRankPlan(virtual_plan, chunk->rank()));
      derived.push_back(std::move(own));
      chunk = &derived.back();
    }
    auto chunkWhere = [&](int j) {
      return "rank " + std::to_string(n) + " (virtual stage " + std::to_string(chunks[j]->stage()) + "): ";
    };

    // 1. Buffers, chunk after chunk (their offsets are planned again once the programs are merged).
    std::vector<int32_t> first_id(num_chunks, 0);  // where chunk j's buffer ids start
    for (int j = 1; j < num_chunks; ++j) first_id[j] = first_id[j - 1] + chunks[j - 1]->buffers_size();
    std::map<std::string, int> name_uses;
    std::set<std::string> parameter_names;
    int32_t step_counter = -1;             // the first chunk's step counter
    std::vector<int32_t> copied_counters;  // the other chunks'
    for (int j = 0; j < num_chunks; ++j) {
      for (const planpb::Buffer& buffer : chunks[j]->buffers()) {
        planpb::Buffer& copy = *out.add_buffers();
        copy = buffer;
        copy.set_id(buffer.id() + first_id[j]);
        if (buffer.has_alias_of()) copy.set_alias_of(buffer.alias_of() + first_id[j]);
        if (name_uses[buffer.name()]++ > 0) copy.set_name(buffer.name() + "@" + std::to_string(chunks[j]->stage()));
      }
      for (const planpb::Parameter& parameter : chunks[j]->parameters()) {
        // Every chunk with parameters counts the steps in its own counter. The first such chunk's is
        // the parameter (the one a checkpoint keeps); the others' take its value at the start of
        // every step.
        if (parameter.name() == kStepParamName) {
          if (step_counter < 0) {
            step_counter = parameter.buffer() + first_id[j];
          } else {
            copied_counters.push_back(parameter.buffer() + first_id[j]);
            continue;
          }
        }
        planpb::Parameter& copy = *out.add_parameters();
        copy = parameter;
        copy.set_buffer(parameter.buffer() + first_id[j]);
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
          if (id >= 0) id += first_id[j];
      if (copy.kind() == planpb::SEND || copy.kind() == planpb::RECV) {
        copy.set_peer(copy.peer() % ranks);
        if (copy.peer() == n)
          return Status::badInput(where + sourceOf(instruction) +
                                  "a message between two virtual stages of this rank (from or to virtual stage " +
                                  std::to_string(by_number[instruction.peer()]->stage()) +
                                  "): a value used " + std::to_string(num_stages) +
                                  " stages after it is computed cannot be interleaved");
      }
      for (int32_t& member : *copy.mutable_group()) member %= ranks;
      return copy;
    };
    // A collective over the pipeline (a gradient norm's sum) that this rank's stages each take part
    // in is one collective of the merged ranks after the last step (combinedCollective), an error
    // anywhere else.
    auto repeatsMember = [](const planpb::Instruction& instruction) {
      if (instruction.group_size() < 2) return false;
      std::set<int32_t> members(instruction.group().begin(), instruction.group().end());
      return static_cast<int>(members.size()) < instruction.group_size();
    };
    auto notCombined = [&](const planpb::Instruction& instruction, const std::string& where) {
      return Status::badInput(where + sourceOf(instruction) +
                              "a collective over the pipeline in which two virtual stages of this rank take part, "
                              "outside the end of a training step: not supported with --virtual-stages");
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
            if (repeatsMember(copy) && (name != "train" || !merged.has_training())) return notCombined(copy, where);
            instructions[j].push_back(std::move(copy));
          }
          for (const planpb::NamedBuffer& input : source.inputs()) {
            planpb::NamedBuffer& copy = *program.add_inputs();
            copy = input;
            copy.set_buffer(input.buffer() + first_id[j]);
          }
          for (const planpb::NamedBuffer& output : source.outputs()) {
            // Every stage's gradient norm is the whole model's, the same once combined: one output.
            bool listed = false;
            for (const planpb::NamedBuffer& earlier : program.outputs()) listed = listed || earlier.name() == output.name();
            if (listed && output.name() == kGradNormOutput) continue;
            planpb::NamedBuffer& copy = *program.add_outputs();
            copy = output;
            copy.set_buffer(output.buffer() + first_id[j]);
          }
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
      for (int j = 0; j < num_chunks; ++j) {
        for (const planpb::Instruction& instruction : cut[j].before)
          if (repeatsMember(instruction)) return notCombined(instruction, chunkWhere(j) + "program 'train': ");
        for (const auto& [step, list] : cut[j].of_step)
          for (const planpb::Instruction& instruction : list)
            if (repeatsMember(instruction)) return notCombined(instruction, chunkWhere(j) + "program 'train': ");
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
      // After the last step: each stage's instructions up to its k-th collective over the pipeline,
      // then the k-th collectives of all stages as one.
      std::vector<std::vector<std::vector<planpb::Instruction>>> segments(num_chunks);
      std::vector<std::vector<planpb::Instruction>> collectives(num_chunks);
      for (int j = 0; j < num_chunks; ++j) {
        segments[j].emplace_back();
        for (planpb::Instruction& instruction : cut[j].after) {
          if (!repeatsMember(instruction)) {
            segments[j].back().push_back(std::move(instruction));
            continue;
          }
          collectives[j].push_back(std::move(instruction));
          segments[j].emplace_back();
        }
        if (collectives[j].size() != collectives[0].size())
          return Status::badInput(chunkWhere(j) + "program 'train' has " + std::to_string(collectives[j].size()) +
                                  " collectives over the pipeline after its last step, virtual stage " +
                                  std::to_string(chunks[0]->stage()) + " " + std::to_string(collectives[0].size()));
      }
      for (size_t k = 0; k < segments[0].size(); ++k) {
        for (int j = 0; j < num_chunks; ++j) append(segments[j][k]);
        if (k == collectives[0].size()) break;
        std::vector<planpb::Instruction> parts;
        for (int j = 0; j < num_chunks; ++j) parts.push_back(std::move(collectives[j][k]));
        CLEAVE_ASSIGN_OR_RETURN(std::vector<planpb::Instruction> one,
                                combinedCollective(parts, chunkWhere(0) + "program 'train': "));
        append(one);
      }
    }
    // 3. Offsets for the merged order: the stages' temporaries share bytes where their lifetimes
    //    do not meet.
    CLEAVE_TRY(planMemory(out).withContext(chunkWhere(0)));
  }
  return merged;
}

}  // namespace cleave
