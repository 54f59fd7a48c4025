// RankExecutor: runs one rank's programs of a plan on one device, over one planned arena.
#include "runtime/executor.h"

#include <omp.h>

#include <cctype>
#include <optional>
#include <thread>
#include <unordered_map>

#include "ir/op_table.h"
#include "ir/plan.h"
#include "ir/plan.pb.h"
#include "runtime/initializers.h"
#include "runtime/kernel.h"

// OpenBLAS's process-wide thread count (cblas.h declares it too, with more we do not need).
extern "C" void openblas_set_num_threads(int num_threads);

namespace cleave::runtime {

struct RankExecutor::ParameterInit {
  std::string kind;
  AttrMap args;
  std::vector<uint8_t> data;
};

// One instruction, prepared once: what it does, on which bytes, with which kernel.
struct PreparedInstruction {
  planpb::InstructionKind kind = planpb::KERNEL;
  std::string where;  // "instruction 12 of train (matmul from model.cir:5:3)", for errors
  // KERNEL
  const OpDef* def = nullptr;
  CpuKernel kernel = nullptr;
  std::vector<TensorType> operand_types;
  std::vector<TensorType> result_types;
  AttrMap attrs;
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  std::optional<KernelCall> call;  // points into the fields above; the instruction never moves
  // COPY
  int64_t copy_bytes = 0;
};

// One program, prepared: its instructions and named inputs and outputs.
class PreparedProgram {
 public:
  std::string name;
  std::vector<std::unique_ptr<PreparedInstruction>> instructions;
  std::vector<NamedTensor> inputs;
  std::vector<NamedTensor> outputs;
};

namespace {

// "rank 0: " — the start of every error about a rank.
std::string rankPrefix(int rank) { return "rank " + std::to_string(rank) + ": "; }

std::string instructionKindName(planpb::InstructionKind kind) {
  std::string name = planpb::InstructionKind_Name(kind);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

int defaultThreads() {
  unsigned hardware = std::thread::hardware_concurrency();
  return hardware == 0 ? 1 : static_cast<int>(hardware);
}

// The buffers of a rank by id, with their types and arena addresses.
class BufferTable {
 public:
  struct Entry {
    std::string name;
    TensorType type;
    void* data = nullptr;
    int64_t offset = 0;
    planpb::BufferKind kind = planpb::BUFFER_ACTIVATION;
  };

  // Steps: convert each buffer's type, check its bytes lie inside the arena, record its address.
  static Expected<BufferTable> build(const planpb::RankPlan& rank_plan, uint8_t* arena_base, int64_t arena_bytes) {
    BufferTable table;
    for (const auto& buffer : rank_plan.buffers()) {
      auto type = fromProto(buffer.type());
      if (!type) return type.status().withContext("buffer '" + buffer.name() + "': ");
      int64_t bytes = type->bytes();
      if (buffer.offset() < 0 || bytes < 0 || buffer.offset() > arena_bytes - bytes)
        return Status::badInput("buffer '" + buffer.name() + "' (" + type->str() + " at offset " +
                                std::to_string(buffer.offset()) + ") does not fit the arena of " +
                                std::to_string(arena_bytes) + " bytes");
      if (!table.by_id_.emplace(buffer.id(), table.entries_.size()).second)
        return Status::badInput("buffer id " + std::to_string(buffer.id()) + " is used twice");
      table.entries_.push_back(Entry{buffer.name(), *type, arena_base + buffer.offset(), buffer.offset(), buffer.kind()});
    }
    return table;
  }

  // The buffer with id `id`; kBadInput when there is none.
  Expected<const Entry*> find(int32_t id) const {
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return Status::badInput("buffer id " + std::to_string(id) + " does not exist");
    return &entries_[it->second];
  }

 private:
  std::vector<Entry> entries_;
  std::unordered_map<int32_t, size_t> by_id_;
};

Status prepareKernel(const planpb::Instruction& proto, const BufferTable& buffers, PreparedInstruction& inst) {
  // 1. The op and its kernel.
  std::optional<OpId> op = lookupOp(proto.op());
  if (!op) return Status::badInput("unknown op '" + proto.op() + "'");
  inst.def = &opDef(*op);
  inst.kernel = findCpuKernel(*op);
  if (!inst.kernel) return Status::usage("no CPU kernel for op '" + proto.op() + "' (not built yet)");

  // 2. Attributes, into a sorted AttrMap.
  for (const auto& [attr_name, value] : proto.attrs()) {
    auto attr = fromProto(value);
    if (!attr) return attr.status().withContext("attribute '" + attr_name + "': ");
    inst.attrs.emplace(attr_name, std::move(*attr));
  }

  // 3. Operand and result buffers: types and addresses.
  for (int32_t id : proto.operands()) {
    CLEAVE_ASSIGN_OR_RETURN(const BufferTable::Entry* entry, buffers.find(id));
    inst.operand_types.push_back(entry->type);
    inst.inputs.push_back(entry->data);
  }
  for (int32_t id : proto.results()) {
    CLEAVE_ASSIGN_OR_RETURN(const BufferTable::Entry* entry, buffers.find(id));
    inst.result_types.push_back(entry->type);
    inst.outputs.push_back(entry->data);
  }

  // 4. The op's own rules must give the planned result types: a kernel trusts them for its bounds.
  CLEAVE_ASSIGN_OR_RETURN(std::vector<TensorType> expected, inferResultTypes(*inst.def, inst.operand_types, inst.attrs));
  if (expected != inst.result_types) {
    std::string planned, inferred;
    for (const auto& t : inst.result_types) planned += (planned.empty() ? "" : ", ") + t.str();
    for (const auto& t : expected) inferred += (inferred.empty() ? "" : ", ") + t.str();
    return Status::badInput("planned results (" + planned + ") differ from the op's result types (" + inferred + ")");
  }

  // 5. The call, pointing into this instruction's own vectors.
  inst.call.emplace(KernelCall{OpContext{*inst.def, inst.operand_types, inst.result_types, inst.attrs},
                               inst.inputs, inst.outputs, 1});
  return Status::ok();
}

Status prepareCopy(const planpb::Instruction& proto, const BufferTable& buffers, PreparedInstruction& inst) {
  if (proto.operands_size() != 1 || proto.results_size() != 1)
    return Status::badInput("copy needs one operand and one result");
  CLEAVE_ASSIGN_OR_RETURN(const BufferTable::Entry* from, buffers.find(proto.operands(0)));
  CLEAVE_ASSIGN_OR_RETURN(const BufferTable::Entry* to, buffers.find(proto.results(0)));
  if (from->type.bytes() != to->type.bytes())
    return Status::badInput("copy from '" + from->name + "' (" + from->type.str() + ") to '" + to->name + "' (" +
                            to->type.str() + "): sizes differ");
  int64_t bytes = from->type.bytes();
  bool same = from->offset == to->offset;
  bool overlap = from->offset < to->offset + bytes && to->offset < from->offset + bytes;
  if (overlap && !same)
    return Status::badInput("copy from '" + from->name + "' to '" + to->name + "': the buffers overlap");
  inst.inputs.push_back(from->data);
  inst.outputs.push_back(to->data);
  inst.copy_bytes = same ? 0 : bytes;  // a copy onto itself has nothing to do
  return Status::ok();
}

Expected<std::vector<NamedTensor>> prepareNamed(const google::protobuf::RepeatedPtrField<planpb::NamedBuffer>& named,
                                                const BufferTable& buffers, const char* what) {
  std::vector<NamedTensor> result;
  for (const auto& entry : named) {
    auto buffer = buffers.find(entry.buffer());
    if (!buffer) return buffer.status().withContext(std::string(what) + " '" + entry.name() + "': ");
    result.push_back(NamedTensor{entry.name(), TensorView{(*buffer)->data, (*buffer)->type}, entry.value_limit()});
  }
  return result;
}

std::string namesOf(std::span<const NamedTensor> tensors) {
  std::string names;
  for (const auto& t : tensors) names += (names.empty() ? "" : ", ") + t.name;
  return names.empty() ? "none" : names;
}

Expected<TensorView> findNamed(std::span<const NamedTensor> tensors, std::string_view name, const std::string& what) {
  for (const auto& t : tensors)
    if (t.name == name) return t.view;
  return Status::badInput(what + " has no '" + std::string(name) + "' (it has: " + namesOf(tensors) + ")");
}

}  // namespace

RankExecutor::RankExecutor(Device& device, int rank) : device_(device), rank_(rank) {}
RankExecutor::~RankExecutor() = default;

Expected<std::unique_ptr<RankExecutor>> RankExecutor::create(const planpb::Plan& plan, int rank_index, Device& device,
                                                             const ExecutorOptions& options) {
  if (rank_index < 0 || rank_index >= plan.ranks_size())
    return Status::internal("rank " + std::to_string(rank_index) + " is not in the plan (" +
                            std::to_string(plan.ranks_size()) + " ranks)");
  const planpb::RankPlan& rank_plan = plan.ranks(rank_index);
  if (device.kind() != DeviceKind::kCpu)
    return Status::usage("rank " + std::to_string(rank_plan.rank()) + ": kernels for device '" +
                         std::string(deviceKindName(device.kind())) + "' are not built yet");
  std::unique_ptr<RankExecutor> executor(new RankExecutor(device, rank_plan.rank()));
  Status prepared = executor->prepare(rank_plan);
  if (!prepared.isOk()) return prepared.withContext(rankPrefix(rank_plan.rank()));
  executor->setThreads(options.threads);
  return executor;
}

// Steps: allocate the arena, map buffers, record parameters and their initializers, then prepare
// every instruction of every program.
Status RankExecutor::prepare(const planpb::RankPlan& rank_plan) {
  // 1. The arena.
  if (rank_plan.arena_bytes() < 0) return Status::badInput("negative arena size");
  CLEAVE_ASSIGN_OR_RETURN(arena_, device_.allocate(rank_plan.arena_bytes()));
  CLEAVE_ASSIGN_OR_RETURN(BufferTable buffers,
                          BufferTable::build(rank_plan, static_cast<uint8_t*>(arena_.data()), arena_.bytes()));

  // 2. Parameters and optimizer state, with their initializers.
  for (const auto& param : rank_plan.parameters()) {
    auto buffer = buffers.find(param.buffer());
    if (!buffer) return buffer.status().withContext("parameter '" + param.name() + "': ");
    parameters_.push_back(ParameterTensor{param.name(), TensorView{(*buffer)->data, (*buffer)->type}, param.trainable(),
                                          (*buffer)->kind == planpb::BUFFER_OPTIMIZER_STATE});
    ParameterInit init{param.init().kind(), {}, {param.init().data().begin(), param.init().data().end()}};
    for (const auto& [arg_name, value] : param.init().args()) {
      auto arg = fromProto(value);
      if (!arg) return arg.status().withContext("parameter '" + param.name() + "': argument '" + arg_name + "': ");
      init.args.emplace(arg_name, std::move(*arg));
    }
    initializers_.push_back(std::move(init));
  }

  // 3. Programs: every instruction prepared once, with its position and source for errors.
  for (const auto& program : rank_plan.programs()) {
    auto prepared = std::make_unique<PreparedProgram>();
    prepared->name = program.name();
    CLEAVE_ASSIGN_OR_RETURN(prepared->inputs, prepareNamed(program.inputs(), buffers, "input"));
    CLEAVE_ASSIGN_OR_RETURN(prepared->outputs, prepareNamed(program.outputs(), buffers, "output"));
    for (int i = 0; i < program.instructions_size(); ++i) {
      const planpb::Instruction& proto = program.instructions(i);
      auto inst = std::make_unique<PreparedInstruction>();
      inst->kind = proto.kind();
      std::string what = proto.kind() == planpb::KERNEL ? proto.op() : instructionKindName(proto.kind());
      inst->where = "instruction " + std::to_string(i) + " of " + program.name() + " (" + what +
                    (proto.source().empty() ? "" : " from " + proto.source()) + ")";
      Status status;
      switch (proto.kind()) {
        case planpb::KERNEL: status = prepareKernel(proto, buffers, *inst); break;
        case planpb::COPY: status = prepareCopy(proto, buffers, *inst); break;
        default:
          status = Status::usage("needs a multi-device backend (not built yet)");
          break;
      }
      if (!status.isOk()) return status.withContext(inst->where + ": ");
      prepared->instructions.push_back(std::move(inst));
    }
    programs_.push_back(std::move(prepared));
  }
  return Status::ok();
}

Status RankExecutor::initializeParameters() {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const ParameterInit& init = initializers_[i];
    Status status = runInitializer(InitializerSpec{init.kind, init.args, init.data}, parameters_[i].view.type,
                                   parameters_[i].view.data);
    if (!status.isOk()) return status.withContext(rankPrefix(rank_) + "parameter '" + parameters_[i].name + "': ");
  }
  return Status::ok();
}

Status RankExecutor::run(std::string_view program_name) {
  CLEAVE_ASSIGN_OR_RETURN(const PreparedProgram* program, findProgram(program_name));
  for (const auto& inst : program->instructions) {
    Status status;
    if (inst->kind == planpb::COPY) {
      if (inst->copy_bytes > 0) status = device_.copy(inst->outputs[0], inst->inputs[0], inst->copy_bytes);
    } else {
      inst->call->threads = threads_;
      status = inst->kernel(*inst->call);
    }
    if (!status.isOk()) return status.withContext(rankPrefix(rank_) + inst->where + ": ");
  }
  return Status::ok();
}

bool RankExecutor::hasProgram(std::string_view program) const { return findProgram(program).hasValue(); }

std::vector<std::string> RankExecutor::programNames() const {
  std::vector<std::string> names;
  for (const auto& program : programs_) names.push_back(program->name);
  return names;
}

Expected<const PreparedProgram*> RankExecutor::findProgram(std::string_view program) const {
  for (const auto& prepared : programs_)
    if (prepared->name == program) return static_cast<const PreparedProgram*>(prepared.get());
  std::string names;
  for (const auto& prepared : programs_) names += (names.empty() ? "" : ", ") + prepared->name;
  return Status::usage(rankPrefix(rank_) + "the plan has no program '" + std::string(program) +
                       "' (it has: " + (names.empty() ? "none" : names) + ")");
}

Expected<std::span<const NamedTensor>> RankExecutor::inputs(std::string_view program) const {
  CLEAVE_ASSIGN_OR_RETURN(const PreparedProgram* prepared, findProgram(program));
  return std::span<const NamedTensor>(prepared->inputs);
}

Expected<std::span<const NamedTensor>> RankExecutor::outputs(std::string_view program) const {
  CLEAVE_ASSIGN_OR_RETURN(const PreparedProgram* prepared, findProgram(program));
  return std::span<const NamedTensor>(prepared->outputs);
}

Expected<TensorView> RankExecutor::input(std::string_view program, std::string_view name) const {
  CLEAVE_ASSIGN_OR_RETURN(const PreparedProgram* prepared, findProgram(program));
  return findNamed(prepared->inputs, name, "program '" + prepared->name + "'");
}

Expected<TensorView> RankExecutor::output(std::string_view program, std::string_view name) const {
  CLEAVE_ASSIGN_OR_RETURN(const PreparedProgram* prepared, findProgram(program));
  return findNamed(prepared->outputs, name, "program '" + prepared->name + "'");
}

Expected<TensorView> RankExecutor::parameter(std::string_view name) const {
  for (const auto& param : parameters_)
    if (param.name == name) return param.view;
  return Status::badInput(rankPrefix(rank_) + "no parameter '" + std::string(name) + "'");
}

void RankExecutor::setThreads(int threads) {
  threads_ = threads > 0 ? threads : defaultThreads();
  // Kernels split work over OpenMP threads and call OpenBLAS single-threaded: two thread pools
  // spinning against each other made 2-thread steps several times slower (see runtime/cpu_kernels.cpp).
  openblas_set_num_threads(1);
  omp_set_num_threads(threads_);
}

Expected<std::unique_ptr<RankExecutor>> createSingleDeviceExecutor(const planpb::Plan& plan, Device& device,
                                                                   const ExecutorOptions& options) {
  if (plan.ranks_size() != 1)
    return Status::usage("the plan has " + std::to_string(plan.ranks_size()) +
                         " ranks; running more than one device needs a multi-device backend (not built yet)");
  return RankExecutor::create(plan, 0, device, options);
}

}  // namespace cleave::runtime
