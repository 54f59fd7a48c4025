// RankGroup: all ranks of a plan run together, one device, executor and thread per rank, and the
// moves of global batches in and out of the ranks' inputs and outputs.
#include "runtime/exec/rank_group.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <thread>

#include "ir/plan.h"
#include "ir/plan.pb.h"
#include "runtime/comm/local_communicator.h"
#include "runtime/comm/nccl_communicator.h"
#include "runtime/comm/rank_activity.h"

namespace cleave::runtime {
namespace {

int totalThreads(int threads) {
  if (threads > 0) return threads;
  unsigned hardware = std::thread::hardware_concurrency();
  return hardware == 0 ? 1 : static_cast<int>(hardware);
}

int threadsPerRank(int threads, int ranks) { return std::max(1, totalThreads(threads) / std::max(1, ranks)); }

// Bytes of one row (dim-0 slice) of a tensor.
int64_t rowBytes(const TensorType& type) {
  return type.shape.empty() || type.shape[0] == 0 ? type.bytes() : type.bytes() / type.shape[0];
}

// True when `a` and `b` agree in dtype, rank and every dim but the first.
bool sameRowType(const TensorType& a, const TensorType& b) {
  return a.dtype == b.dtype && a.rank() == b.rank() &&
         std::equal(a.shape.begin() + (a.rank() > 0 ? 1 : 0), a.shape.end(), b.shape.begin() + (b.rank() > 0 ? 1 : 0));
}

// One device per rank of a group in one process: every rank on the cpu, or rank r on GPU N + r for
// options.device "cuda:N" ("cuda": N = 0). Steps: check the backend fits the device, make rank 0's
// device (it checks the name and that the GPU exists), check there are GPUs enough, make the rest.
Expected<std::vector<std::unique_ptr<Device>>> createRankDevices(const RankGroupOptions& options, int ranks) {
  std::vector<std::unique_ptr<Device>> devices;
  if (options.device == "cpu") {
    if (options.backend == RankBackend::kNccl)
      return Status::usage("--backend nccl runs on GPUs: add --device cuda");
    for (int rank = 0; rank < ranks; ++rank) devices.push_back(createCpuDevice());
    return devices;
  }
  if (ranks > 1 && options.backend != RankBackend::kNccl)
    return Status::usage("the plan has " + std::to_string(ranks) + " ranks: --device " + options.device +
                         " runs multi-device plans with --backend nccl");
  CLEAVE_ASSIGN_OR_RETURN(DeviceName name, parseDeviceName(options.device));
  CLEAVE_ASSIGN_OR_RETURN(std::unique_ptr<Device> first, createDevice(options.device));
  const int base = name.ordinal;
  const int available = deviceCount(DeviceKind::kCuda);
  if (base + ranks > available)
    return Status::runtime("the plan has " + std::to_string(ranks) + " ranks, one GPU each from GPU " +
                           std::to_string(base) + ", but this machine has " + std::to_string(available) +
                           " CUDA device(s)");
  devices.push_back(std::move(first));
  for (int rank = 1; rank < ranks; ++rank) {
    CLEAVE_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, createDevice("cuda:" + std::to_string(base + rank)));
    devices.push_back(std::move(device));
  }
  return devices;
}

// The communicators of a group in one process, one per rank on `devices`.
Expected<std::vector<std::unique_ptr<Communicator>>> createRankCommunicators(
    const RankGroupOptions& options, const std::vector<std::unique_ptr<Device>>& devices) {
  if (options.backend == RankBackend::kLocal)
    return createLocalCommunicators(static_cast<int>(devices.size()), options.timeout_seconds,
                                    options.stall_seconds);
#if CLEAVE_HAVE_CUDA
  std::vector<Device*> pointers;
  for (const auto& device : devices) pointers.push_back(device.get());
  return createNcclCommunicators(pointers, options.timeout_seconds);
#else
  return Status::usage("--backend nccl: this cleave was built without CUDA (nvcc was not found at configure time)");
#endif
}

}  // namespace

// The rank threads of a group of several ranks: each waits for a job, runs it on its rank, reports.
struct RankGroup::Worker {
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable done;
  std::function<Status(RankExecutor&)> job_storage;
  const std::function<Status(RankExecutor&)>* job = nullptr;
  uint64_t generation = 0;  // bumped for every job
  size_t pending = 0;       // ranks still running the job
  bool stopping = false;
  std::vector<Status> results;  // by rank
  std::vector<bool> finished;   // by rank: done with the current job
  std::vector<std::thread> threads;
};

Expected<std::unique_ptr<RankGroup>> RankGroup::create(const planpb::Plan& plan, const RankGroupOptions& options) {
  std::unique_ptr<RankGroup> group(new RankGroup());
  const int ranks = plan.ranks_size();
  if (ranks < 1) return Status::badInput("the plan has no ranks");
  CLEAVE_ASSIGN_OR_RETURN(group->devices_, createRankDevices(options, ranks));
  CLEAVE_ASSIGN_OR_RETURN(group->communicators_, createRankCommunicators(options, group->devices_));
  group->timeout_seconds_ = options.timeout_seconds;
  CLEAVE_ASSIGN_OR_RETURN(group->fault_, injectedFaultFromEnvironment(ranks));
  group->program_runs_.assign(static_cast<size_t>(ranks), 0);
  ExecutorOptions executor_options;
  executor_options.threads = threadsPerRank(options.threads, ranks);
  for (int rank = 0; rank < ranks; ++rank) {
    int index = -1;
    for (int i = 0; i < ranks; ++i)
      if (plan.ranks(i).rank() == rank) index = i;
    if (index < 0) return Status::badInput("the plan has no program list for rank " + std::to_string(rank));
    executor_options.communicator = group->communicators_[static_cast<size_t>(rank)].get();
    CLEAVE_ASSIGN_OR_RETURN(std::unique_ptr<RankExecutor> executor,
                            RankExecutor::create(plan, index, *group->devices_[static_cast<size_t>(rank)],
                                                 executor_options));
    group->executors_.push_back(executor.get());
    group->owned_executors_.push_back(std::move(executor));
  }
  if (ranks > 1) {
    try {
      group->startWorkers();
    } catch (const std::system_error& e) {  // the group's destructor stops the threads that started
      return Status::runtime("could not start a thread for each of the " + std::to_string(ranks) +
                             " ranks (memory or the process's thread limit): " + e.what());
    }
  }
  return group;
}

Expected<std::unique_ptr<RankGroup>> RankGroup::createForProcess(const planpb::Plan& plan, Communicator& communicator,
                                                                 const RankGroupOptions& options,
                                                                 Device* device, Communicator* device_communicator) {
  const int rank = communicator.rank();
  if (communicator.worldSize() != plan.ranks_size())
    return Status::badInput("the plan has " + std::to_string(plan.ranks_size()) + " ranks but the job has " +
                            std::to_string(communicator.worldSize()) + " processes");
  int index = -1;
  for (int i = 0; i < plan.ranks_size(); ++i)
    if (plan.ranks(i).rank() == rank) index = i;
  if (index < 0) return Status::badInput("the plan has no program list for rank " + std::to_string(rank));
  std::unique_ptr<RankGroup> group(new RankGroup());
  CLEAVE_ASSIGN_OR_RETURN(group->fault_, injectedFaultFromEnvironment(plan.ranks_size()));
  group->program_runs_.assign(static_cast<size_t>(plan.ranks_size()), 0);
  group->process_plan_ = &plan;
  group->process_communicator_ = &communicator;
  if (!device) device = group->devices_.emplace_back(createCpuDevice()).get();
  ExecutorOptions executor_options;
  executor_options.threads = totalThreads(options.threads);
  executor_options.communicator = device_communicator ? device_communicator : &communicator;
  CLEAVE_ASSIGN_OR_RETURN(std::unique_ptr<RankExecutor> executor,
                          RankExecutor::create(plan, index, *device, executor_options));
  group->executors_.push_back(executor.get());
  group->owned_executors_.push_back(std::move(executor));
  return group;
}

std::unique_ptr<RankGroup> RankGroup::wrap(RankExecutor& executor) {
  std::unique_ptr<RankGroup> group(new RankGroup());
  group->executors_.push_back(&executor);
  return group;
}

RankGroup::~RankGroup() {
  if (!worker_) return;
  if (abandoned_) {
    // A rank thread is still running a job and uses its executor, device, communicator and the
    // worker state: leave them all alive, and the threads running.
    for (auto& thread : worker_->threads) thread.detach();
    (void)worker_.release();
    for (auto& executor : owned_executors_) (void)executor.release();
    for (auto& device : devices_) (void)device.release();
    for (auto& communicator : communicators_) (void)communicator.release();
    return;
  }
  {
    std::lock_guard lock(worker_->mutex);
    worker_->stopping = true;
  }
  worker_->wake.notify_all();
  for (auto& thread : worker_->threads) thread.join();
}

void RankGroup::startWorkers() {
  worker_ = std::make_unique<Worker>();
  for (size_t rank = 0; rank < executors_.size(); ++rank)
    worker_->threads.emplace_back([this, rank] { workerLoop(rank); });
}

void RankGroup::workerLoop(size_t rank) {
  // Only these, never `this`, are used after a job: an abandoned group is destroyed while a stuck
  // rank's job may still return.
  Worker& worker = *worker_;
  RankExecutor& executor = *executors_[rank];
  Communicator& communicator = *communicators_[rank];
  uint64_t seen = 0;
  while (true) {
    const std::function<Status(RankExecutor&)>* job = nullptr;
    {
      std::unique_lock lock(worker.mutex);
      worker.wake.wait(lock, [&] { return worker.stopping || worker.generation != seen; });
      if (worker.stopping) return;
      seen = worker.generation;
      job = worker.job;
    }
    Status status = Status::ok();
    try {  // an exception must not leave the thread: it would end the process without a word
      status = (*job)(executor);
    } catch (const std::bad_alloc&) {
      status = Status::runtime("rank " + std::to_string(rank) +
                               ": out of memory: this machine's memory does not hold what the rank runs");
    } catch (const std::exception& e) {
      status = Status::internal("rank " + std::to_string(rank) + ": " + e.what());
    }
    if (!status.isOk()) communicator.abort(status);
    std::lock_guard lock(worker.mutex);
    worker.results[rank] = std::move(status);
    worker.finished[rank] = true;
    if (--worker.pending == 0) worker.done.notify_all();
  }
}

Status RankGroup::forEachRank(const std::function<Status(RankExecutor&)>& job) {
  if (!worker_) return job(*executors_[0]);
  if (abandoned_) return Status::remoteRank("the ranks cannot run: a rank is still stuck in an earlier failed job");
  std::unique_lock lock(worker_->mutex);
  // The job lives in the worker state, which outlives this call if a rank is left running it.
  worker_->job_storage = job;
  worker_->job = &worker_->job_storage;
  worker_->results.assign(executors_.size(), Status::ok());
  worker_->finished.assign(executors_.size(), false);
  worker_->pending = executors_.size();
  ++worker_->generation;
  worker_->wake.notify_all();
  // 1. Wait for every rank. A rank still running one timeout after another finished is stuck:
  //    the communicator is aborted for it. Once the communicator is aborted, the ranks get one more
  //    timeout to stop; one that does not is left running.
  using Clock = std::chrono::steady_clock;
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds_));
  std::optional<Clock::time_point> first_finished, give_up;
  std::optional<Status> stuck_error;
  while (!worker_->done.wait_for(lock, std::chrono::milliseconds(100), [&] { return worker_->pending == 0; })) {
    const Clock::time_point now = Clock::now();
    if (!first_finished && worker_->pending < executors_.size()) first_finished = now;
    if (!stuck_error && !give_up && first_finished && now >= *first_finished + timeout) {
      std::string running;
      size_t count = 0;
      for (size_t rank = 0; rank < executors_.size(); ++rank)
        if (!worker_->finished[rank]) running += (count++ ? ", " : "") + std::to_string(rank);
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", timeout_seconds_);
      stuck_error = Status::remoteRank((count > 1 ? "ranks " : "rank ") + running + " had not finished " + seconds +
                                       " s after the first rank did (stuck?)");
      communicators_[0]->abort(*stuck_error);
    }
    if (!give_up && communicators_[0]->abortedBy() >= 0) give_up = now + timeout;
    if (give_up && now >= *give_up) {
      abandoned_ = true;
      break;
    }
  }
  // 2. The error of the rank that stopped the others, else the first error.
  const std::vector<Status>& results = worker_->results;
  int cause = communicators_[0]->abortedBy();
  if (cause >= 0 && !results[static_cast<size_t>(cause)].isOk()) return results[static_cast<size_t>(cause)];
  if (stuck_error) return *stuck_error;
  for (const Status& result : results)
    if (!result.isOk()) return result;
  return Status::ok();
}

Status RankGroup::run(std::string_view program) {
  const std::string name(program);  // the job may outlive this call (see forEachRank)
  if (fault_.rank < 0) return forEachRank([name](RankExecutor& executor) { return executor.run(name); });
  return forEachRank([this, name](RankExecutor& executor) {
    // Each rank counts its own runs (only its thread touches its entry).
    CLEAVE_TRY(injectedFault(executor.rank(), ++program_runs_[static_cast<size_t>(executor.rank())]));
    return executor.run(name);
  });
}

// CLEAVE_INJECT_FAULT=fail:RANK:RUN or hang:RANK:RUN (a test hook, docs/errors.md): rank RANK fails,
// or hangs for good, at its RUN-th program run (counting from 1). Unset: no fault (rank -1). A rank
// the plan of `ranks` ranks does not have is a usage error, as a malformed value is.
Expected<RankGroup::InjectedFault> RankGroup::injectedFaultFromEnvironment(int ranks) {
  InjectedFault fault;
  const char* value = std::getenv("CLEAVE_INJECT_FAULT");
  if (!value || !*value) return fault;
  char kind[8] = {};
  long long rank = -1, run = 0;
  char end = 0;
  if (std::sscanf(value, "%4[a-z]:%lld:%lld%c", kind, &rank, &run, &end) != 3 ||
      (std::strcmp(kind, "fail") != 0 && std::strcmp(kind, "hang") != 0) || rank < 0 || run < 1)
    return Status::usage(std::string("CLEAVE_INJECT_FAULT='") + value + "' is not fail:RANK:RUN or hang:RANK:RUN");
  if (rank >= ranks)
    return Status::usage(std::string("CLEAVE_INJECT_FAULT='") + value + "' names rank " + std::to_string(rank) +
                         ", but the plan has " + std::to_string(ranks) + (ranks == 1 ? " rank (0)" : " ranks (0 to " +
                         std::to_string(ranks - 1) + ")"));
  fault.hang = std::strcmp(kind, "hang") == 0;
  fault.rank = static_cast<int>(rank);
  fault.run = run;
  return fault;
}

Status RankGroup::injectedFault(int rank, int64_t run) const {
  if (rank != fault_.rank || run != fault_.run) return Status::ok();
  if (!fault_.hang)
    return Status::runtime("rank " + std::to_string(rank) + ": failed at program run " + std::to_string(run) +
                           " (injected by CLEAVE_INJECT_FAULT)");
  // A rank stuck for good, as in a kernel that never returns: it does not even watch for aborts. Its
  // activity says so to the ranks that wait for it (the string is never freed: the hang never ends).
  rankActivity(rank).begin(RankActivity::kCompute,
                           new std::string("a hang injected by CLEAVE_INJECT_FAULT at program run " +
                                           std::to_string(run)));
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

Status RankGroup::initializeParameters() {
  return forEachRank([](RankExecutor& executor) { return executor.initializeParameters(); });
}

void RankGroup::setThreads(int threads) {
  if (executors_.size() == 1) {
    executors_[0]->setThreads(threads);
    return;
  }
  for (RankExecutor* executor : executors_) executor->setThreads(threadsPerRank(threads, size()));
}

bool RankGroup::hasProgram(std::string_view program) const {
  for (RankExecutor* executor : executors_)
    if (!executor->hasProgram(program)) return false;
  return true;
}

Expected<std::pair<RankExecutor*, TensorView>> RankGroup::firstOutput(std::string_view program,
                                                                      std::string_view name) const {
  for (RankExecutor* executor : executors_) {
    CLEAVE_ASSIGN_OR_RETURN(std::span<const NamedTensor> outputs, executor->outputs(program));
    for (const auto& output : outputs)
      if (output.name == name) return std::pair<RankExecutor*, TensorView>{executor, output.view};
  }
  Status missing = executors_[0]->output(program, name).status();
  return executors_.size() == 1 ? missing : missing.withContext("no rank outputs it: ");
}

void RankGroup::abort(const Status& error) {
  if (process_communicator_) process_communicator_->abort(error);
  if (!communicators_.empty()) communicators_[0]->abort(error);
}

std::vector<int64_t> RankGroup::arenaBytes() const {
  std::vector<int64_t> bytes;
  for (RankExecutor* executor : executors_) bytes.push_back(executor->arenaBytes());
  return bytes;
}

// Steps: collect each input name's parts (rank, view, offset), check they agree, size the global
// tensor, then use the one part that is the whole tensor or make host storage and plan the copies.
Expected<std::unique_ptr<GlobalBatch>> GlobalBatch::create(RankGroup& group, std::string_view program) {
  // 1. The parts of every input, rank by rank; in a group that spans processes, the other processes'
  //    ranks' parts as the plan describes them (no executor: nothing is copied to them here).
  struct Part {
    int rank;
    RankExecutor* executor;
    NamedTensor tensor;
  };
  std::vector<std::pair<std::string, std::vector<Part>>> by_name;
  auto addPart = [&](int rank, RankExecutor* executor, const NamedTensor& input) -> Status {
    auto it = std::find_if(by_name.begin(), by_name.end(), [&](const auto& entry) { return entry.first == input.name; });
    if (it == by_name.end()) it = by_name.insert(by_name.end(), {input.name, {}});
    const TensorType& first = it->second.empty() ? input.view.type : it->second[0].tensor.view.type;
    if (!sameRowType(first, input.view.type))
      return Status::badInput("input '" + input.name + "' of " + std::string(program) + " is " + first.str() +
                              " on rank " + std::to_string(it->second[0].rank) + " but " + input.view.type.str() +
                              " on rank " + std::to_string(rank));
    if (input.batch_offset < 0)
      return Status::badInput("input '" + input.name + "' of " + std::string(program) + " on rank " +
                              std::to_string(rank) + " has a negative batch offset");
    it->second.push_back(Part{rank, executor, input});
    return Status::ok();
  };
  if (const planpb::Plan* plan = group.processPlan()) {
    RankExecutor& own = group.executor(0);
    for (int rank = 0; rank < plan->ranks_size(); ++rank) {
      if (rank == own.rank()) {
        CLEAVE_ASSIGN_OR_RETURN(std::span<const NamedTensor> inputs, own.inputs(program));
        for (const NamedTensor& input : inputs) CLEAVE_TRY(addPart(rank, &own, input));
        continue;
      }
      CLEAVE_ASSIGN_OR_RETURN(std::vector<NamedTensor> inputs, describeRankTensors(*plan, rank, program, false));
      for (const NamedTensor& input : inputs) CLEAVE_TRY(addPart(rank, nullptr, input));
    }
  } else {
    for (int rank = 0; rank < group.size(); ++rank) {
      RankExecutor& executor = group.executor(rank);
      CLEAVE_ASSIGN_OR_RETURN(std::span<const NamedTensor> inputs, executor.inputs(program));
      for (const NamedTensor& input : inputs) CLEAVE_TRY(addPart(executor.rank(), &executor, input));
    }
  }

  // 2. One global tensor per name.
  std::unique_ptr<GlobalBatch> batch(new GlobalBatch());
  for (const auto& [name, parts] : by_name) {
    const TensorType& local = parts[0].tensor.view.type;
    TensorType global = local;
    if (local.rank() > 0) {
      global.shape[0] = 0;
      for (const Part& part : parts)
        global.shape[0] = std::max(global.shape[0], part.tensor.batch_offset + part.tensor.view.type.shape[0]);
    }
    if (parts.size() == 1 && parts[0].executor && parts[0].tensor.batch_offset == 0 && local == global &&
        parts[0].executor->device().hostAccessible()) {
      batch->inputs_.push_back(NamedTensor{name, parts[0].tensor.view, parts[0].tensor.value_limit, 0});
      batch->input_devices_.push_back(&parts[0].executor->device());
      continue;
    }
    // Host storage: pinned staging when a rank's device cannot read host memory, else plain.
    Device* staging_device = nullptr;
    for (const Part& part : parts)
      if (part.executor && !part.executor->device().hostAccessible()) staging_device = &part.executor->device();
    uint8_t* base = nullptr;
    if (staging_device) {
      CLEAVE_ASSIGN_OR_RETURN(DeviceMemory staging, staging_device->allocateHost(global.bytes()));
      base = static_cast<uint8_t*>(staging.data());
      batch->staging_.push_back(std::move(staging));
    } else {
      base = reinterpret_cast<uint8_t*>(batch->storage_.emplace_back(static_cast<size_t>(global.bytes() + 7) / 8).data());
    }
    batch->inputs_.push_back(NamedTensor{name, TensorView{base, global}, parts[0].tensor.value_limit, 0});
    batch->input_devices_.push_back(nullptr);
    for (const Part& part : parts) {
      if (!part.executor) continue;  // another process's rank
      const TensorView& view = part.tensor.view;
      batch->copies_.push_back(RowCopy{&part.executor->device(), view.data,
                                       base + (local.rank() > 0 ? part.tensor.batch_offset * rowBytes(global) : 0),
                                       view.type.bytes()});
    }
  }
  return batch;
}

Status GlobalBatch::write(size_t index, const void* host_bytes) {
  const TensorView& view = inputs_[index].view;
  if (Device* device = input_devices_[index]) return device->copyFromHost(view.data, host_bytes, view.type.bytes());
  std::memcpy(view.data, host_bytes, static_cast<size_t>(view.type.bytes()));
  return Status::ok();
}

Status GlobalBatch::scatter() {
  for (const RowCopy& copy : copies_) CLEAVE_TRY(copy.device->copyFromHost(copy.target, copy.source, copy.bytes));
  return Status::ok();
}

Expected<std::unique_ptr<Device>> createProcessDevice(std::string_view device) {
  if (device != "cuda") return createDevice(device);
  const int available = deviceCount(DeviceKind::kCuda);
  if (available == 0) return createDevice(device);  // its error says why there is none
  int local_rank = 0;
  if (const char* value = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) local_rank = std::max(0, std::atoi(value));
  return createDevice("cuda:" + std::to_string(local_rank % available));
}

Expected<std::vector<NamedTensor>> describeRankTensors(const planpb::Plan& plan, int rank, std::string_view program,
                                                       bool outputs) {
  for (const planpb::RankPlan& rank_plan : plan.ranks()) {
    if (rank_plan.rank() != rank) continue;
    std::vector<NamedTensor> tensors;
    for (const planpb::Program& proto : rank_plan.programs()) {
      if (proto.name() != program) continue;
      for (const planpb::NamedBuffer& entry : outputs ? proto.outputs() : proto.inputs()) {
        auto buffer = std::find_if(rank_plan.buffers().begin(), rank_plan.buffers().end(),
                                   [&](const planpb::Buffer& candidate) { return candidate.id() == entry.buffer(); });
        if (buffer == rank_plan.buffers().end())
          return Status::badInput("rank " + std::to_string(rank) + ": " + (outputs ? "output" : "input") + " '" +
                                  entry.name() + "' of " + std::string(program) + " names buffer " +
                                  std::to_string(entry.buffer()) + ", which does not exist");
        CLEAVE_ASSIGN_OR_RETURN(TensorType type, fromProto(buffer->type()));
        tensors.push_back(NamedTensor{entry.name(), TensorView{nullptr, type}, entry.value_limit(), entry.batch_offset()});
      }
    }
    return tensors;
  }
  return Status::badInput("the plan has no program list for rank " + std::to_string(rank));
}

// Steps: collect the ranks' views of the output, size the global tensor, copy each row range from
// the lowest rank that has it, and check every row came from somewhere.
Expected<HostTensor> gatherOutput(const RankGroup& group, std::string_view program, std::string_view name) {
  // 1. The parts.
  std::vector<std::pair<RankExecutor*, NamedTensor>> parts;
  for (int rank = 0; rank < group.size(); ++rank) {
    RankExecutor& executor = group.executor(rank);
    CLEAVE_ASSIGN_OR_RETURN(std::span<const NamedTensor> outputs, executor.outputs(program));
    for (const NamedTensor& output : outputs)
      if (output.name == name) parts.emplace_back(&executor, output);
  }
  if (parts.empty()) return group.firstOutput(program, name).status();

  // 2. The global type; a scalar comes whole from the lowest rank.
  const TensorType& local = parts[0].second.view.type;
  HostTensor result{local, {}};
  if (local.rank() == 0) {
    result.bytes.resize(static_cast<size_t>(local.bytes()));
    CLEAVE_TRY(parts[0].first->device().copyToHost(result.bytes.data(), parts[0].second.view.data, local.bytes()));
    return result;
  }
  result.type.shape[0] = 0;
  for (const auto& [executor, output] : parts) {
    if (!sameRowType(local, output.view.type) || output.batch_offset < 0)
      return Status::internal("output '" + std::string(name) + "' of " + std::string(program) + " is " + local.str() +
                              " on rank " + std::to_string(parts[0].first->rank()) + " but " + output.view.type.str() +
                              " at row " + std::to_string(output.batch_offset) + " on rank " +
                              std::to_string(executor->rank()));
    result.type.shape[0] = std::max(result.type.shape[0], output.batch_offset + output.view.type.shape[0]);
  }
  result.bytes.resize(static_cast<size_t>(result.type.bytes()));

  // 3. Rows not yet copied, range by range, lowest rank first.
  const int64_t row_bytes = rowBytes(result.type);
  std::vector<bool> covered(static_cast<size_t>(result.type.shape[0]), false);
  for (const auto& [executor, output] : parts) {
    const auto* source = static_cast<const uint8_t*>(output.view.data);
    int64_t rows = output.view.type.shape[0];
    for (int64_t row = 0; row < rows;) {
      if (covered[static_cast<size_t>(output.batch_offset + row)]) {
        ++row;
        continue;
      }
      int64_t end = row;
      while (end < rows && !covered[static_cast<size_t>(output.batch_offset + end)])
        covered[static_cast<size_t>(output.batch_offset + end++)] = true;
      CLEAVE_TRY(executor->device().copyToHost(result.bytes.data() + (output.batch_offset + row) * row_bytes,
                                               source + row * row_bytes, (end - row) * row_bytes));
      row = end;
    }
  }
  auto gap = std::find(covered.begin(), covered.end(), false);
  if (gap != covered.end())
    return Status::internal("output '" + std::string(name) + "' of " + std::string(program) + ": no rank outputs row " +
                            std::to_string(gap - covered.begin()) + " of " + std::to_string(result.type.shape[0]));
  return result;
}

}  // namespace cleave::runtime
