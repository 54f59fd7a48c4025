// Hand-built multi-rank plans for the cost model, simulator and inspect tests.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "ir/plan.pb.h"

namespace cleave::plan_testing {

// Builds a plan rank by rank: buffers, then one program's instructions in order.
class PlanBuilder {
 public:
  explicit PlanBuilder(int ranks, const std::string& program = "train") {
    plan.set_format_version(1);
    plan.set_model_name("hand");
    plan.set_devices(ranks);
    for (int r = 0; r < ranks; ++r) {
      planpb::RankPlan* rank = plan.add_ranks();
      rank->set_rank(r);
      rank->add_programs()->set_name(program);
    }
  }

  planpb::RankPlan& rank(int r) { return *plan.mutable_ranks(r); }
  planpb::Program& program(int r) { return *rank(r).mutable_programs(0); }

  // Adds an f32 buffer to rank `r` and returns its id.
  int buffer(int r, const std::string& name, std::vector<int64_t> shape,
             planpb::BufferKind kind = planpb::BUFFER_ACTIVATION) {
    planpb::Buffer* buffer = rank(r).add_buffers();
    buffer->set_id(rank(r).buffers_size() - 1);
    buffer->set_name(name);
    buffer->mutable_type()->set_dtype("f32");
    for (int64_t d : shape) buffer->mutable_type()->add_shape(d);
    buffer->set_kind(kind);
    return buffer->id();
  }

  // Appends a kernel of op `op` on stream 0.
  planpb::Instruction& kernel(int r, const std::string& op, std::initializer_list<int> operands,
                              std::initializer_list<int> results) {
    planpb::Instruction& instruction = append(r, planpb::KERNEL, operands, results, 0);
    instruction.set_op(op);
    return instruction;
  }

  // Appends a collective of `kind` over `group` on stream 1.
  planpb::Instruction& collective(int r, planpb::InstructionKind kind, std::initializer_list<int> operands,
                                  std::initializer_list<int> results, std::initializer_list<int> group) {
    planpb::Instruction& instruction = append(r, kind, operands, results, 1);
    for (int g : group) instruction.add_group(g);
    if (kind == planpb::ALL_REDUCE || kind == planpb::REDUCE_SCATTER) instruction.set_reduce_op("sum");
    return instruction;
  }

  // Appends a send of `operand` to `peer` on stream 1.
  planpb::Instruction& send(int r, int operand, int peer, int tag) {
    planpb::Instruction& instruction = append(r, planpb::SEND, {operand}, {}, 1);
    instruction.set_peer(peer);
    instruction.set_tag(tag);
    return instruction;
  }

  // Appends a recv into `result` from `peer` on stream 1.
  planpb::Instruction& recv(int r, int result, int peer, int tag) {
    planpb::Instruction& instruction = append(r, planpb::RECV, {}, {result}, 1);
    instruction.set_peer(peer);
    instruction.set_tag(tag);
    return instruction;
  }

  planpb::Plan plan;

 private:
  planpb::Instruction& append(int r, planpb::InstructionKind kind, std::initializer_list<int> operands,
                              std::initializer_list<int> results, int stream) {
    planpb::Instruction* instruction = program(r).add_instructions();
    instruction->set_kind(kind);
    for (int id : operands) instruction->add_operands(id);
    for (int id : results) instruction->add_results(id);
    instruction->set_stream(stream);
    instruction->set_microbatch(-1);
    return *instruction;
  }
};

}  // namespace cleave::plan_testing
