// Calibration measurements: timing CPU kernels on zeros and a hand-built two-rank plan on a local rank group.
#include "runtime/exec/calibration.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "ir/plan.h"
#include "runtime/device/kernel.h"
#include "runtime/exec/rank_group.h"

namespace cleave::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The seconds of the fastest run of `plan`'s program on a local rank group (one core per rank),
// over runs filling about `budget` seconds (at least 5).
Expected<double> runSeconds(const planpb::Plan& plan, double budget) {
  CLEAVE_TRY(validatePlan(plan));
  RankGroupOptions options;
  options.threads = plan.ranks_size();
  options.timeout_seconds = 60;
  CLEAVE_ASSIGN_OR_RETURN(std::unique_ptr<RankGroup> group, RankGroup::create(plan, options));
  CLEAVE_TRY(group->run("train"));  // warm up
  double fastest = std::numeric_limits<double>::infinity();
  const Clock::time_point start = Clock::now();
  for (int runs = 0; runs < 5 || (secondsSince(start) < budget && runs < 100000); ++runs) {
    const Clock::time_point begin = Clock::now();
    CLEAVE_TRY(group->run("train"));
    fastest = std::min(fastest, secondsSince(begin));
  }
  return fastest;
}

}  // namespace

Expected<KernelInstance> KernelInstance::of(OpId op, std::vector<TensorType> operands, AttrMap attrs) {
  CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorType> results, inferResultTypes(opDef(op), operands, attrs));
  return KernelInstance{op, std::move(operands), std::move(results), std::move(attrs)};
}

std::string KernelInstance::signature() const {
  std::string text(opName(op));
  for (const TensorType& type : operands) text += " " + type.str();
  text += " ->";
  for (const TensorType& type : results) text += " " + type.str();
  for (const auto& [name, value] : attrs) text += " " + name;
  return text;
}

Status collectCpuKernels(const planpb::RankPlan& rank, std::string_view program, std::vector<CountedKernel>& kernels) {
  const planpb::Program* found = nullptr;
  for (const planpb::Program& candidate : rank.programs())
    if (candidate.name() == program) found = &candidate;
  if (!found) return Status::badInput("the plan has no " + std::string(program) + " program");
  auto typesOf = [&](const google::protobuf::RepeatedField<int32_t>& ids) -> Expected<std::vector<TensorType>> {
    std::vector<TensorType> types;
    for (int32_t id : ids) {
      CLEAVE_ASSIGN_OR_RETURN(TensorType type, fromProto(rank.buffers(id).type()));
      types.push_back(std::move(type));
    }
    return types;
  };
  std::map<std::string, size_t> index_of_signature;
  for (size_t i = 0; i < kernels.size(); ++i) index_of_signature.emplace(kernels[i].kernel.signature(), i);
  for (const planpb::Instruction& instruction : found->instructions()) {
    if (instruction.kind() != planpb::KERNEL) continue;
    std::optional<OpId> op = lookupOp(instruction.op());
    if (!op || !findCpuKernel(*op)) continue;
    KernelInstance kernel{*op, {}, {}, {}};
    CLEAVE_ASSIGN_OR_RETURN(kernel.operands, typesOf(instruction.operands()));
    CLEAVE_ASSIGN_OR_RETURN(kernel.results, typesOf(instruction.results()));
    for (const auto& [name, attr] : instruction.attrs()) {
      CLEAVE_ASSIGN_OR_RETURN(Attribute value, fromProto(attr));
      kernel.attrs.emplace(name, std::move(value));
    }
    auto [at, added] = index_of_signature.try_emplace(kernel.signature(), kernels.size());
    if (added)
      kernels.push_back({std::move(kernel), 1});
    else
      ++kernels[at->second].count;
  }
  return Status::ok();
}

Expected<double> kernelSeconds(const KernelInstance& kernel, int devices, double budget) {
  const CpuKernel run = findCpuKernel(kernel.op);
  if (!run) return Status::internal("calibrate: no CPU kernel for " + std::string(opName(kernel.op)));
  std::vector<double> fastest(devices, std::numeric_limits<double>::infinity());
  std::vector<Status> statuses(devices);
  std::atomic<int> waiting{devices};
  auto work = [&](int device) {
    std::vector<std::vector<double>> storage;
    std::vector<const void*> inputs;
    std::vector<void*> outputs;
    for (const TensorType& type : kernel.operands) storage.emplace_back(static_cast<size_t>(type.bytes() / 8 + 1), 0.0);
    for (const TensorType& type : kernel.results) storage.emplace_back(static_cast<size_t>(type.bytes() / 8 + 1), 0.0);
    for (size_t i = 0; i < kernel.operands.size(); ++i) inputs.push_back(storage[i].data());
    for (size_t i = 0; i < kernel.results.size(); ++i) outputs.push_back(storage[kernel.operands.size() + i].data());
    KernelCall call{OpContext{opDef(kernel.op), kernel.operands, kernel.results, kernel.attrs}, inputs, outputs, 1};
    // Start together, so that every call meets the others.
    --waiting;
    while (waiting.load() > 0) std::this_thread::yield();
    const Clock::time_point start = Clock::now();
    for (int calls = 0; calls < 3 || (secondsSince(start) < budget && calls < 100000); ++calls) {
      const Clock::time_point begin = Clock::now();
      Status status = run(call);
      fastest[device] = std::min(fastest[device], secondsSince(begin));
      if (!status.isOk()) {
        statuses[device] = status;
        return;
      }
    }
  };
  std::vector<std::thread> others;
  for (int device = 1; device < devices; ++device) others.emplace_back(work, device);
  work(0);
  for (std::thread& thread : others) thread.join();
  for (const Status& status : statuses)
    if (!status.isOk()) return status;
  double sum = 0;
  for (double seconds : fastest) sum += seconds;
  return sum / devices;
}

planpb::Plan communicationPlan(bool all_reduce, int count, int64_t floats, bool then_read) {
  planpb::Plan plan;
  plan.set_format_version(kPlanFormatVersion);
  plan.set_producer("cleave calibrate");
  plan.set_model_name("calibrate");
  plan.set_devices(2);
  planpb::Strategy* strategy = plan.mutable_strategy();
  strategy->set_dp(2);
  strategy->set_tp(1);
  strategy->set_pp(1);
  strategy->set_microbatches(1);
  const int64_t bytes = (floats * 4 + 63) / 64 * 64;
  for (int r = 0; r < 2; ++r) {
    planpb::RankPlan* rank = plan.add_ranks();
    rank->set_rank(r);
    rank->set_dp_index(r);
    for (int id = 0; id < 2; ++id) {  // x (the moved buffer, an input) and y (what the kernels write)
      planpb::Buffer* buffer = rank->add_buffers();
      buffer->set_id(id);
      buffer->set_name(id == 0 ? "x" : "y");
      buffer->mutable_type()->set_dtype("f32");
      buffer->mutable_type()->add_shape(floats);
      buffer->set_offset(id * bytes);
      buffer->set_kind(id == 0 ? planpb::BUFFER_INPUT : planpb::BUFFER_ACTIVATION);
    }
    rank->set_arena_bytes(2 * bytes);
    planpb::Program* program = rank->add_programs();
    program->set_name("train");
    program->set_peak_bytes(2 * bytes);
    planpb::NamedBuffer* input = program->add_inputs();
    input->set_name("x");
    input->set_buffer(0);
    auto transfer = [&](planpb::InstructionKind kind, int tag) {
      planpb::Instruction* instruction = program->add_instructions();
      instruction->set_kind(kind);
      instruction->set_stream(1);
      instruction->set_peer(1 - r);
      instruction->set_tag(tag);
      if (kind == planpb::SEND) instruction->add_operands(0);
      else instruction->add_results(0);
    };
    for (int k = 0; k < count; ++k) {
      if (all_reduce) {
        planpb::Instruction* instruction = program->add_instructions();
        instruction->set_kind(planpb::ALL_REDUCE);
        instruction->set_stream(1);
        instruction->add_group(0);
        instruction->add_group(1);
        instruction->set_reduce_op("sum");
        instruction->add_operands(0);
        instruction->add_results(0);
      } else {
        transfer(r == 0 ? planpb::SEND : planpb::RECV, 2 * k);
        transfer(r == 0 ? planpb::RECV : planpb::SEND, 2 * k + 1);
      }
      if (!then_read) continue;
      planpb::Instruction* read = program->add_instructions();
      read->set_kind(planpb::KERNEL);
      read->set_op("add");
      read->add_operands(0);
      read->add_operands(0);
      read->add_results(1);
    }
  }
  return plan;
}

Expected<double> communicationSeconds(bool all_reduce, int64_t floats, bool then_read, double budget) {
  CLEAVE_ASSIGN_OR_RETURN(double one, runSeconds(communicationPlan(all_reduce, 1, floats, then_read), budget));
  CLEAVE_ASSIGN_OR_RETURN(double nine, runSeconds(communicationPlan(all_reduce, 9, floats, then_read), budget));
  return std::max(nine - one, 1e-9) / 8;
}

}  // namespace cleave::runtime
