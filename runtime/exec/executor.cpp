// RankExecutor: runs one rank's programs of a plan on one device, over one planned arena.
#include "runtime/exec/executor.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <unordered_map>

#include "ir/op_table.h"
#include "ir/plan.h"
#include "ir/plan.pb.h"
#include "ir/shared_programs.h"
#include "runtime/codegen/cpu_jit.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/rank_activity.h"
#include "runtime/exec/execution_trace.h"
#include "runtime/train/initializers.h"
#include "runtime/device/kernel.h"
#include "runtime/exec/tensor_blocks.h"

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
  int stream = 0;
  std::string where;  // "instruction 12 of train (matmul from model.cir:5:3)", for errors
  std::string name;   // the op or instruction kind, for traces
  // The arena bytes its operands and results occupy: [first, last) ranges.
  std::vector<std::pair<const uint8_t*, const uint8_t*>> touched;
  // KERNEL
  const OpDef* def = nullptr;
  CpuKernel kernel = nullptr;  // on the cpu device, its kernel (called directly); else the device launches it
  std::vector<TensorType> operand_types;
  std::vector<TensorType> result_types;
  AttrMap attrs;
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  std::optional<KernelCall> call;  // points into the fields above; the instruction never moves
  // COPY
  int64_t copy_bytes = 0;
  // SEND, RECV and the collectives
  std::vector<int> group;
  ReduceOp reduce = ReduceOp::kSum;
  int64_t dim = 0;         // ALL_GATHER, REDUCE_SCATTER
  int64_t split_dim = 0;   // ALL_TO_ALL
  int64_t concat_dim = 0;  // ALL_TO_ALL
  int peer = -1;           // SEND, RECV
  int tag = 0;             // SEND, RECV
  std::vector<TensorView> operand_views;
  std::vector<TensorView> result_views;
};

namespace {

// True for SEND, RECV and the collectives.
bool isCommunication(planpb::InstructionKind kind) { return kind != planpb::KERNEL && kind != planpb::COPY; }

// Records that `inst` ran on `rank` from `start` to now, when a trace is being taken.
void traceInstruction(ExecutionTrace* trace, int rank, const PreparedInstruction& inst,
                      ExecutionTrace::Clock::time_point start) {
  if (!trace) return;
  double start_us = trace->since(start);
  trace->record(TraceEvent{rank, inst.stream, inst.name, inst.where, trace->step(), start_us,
                           trace->since(ExecutionTrace::Clock::now()) - start_us});
}

// Runs one SEND, RECV or collective instruction through `communicator`.
Status runCommunication(const PreparedInstruction& inst, Communicator& communicator) {
  switch (inst.kind) {
    case planpb::ALL_REDUCE:
      return communicator.allReduce(inst.group, inst.operand_views, inst.result_views, inst.reduce);
    case planpb::ALL_GATHER:
      return communicator.allGather(inst.group, inst.operand_views[0], inst.result_views[0], inst.dim);
    case planpb::REDUCE_SCATTER:
      return communicator.reduceScatter(inst.group, inst.operand_views[0], inst.result_views[0], inst.dim,
                                        inst.reduce);
    case planpb::ALL_TO_ALL:
      return communicator.allToAll(inst.group, inst.operand_views[0], inst.result_views[0], inst.split_dim,
                                   inst.concat_dim);
    case planpb::SEND: {
      const TensorView& tensor = inst.operand_views[0];
      return communicator.send(inst.peer, inst.tag,
                               {static_cast<const uint8_t*>(tensor.data), static_cast<size_t>(tensor.type.bytes())});
    }
    case planpb::RECV: {
      const TensorView& tensor = inst.result_views[0];
      return communicator.recv(inst.peer, inst.tag,
                               {static_cast<uint8_t*>(tensor.data), static_cast<size_t>(tensor.type.bytes())});
    }
    case planpb::BARRIER: return communicator.barrier(inst.group);
    default: return Status::internal("not a communication instruction");
  }
}

}  // namespace

// One program, prepared: its instructions and named inputs and outputs.
class PreparedProgram {
 public:
  std::string name;
  std::vector<std::unique_ptr<PreparedInstruction>> instructions;
  std::vector<NamedTensor> inputs;
  std::vector<NamedTensor> outputs;
};

// A rank's communication thread: runs queued SEND, RECV and collective instructions one after the
// other, in the order they were queued (so every rank calls a group's collectives in program order).
// After a failure it skips the rest of the queue until drained.
class CommunicationQueue {
 public:
  CommunicationQueue(Communicator& communicator, int rank)
      : communicator_(communicator), rank_(rank), activity_(rankActivity(rank)), thread_([this] { loop(); }) {}
  ~CommunicationQueue() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    queued_.notify_all();
    thread_.join();
  }

  // Queues `inst`; returns its ticket (1, 2, ... in queue order).
  uint64_t submit(const PreparedInstruction* inst) {
    std::lock_guard lock(mutex_);
    queue_.push_back(inst);
    queued_.notify_all();
    return ++submitted_;
  }
  // Waits until the instructions up to `ticket` have run; their first error (with its instruction).
  Status waitFor(uint64_t ticket) {
    std::unique_lock lock(mutex_);
    completed_changed_.wait(lock, [&] { return completed_ >= ticket; });
    return error_;
  }
  // Waits until every queued instruction has run; returns their first error and forgets it.
  Status drain() {
    std::unique_lock lock(mutex_);
    completed_changed_.wait(lock, [&] { return completed_ >= submitted_; });
    Status error = std::move(error_);
    error_ = Status::ok();
    return error;
  }
  // Records the instructions run from now on in `trace` (null: none).
  void setTrace(ExecutionTrace* trace) { trace_.store(trace); }
  // The ticket of the last queued instruction.
  uint64_t lastTicket() const {
    std::lock_guard lock(mutex_);
    return submitted_;
  }

 private:
  void loop() {
    while (true) {
      const PreparedInstruction* inst = nullptr;
      bool skip = false;
      {
        std::unique_lock lock(mutex_);
        queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping
        inst = queue_.front();
        queue_.pop_front();
        skip = !error_.isOk();
      }
      auto start = ExecutionTrace::Clock::now();
      activity_.begin(RankActivity::kCommunication, &inst->where);
      Status status = Status::ok();
      if (!skip) {
        try {  // an exception must not leave the thread: it would end the process without a word
          status = runCommunication(*inst, communicator_);
        } catch (const std::bad_alloc&) {
          status = Status::runtime("out of memory: this machine's memory does not hold the transfer's buffers");
        }
      }
      activity_.end(RankActivity::kCommunication);
      if (!skip) traceInstruction(trace_.load(), rank_, *inst, start);
      std::lock_guard lock(mutex_);
      if (!status.isOk() && error_.isOk()) error_ = status.withContext(inst->where + ": ");
      ++completed_;
      completed_changed_.notify_all();
    }
  }

  Communicator& communicator_;
  const int rank_;
  RankActivity& activity_;
  std::atomic<ExecutionTrace*> trace_{nullptr};
  mutable std::mutex mutex_;
  std::condition_variable queued_;
  std::condition_variable completed_changed_;
  std::deque<const PreparedInstruction*> queue_;
  uint64_t submitted_ = 0;
  uint64_t completed_ = 0;
  Status error_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after every field above exists
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

Status prepareKernel(const planpb::Instruction& proto, const BufferTable& buffers, Device& device,
                     PreparedInstruction& inst) {
  // 1. The op and its kernel: the CPU's is called directly, another device's through the device.
  std::optional<OpId> op = lookupOp(proto.op());
  if (!op) return Status::badInput("unknown op '" + proto.op() + "'");
  inst.def = &opDef(*op);
  if (device.kind() == DeviceKind::kCpu) {
    inst.kernel = findCpuKernel(*op);
    if (!inst.kernel) return Status::usage("no CPU kernel for op '" + proto.op() + "' (not built yet)");
  } else if (!device.hasKernel(*op)) {
    return Status::usage("op '" + proto.op() + "' has no " + std::string(deviceKindName(device.kind())) + " kernel");
  }

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
  // 6. A fused node's CPU code is compiled now, at plan load (once per body and types in the
  //    process), so no step pays for it and a kernel LLVM cannot build fails before the run.
  if (device.kind() == DeviceKind::kCpu && *op == OpId::fused) CLEAVE_TRY(codegen::hostFusedKernel(inst.call->op).status());
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

// An integer attribute of a communication instruction that names a dimension of a tensor of
// rank `rank`; negative values count from the end.
Expected<int64_t> dimAttr(const planpb::Instruction& proto, const std::string& name, int64_t rank) {
  auto it = proto.attrs().find(name);
  if (it == proto.attrs().end() || it->second.value_case() != planpb::Attribute::kI)
    return Status::badInput("needs an integer attribute '" + name + "'");
  int64_t dim = normalizeAxis(it->second.i(), rank);
  if (dim < 0)
    return Status::badInput("attribute '" + name + "' = " + std::to_string(it->second.i()) +
                            " is outside a tensor of rank " + std::to_string(rank));
  return dim;
}

// Steps: check the operand and result counts the kind needs, the group or peer, the attributes;
// record the tensors. Shapes are checked by the communicator when it runs.
Status prepareCommunication(const planpb::Instruction& proto, const BufferTable& buffers, int rank, int devices,
                            PreparedInstruction& inst) {
  // 1. Operands and results.
  const planpb::InstructionKind kind = proto.kind();
  for (int32_t id : proto.operands()) {
    CLEAVE_ASSIGN_OR_RETURN(const BufferTable::Entry* entry, buffers.find(id));
    inst.operand_views.push_back(TensorView{entry->data, entry->type});
  }
  for (int32_t id : proto.results()) {
    CLEAVE_ASSIGN_OR_RETURN(const BufferTable::Entry* entry, buffers.find(id));
    inst.result_views.push_back(TensorView{entry->data, entry->type});
  }
  auto counts = [&](int operands, int results) -> Status {
    if (proto.operands_size() == operands && proto.results_size() == results) return Status::ok();
    return Status::badInput("needs " + std::to_string(operands) + " operand(s) and " + std::to_string(results) +
                            " result(s), has " + std::to_string(proto.operands_size()) + " and " +
                            std::to_string(proto.results_size()));
  };
  switch (kind) {
    case planpb::ALL_REDUCE:
      if (proto.operands_size() == 0 || proto.operands_size() != proto.results_size())
        return Status::badInput("needs as many results as operands (at least one), has " +
                                std::to_string(proto.operands_size()) + " operand(s) and " +
                                std::to_string(proto.results_size()) + " result(s)");
      break;
    case planpb::ALL_GATHER:
    case planpb::REDUCE_SCATTER:
    case planpb::ALL_TO_ALL: CLEAVE_TRY(counts(1, 1)); break;
    case planpb::SEND: CLEAVE_TRY(counts(1, 0)); break;
    case planpb::RECV: CLEAVE_TRY(counts(0, 1)); break;
    case planpb::BARRIER: CLEAVE_TRY(counts(0, 0)); break;
    default: return Status::internal("not a communication instruction");
  }

  // 2. The partner of a send or receive; the group of a collective.
  if (kind == planpb::SEND || kind == planpb::RECV) {
    if (proto.peer() < 0 || proto.peer() >= devices || proto.peer() == rank)
      return Status::badInput("peer rank " + std::to_string(proto.peer()) + " is not another of the plan's " +
                              std::to_string(devices) + " ranks");
    inst.peer = proto.peer();
    inst.tag = proto.tag();
    return Status::ok();
  }
  inst.group.assign(proto.group().begin(), proto.group().end());
  bool member = false;
  for (size_t i = 0; i < inst.group.size(); ++i) {
    if (inst.group[i] < 0 || inst.group[i] >= devices || (i > 0 && inst.group[i] <= inst.group[i - 1]))
      return Status::badInput("group " + groupText(inst.group) + " is not an increasing list of the plan's " +
                              std::to_string(devices) + " ranks");
    member = member || inst.group[i] == rank;
  }
  if (!member) return Status::badInput("group " + groupText(inst.group) + " does not hold this rank");

  // 3. Attributes.
  if (kind == planpb::ALL_REDUCE || kind == planpb::REDUCE_SCATTER) {
    CLEAVE_ASSIGN_OR_RETURN(inst.reduce, parseReduceOp(proto.reduce_op().empty() ? "sum" : proto.reduce_op()));
  }
  if (kind == planpb::ALL_GATHER || kind == planpb::REDUCE_SCATTER) {
    CLEAVE_ASSIGN_OR_RETURN(inst.dim, dimAttr(proto, "dim", inst.operand_views[0].type.rank()));
  }
  if (kind == planpb::ALL_TO_ALL) {
    CLEAVE_ASSIGN_OR_RETURN(inst.split_dim, dimAttr(proto, "split_dim", inst.operand_views[0].type.rank()));
    CLEAVE_ASSIGN_OR_RETURN(inst.concat_dim, dimAttr(proto, "concat_dim", inst.operand_views[0].type.rank()));
  }
  return Status::ok();
}


Expected<std::vector<NamedTensor>> prepareNamed(const google::protobuf::RepeatedPtrField<planpb::NamedBuffer>& named,
                                                const BufferTable& buffers, const char* what) {
  std::vector<NamedTensor> result;
  for (const auto& entry : named) {
    auto buffer = buffers.find(entry.buffer());
    if (!buffer) return buffer.status().withContext(std::string(what) + " '" + entry.name() + "': ");
    result.push_back(NamedTensor{entry.name(), TensorView{(*buffer)->data, (*buffer)->type}, entry.value_limit(),
                                 entry.batch_offset()});
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

RankExecutor::RankExecutor(Device& device, int rank)
    : device_(device), rank_(rank), activity_(&rankActivity(rank)) {}
RankExecutor::~RankExecutor() = default;

Expected<std::unique_ptr<RankExecutor>> RankExecutor::create(const planpb::Plan& plan, int rank_index, Device& device,
                                                             const ExecutorOptions& options) {
  if (rank_index < 0 || rank_index >= plan.ranks_size())
    return Status::internal("rank " + std::to_string(rank_index) + " is not in the plan (" +
                            std::to_string(plan.ranks_size()) + " ranks)");
  const planpb::RankPlan& rank_plan = plan.ranks(rank_index);
  if (isSharedRank(rank_plan))
    return Status::internal(rankPrefix(rank_plan.rank()) + "runs the programs of rank " +
                            std::to_string(rank_plan.same_program_as()) +
                            ", which were not derived for it (expandSharedPrograms)");
  std::unique_ptr<RankExecutor> executor(new RankExecutor(device, rank_plan.rank()));
  executor->communicator_ = options.communicator;
  executor->asynchronous_ = options.communicator && options.communicator->asynchronous();
  if (options.communicator && options.communicator->rank() != rank_plan.rank())
    return Status::internal(rankPrefix(rank_plan.rank()) + "given the communicator endpoint of rank " +
                            std::to_string(options.communicator->rank()));
  Status prepared = executor->prepare(plan, rank_plan);
  if (!prepared.isOk()) return prepared.withContext(rankPrefix(rank_plan.rank()));
  executor->setThreads(options.threads);
  return executor;
}

// Steps: allocate the arena, map buffers, record parameters and their initializers, then prepare
// every instruction of every program.
Status RankExecutor::prepare(const planpb::Plan& plan, const planpb::RankPlan& rank_plan) {
  // 1. The arena.
  if (rank_plan.arena_bytes() < 0) return Status::badInput("negative arena size");
  CLEAVE_ASSIGN_OR_RETURN(arena_, device_.allocate(rank_plan.arena_bytes()));
  CLEAVE_ASSIGN_OR_RETURN(BufferTable buffers,
                          BufferTable::build(rank_plan, static_cast<uint8_t*>(arena_.data()), arena_.bytes()));

  // 2. Parameters and optimizer state, with their initializers.
  for (const auto& param : rank_plan.parameters()) {
    auto buffer = buffers.find(param.buffer());
    if (!buffer) return buffer.status().withContext("parameter '" + param.name() + "': ");
    Shape full_shape(param.full_shape().begin(), param.full_shape().end());
    Shape shard_offset(param.shard_offset().begin(), param.shard_offset().end());
    if (!full_shape.empty() && !boxInside(full_shape, shard_offset, (*buffer)->type.shape))
      return Status::badInput("parameter '" + param.name() + "': block " + (*buffer)->type.str() + " at " +
                              shapeStr(shard_offset) + " does not lie inside the whole tensor " + shapeStr(full_shape));
    HeldLayout model = heldLayoutOf(param);
    const Shape& whole = full_shape.empty() ? (*buffer)->type.shape : full_shape;
    if (!model.shape.empty())
      if (Status held = checkHeldShape(model, whole); !held) return held.withContext("parameter '" + param.name() + "': ");
    parameters_.push_back(ParameterTensor{param.name(), TensorView{(*buffer)->data, (*buffer)->type}, param.trainable(),
                                          (*buffer)->kind == planpb::BUFFER_OPTIMIZER_STATE, std::move(full_shape),
                                          std::move(shard_offset), std::move(model)});
    ParameterInit init{param.init().kind(), {}, {param.init().data().begin(), param.init().data().end()}};
    for (const auto& [arg_name, value] : param.init().args()) {
      auto arg = fromProto(value);
      if (!arg) return arg.status().withContext("parameter '" + param.name() + "': argument '" + arg_name + "': ");
      init.args.emplace(arg_name, std::move(*arg));
    }
    initializers_.push_back(std::move(init));
  }

  // 3. Programs: every instruction prepared once, with its position and source for errors.
  std::vector<std::pair<const uint8_t*, const uint8_t*>> written;  // the bytes of every instruction's results
  for (const auto& program : rank_plan.programs()) {
    auto prepared = std::make_unique<PreparedProgram>();
    prepared->name = program.name();
    CLEAVE_ASSIGN_OR_RETURN(prepared->inputs, prepareNamed(program.inputs(), buffers, "input"));
    CLEAVE_ASSIGN_OR_RETURN(prepared->outputs, prepareNamed(program.outputs(), buffers, "output"));
    for (int i = 0; i < program.instructions_size(); ++i) {
      const planpb::Instruction& proto = program.instructions(i);
      auto inst = std::make_unique<PreparedInstruction>();
      inst->kind = proto.kind();
      inst->stream = proto.stream();
      for (const auto& ids : {proto.operands(), proto.results()}) {
        for (int32_t id : ids) {
          auto buffer = buffers.find(id);
          if (!buffer) continue;  // reported by the kind's own preparation below
          const auto* first = static_cast<const uint8_t*>((*buffer)->data);
          inst->touched.emplace_back(first, first + (*buffer)->type.bytes());
        }
      }
      for (int32_t id : proto.results()) {
        auto buffer = buffers.find(id);
        if (!buffer) continue;
        const auto* first = static_cast<const uint8_t*>((*buffer)->data);
        written.emplace_back(first, first + (*buffer)->type.bytes());
      }
      std::string what = proto.kind() == planpb::KERNEL ? proto.op() : instructionKindName(proto.kind());
      inst->where = "instruction " + std::to_string(i) + " of " + program.name() + " (" + what +
                    (proto.source().empty() ? "" : " from " + proto.source()) + ")";
      inst->name = what;
      Status status;
      switch (proto.kind()) {
        case planpb::KERNEL: status = prepareKernel(proto, buffers, device_, *inst); break;
        case planpb::COPY: status = prepareCopy(proto, buffers, *inst); break;
        default:
          if (!communicator_) {
            status = Status::usage("needs a communicator: run the plan through a multi-device backend "
                                   "(cleave run --backend local)");
          } else if (!device_.hostAccessible() && !asynchronous_) {
            // Synchronous communicators (local, MPI) read and write host memory.
            status = Status::usage("--device " + std::string(deviceKindName(device_.kind())) +
                                   " runs multi-device plans with --backend nccl");
          } else {
            status = prepareCommunication(proto, buffers, rank_, plan.devices(), *inst);
          }
          break;
      }
      if (!status.isOk()) return status.withContext(inst->where + ": ");
      // Asynchronous communicators run every transfer on this thread (they only enqueue it).
      if (inst->stream == 1 && isCommunication(inst->kind) && !queue_ && !asynchronous_)
        queue_ = std::make_unique<CommunicationQueue>(*communicator_, rank_);
      prepared->instructions.push_back(std::move(inst));
    }
    programs_.push_back(std::move(prepared));
  }

  // 4. Kernel operands that are parameters no instruction writes.
  markConstantOperands(written);
  return Status::ok();
}

void RankExecutor::markConstantOperands(const std::vector<std::pair<const uint8_t*, const uint8_t*>>& written) {
  // 1. The written ranges sorted by start, with the furthest end among each prefix: a range [a, b)
  //    overlaps a write iff some write starting before b ends after a.
  std::vector<std::pair<const uint8_t*, const uint8_t*>> sorted = written;
  std::sort(sorted.begin(), sorted.end());
  std::vector<const uint8_t*> furthest_end(sorted.size());
  for (size_t i = 0; i < sorted.size(); ++i)
    furthest_end[i] = i == 0 ? sorted[i].second : std::max(furthest_end[i - 1], sorted[i].second);
  auto isWritten = [&](const uint8_t* first, const uint8_t* last) {
    const auto after = std::lower_bound(sorted.begin(), sorted.end(), std::make_pair(last, last),
                                        [](const auto& a, const auto& b) { return a.first < b.first; });
    const size_t count = static_cast<size_t>(after - sorted.begin());
    return count > 0 && furthest_end[count - 1] > first;
  };
  // 2. The parameters never written, by address.
  std::unordered_map<const void*, int64_t> constant_parameters;  // data -> bytes
  for (const ParameterTensor& param : parameters_) {
    const auto* first = static_cast<const uint8_t*>(param.view.data);
    if (!isWritten(first, first + param.view.type.bytes())) constant_parameters.emplace(param.view.data, param.view.type.bytes());
  }
  // 3. Each kernel operand that is one of them, whole.
  for (auto& program : programs_)
    for (auto& inst : program->instructions) {
      if (!inst->call) continue;
      for (size_t i = 0; i < inst->inputs.size() && i < 32; ++i) {
        const auto found = constant_parameters.find(inst->inputs[i]);
        if (found != constant_parameters.end() && found->second == inst->operand_types[i].bytes())
          inst->call->constant_operands |= uint32_t{1} << i;
      }
    }
}

void RankExecutor::parametersMayHaveChanged() const {
  static std::atomic<uint64_t> next_generation{1};  // process-wide: no two executors share one
  constants_generation_ = next_generation.fetch_add(1);
  for (auto& program : programs_)
    for (auto& inst : program->instructions)
      if (inst->call) inst->call->constants_generation = constants_generation_;
}

std::span<const ParameterTensor> RankExecutor::parameters() const {
  parametersMayHaveChanged();
  return parameters_;
}

// Steps per parameter: run its initializer into the arena (cpu) or into host memory that is then
// copied to the device; a block of a split tensor is cut from the whole tensor's values.
Status RankExecutor::initializeParameters() {
  parametersMayHaveChanged();
  const bool on_host = device_.hostAccessible();
  std::vector<uint64_t> staging;  // the values of a device that the host cannot write; 8-byte aligned
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const ParameterInit& init = initializers_[i];
    const ParameterTensor& param = parameters_[i];
    InitializerSpec spec{init.kind, init.args, init.data};
    void* target = param.view.data;
    if (!on_host) {
      staging.assign(static_cast<size_t>(param.view.type.bytes() + 7) / 8, 0);
      target = staging.data();
    }
    Status status;
    if ((param.full_shape.empty() && param.model.shape.empty()) || init.kind == "data") {
      status = runInitializer(spec, param.view.type, target);  // stored data is already this rank's block
    } else {
      // The whole tensor, as one device would initialize it (in the model's shape, whose fan-in a
      // seeded initializer reads), then this rank's block of it (in the held shape: the same elements).
      TensorType full{param.view.type.dtype, param.full_shape.empty() ? param.view.type.shape : param.full_shape};
      const Shape offset = param.full_shape.empty() ? Shape(full.shape.size(), 0) : param.shard_offset;
      std::vector<uint64_t> whole(static_cast<size_t>(full.bytes() + 7) / 8);  // 8-byte aligned for every dtype
      status = runInitializer(spec, TensorType{full.dtype, param.model.shape.empty() ? full.shape : param.model.shape},
                              whole.data());
      if (status.isOk() && param.model.grouped()) {  // grouped: the model's elements in the held order
        std::vector<uint64_t> model_order = whole;
        modelToHeldOrder(param.model, full.shape, reinterpret_cast<const uint8_t*>(model_order.data()),
                         reinterpret_cast<uint8_t*>(whole.data()), dtypeSize(full.dtype));
      }
      if (status.isOk())
        copyBox(whole.data(), full.shape, offset, target, param.view.type.shape, Shape(param.view.type.shape.size(), 0),
                param.view.type.shape, dtypeSize(full.dtype));
    }
    if (status.isOk() && !on_host) status = device_.copyFromHost(param.view.data, target, param.view.type.bytes());
    if (!status.isOk()) return status.withContext(rankPrefix(rank_) + "parameter '" + param.name + "': ");
  }
  return Status::ok();
}

// Steps: run the instructions; on an error abort the communicator (the other ranks stop waiting for
// this one); then let the communication thread finish what was queued (or the asynchronous
// communicator what it issued), and report its error; finally wait for the device.
Status RankExecutor::run(std::string_view program_name) {
  CLEAVE_ASSIGN_OR_RETURN(const PreparedProgram* program, findProgram(program_name));
  omp_set_num_threads(threads_);  // OpenMP's count is per calling thread; ranks run on threads of their own
  Status status = runInstructions(*program);
  if (!status.isOk() && communicator_) communicator_->abort(status);
  if (queue_) {
    Status queued = queue_->drain();
    if (status.isOk() && !queued.isOk()) {
      status = queued.withContext(rankPrefix(rank_));
      communicator_->abort(status);
    }
  }
  if (asynchronous_) {
    // After an abort the issued transfers fail promptly; they are still waited for, so that no
    // transfer outlives the run.
    Status issued = communicator_->finishIssued();
    if (status.isOk() && !issued.isOk()) {
      status = issued.withContext(rankPrefix(rank_));
      communicator_->abort(status);
    }
  }
  Status synchronized = device_.synchronize();
  if (status.isOk() && !synchronized.isOk()) {
    status = synchronized.withContext(rankPrefix(rank_) + "program " + program->name + ": ");
    if (communicator_) communicator_->abort(status);
  }
  return status;
}

Status RankExecutor::runInstructions(const PreparedProgram& program) {
  if (asynchronous_) return runWithAsynchronousCommunicator(program);
  struct Pending {
    uint64_t ticket;
    const PreparedInstruction* inst;
  };
  std::vector<Pending> pending;  // queued transfers not yet waited for
  auto touchesPending = [&pending](const PreparedInstruction& inst) {
    uint64_t ticket = 0;
    for (const Pending& queued : pending)
      for (const auto& [first, last] : queued.inst->touched)
        for (const auto& [other_first, other_last] : inst.touched)
          if (first < other_last && other_first < last) ticket = std::max(ticket, queued.ticket);
    return ticket;
  };
  for (const auto& inst : program.instructions) {
    // 1. A stream-1 transfer goes to the communication thread.
    bool communication = isCommunication(inst->kind);
    if (communication && inst->stream == 1 && queue_) {
      pending.push_back(Pending{queue_->submit(inst.get()), inst.get()});
      continue;
    }
    // 2. Anything else first waits for the queued transfers it depends on: all of them for a
    //    transfer on stream 0 (transfers stay in program order), those sharing bytes otherwise.
    uint64_t wait_for = communication && queue_ ? queue_->lastTicket() : touchesPending(*inst);
    if (wait_for > 0) {
      Status queued = queue_->waitFor(wait_for);
      if (!queued.isOk()) return queued.withContext(rankPrefix(rank_));
      std::erase_if(pending, [wait_for](const Pending& queued) { return queued.ticket <= wait_for; });
    }
    // 3. Run it here.
    auto start = ExecutionTrace::Clock::now();
    activity_->begin(RankActivity::kCompute, &inst->where);
    Status status = runHere(*inst);
    activity_->end(RankActivity::kCompute);
    if (!status.isOk()) return status.withContext(rankPrefix(rank_) + inst->where + ": ");
    traceInstruction(trace_, rank_, *inst, start);
  }
  return Status::ok();
}

// Every instruction is enqueued from this thread: kernels and copies on the device's compute
// stream, transfers by the communicator on its communication stream. Steps per instruction: a
// kernel or copy touching bytes of a transfer issued since the last wait first makes the device
// wait for the issued transfers; then the instruction is launched (a trace records launch times).
Status RankExecutor::runWithAsynchronousCommunicator(const PreparedProgram& program) {
  std::vector<const PreparedInstruction*> issued;  // transfers issued since the last device wait
  auto touchesIssued = [&issued](const PreparedInstruction& inst) {
    for (const PreparedInstruction* transfer : issued)
      for (const auto& [first, last] : transfer->touched)
        for (const auto& [other_first, other_last] : inst.touched)
          if (first < other_last && other_first < last) return true;
    return false;
  };
  for (const auto& inst : program.instructions) {
    const bool communication = isCommunication(inst->kind);
    // Transfers are ordered among themselves on the communication stream.
    if (!communication && !issued.empty() && touchesIssued(*inst)) {
      Status waited = communicator_->deviceWaitForIssued();
      if (!waited.isOk()) return waited.withContext(rankPrefix(rank_) + inst->where + ": ");
      issued.clear();
    }
    auto start = ExecutionTrace::Clock::now();
    activity_->begin(RankActivity::kCompute, &inst->where);
    Status status = runHere(*inst);
    activity_->end(RankActivity::kCompute);
    if (!status.isOk()) return status.withContext(rankPrefix(rank_) + inst->where + ": ");
    if (communication) issued.push_back(inst.get());
    traceInstruction(trace_, rank_, *inst, start);
  }
  return Status::ok();
}

Status RankExecutor::runHere(PreparedInstruction& inst) {
  if (inst.kind == planpb::KERNEL) {
    inst.call->threads = threads_;
    return inst.kernel ? inst.kernel(*inst.call) : device_.launch(*inst.call);
  }
  if (inst.kind == planpb::COPY)
    return inst.copy_bytes > 0 ? device_.copy(inst.outputs[0], inst.inputs[0], inst.copy_bytes) : Status::ok();
  return runCommunication(inst, *communicator_);
}

void RankExecutor::setTrace(ExecutionTrace* trace) {
  trace_ = trace;
  if (queue_) queue_->setTrace(trace);
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
  parametersMayHaveChanged();
  for (const auto& param : parameters_)
    if (param.name == name) return param.view;
  return Status::badInput(rankPrefix(rank_) + "no parameter '" + std::string(name) + "'");
}

void RankExecutor::setThreads(int threads) {
  threads_ = threads > 0 ? threads : defaultThreads();
  // Kernels split work over OpenMP threads and call OpenBLAS single-threaded: two thread pools
  // spinning against each other made 2-thread steps several times slower (see runtime/cpu/cpu_kernels.cpp).
  openblas_set_num_threads(1);
  omp_set_num_threads(threads_);
}

Expected<std::unique_ptr<RankExecutor>> createSingleDeviceExecutor(const planpb::Plan& plan, Device& device,
                                                                   const ExecutorOptions& options) {
  if (plan.ranks_size() != 1)
    return Status::usage("the plan has " + std::to_string(plan.ranks_size()) +
                         " ranks; running more than one device needs a multi-device backend (a RankGroup)");
  return RankExecutor::create(plan, 0, device, options);
}

}  // namespace cleave::runtime
