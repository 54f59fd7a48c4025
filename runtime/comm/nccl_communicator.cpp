// NCCL communicators: collectives and point-to-point transfers between GPUs, asynchronous on each GPU's streams.
#include "runtime/comm/nccl_communicator.h"

#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/comm/mpi_check.h"
#include "runtime/comm/nccl_check.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_device.h"

// How the transfers are ordered (the concurrency design in the header and tmp/gpu.md, with one
// refinement):
// - Collectives run on the context's communication stream, each over the NCCL communicator of its
//   group: the world communicator for a group of every rank, else one created for the group on first
//   use. The stream runs them in issue order, as a synchronous communicator would.
// - Point-to-point messages (send/recv) use two more world-sized NCCL communicators, each on a
//   stream of its own: "up" carries every message from a lower rank to a higher one, "down" every
//   message from a higher rank to a lower one. NCCL runs the operations of one communicator one after
//   the other on the device (it orders them through an internal stream), and an ncclSend holds its
//   stream until the peer's matching ncclRecv runs, so transfers sharing a communicator or a stream
//   wait for each other. Kept apart, sends never hold collectives back (rank 0 sending to rank 1 and
//   then all-reducing with it, while rank 1 all-reduces and then receives, would otherwise deadlock),
//   and messages crossing between two ranks (1F1B pipelines: activations go up while gradients come
//   down, each rank sending before it receives) never wait for each other either. This is how the
//   buffered sends of the Communicator contract are kept without the deferred, grouped sends first
//   planned in tmp/gpu.md: grouping every deferred send with the next recv deadlocks as soon as two
//   ranks each send several messages to the other before receiving them (GPipe-like orders).
// - send() copies the bytes into a staging buffer on the compute stream (after their producers,
//   before any later kernel can overwrite them, so the caller's bytes are free at once) and issues an
//   ncclSend of the staging buffer. NCCL has no tags: it delivers the messages between two ranks in
//   the order they were sent, so each rank must receive a peer's messages in that order (in one
//   process this is checked and reported). Messages to oneself are device copies.
// - Every call first makes its stream wait for the work launched on the compute stream (the
//   transfer's producers), and records a "done" event after its work; deviceWaitForIssued() makes
//   the compute stream wait for the last of them, finishIssued() waits on the host.
// - The NCCL communicators are non-blocking (ncclConfig_t::blocking = 0): every call returns at once,
//   possibly with ncclInProgress while NCCL works in the background (connecting to peers, joining a
//   new communicator); the call then polls ncclCommGetAsyncError until the work is enqueued, against
//   the timeout and the abort flag, so no rank ever blocks inside NCCL and an abort always reaches it.

namespace cleave::runtime {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kGroupIdTag = 7301;  // MPI tag of the messages carrying a group's NCCL unique id

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string secondsText(double seconds) {
  std::ostringstream text;
  text << seconds;
  return text.str();
}

// Pauses between polls of a wait: sleeps growing from 50 µs to 200 µs.
class Backoff {
 public:
  void pause() {
    std::this_thread::sleep_for(pause_);
    pause_ = std::min(pause_ * 2, std::chrono::microseconds(200));
  }

 private:
  std::chrono::microseconds pause_{50};
};

// The NCCL element type of `dtype` (bools travel as bytes).
ncclDataType_t ncclTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF64: return ncclFloat64;
    case DType::kI64: return ncclInt64;
    case DType::kI32: return ncclInt32;
    case DType::kI8: return ncclInt8;
    case DType::kU8: return ncclUint8;
    case DType::kBool: return ncclUint8;
  }
  return ncclUint8;
}

// The NCCL reduction for `op` on `dtype`. Bools reduce as "or" (a maximum of 0/1 bytes) for every
// op, as combineElements and divideElements do. A mean is ncclAvg (integers: the sum divided by the
// group size).
ncclRedOp_t ncclOpOf(ReduceOp op, DType dtype) {
  if (dtype == DType::kBool) return ncclMax;
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMean: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
  }
  return ncclSum;
}

// The product of shape[begin, end).
int64_t extent(const Shape& shape, size_t begin, size_t end) {
  int64_t product = 1;
  for (size_t d = begin; d < end; ++d) product *= shape[d];
  return product;
}

uint64_t groupHash(std::span<const int> group) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (int member : group) {
    hash ^= static_cast<uint64_t>(member) + 1;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// Copies `rows` rows of `row_bytes` bytes from `source` (rows `source_pitch` bytes apart) to
// `target` (rows `target_pitch` bytes apart) on `stream`: how a block of each row of a tensor moves
// between a tensor and the contiguous per-rank blocks NCCL works on.
Status copyRows(void* target, int64_t target_pitch, const void* source, int64_t source_pitch, int64_t row_bytes,
                int64_t rows, cudaStream_t stream) {
  if (rows == 0 || row_bytes == 0) return Status::ok();
  return cudaStatus(cudaMemcpy2DAsync(target, static_cast<size_t>(target_pitch), source, static_cast<size_t>(source_pitch),
                                      static_cast<size_t>(row_bytes), static_cast<size_t>(rows),
                                      cudaMemcpyDeviceToDevice, stream),
                    "cudaMemcpy2DAsync");
}

// ---- device buffers ----

// Device memory for staging sends and packing blocks, owned by one communicator. A buffer is reused
// once the transfers that used it have finished (its event has completed); buffers are freed with the
// communicator, never while a transfer may use them (cudaFree would also synchronize the device).
class BufferPool {
 public:
  struct Buffer {
    void* data = nullptr;
    int64_t bytes = 0;
    cudaEvent_t free_after = nullptr;  // recorded after the last work using the buffer
    bool reserved = false;             // handed out, its work not yet recorded
  };

  BufferPool() = default;
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  // Frees every buffer (the owner's device must be current and its transfers over).
  ~BufferPool() {
    for (auto& buffer : buffers_) {
      if (buffer->free_after) (void)cudaEventDestroy(buffer->free_after);
      if (buffer->data) (void)cudaFree(buffer->data);
    }
  }

  // A buffer of at least `bytes` bytes that no transfer uses; hand it back with releaseAfter().
  Expected<Buffer*> acquire(int64_t bytes, const std::string& where) {
    Buffer* best = nullptr;
    for (auto& buffer : buffers_) {
      if (buffer->reserved || buffer->bytes < bytes || (best && best->bytes <= buffer->bytes)) continue;
      cudaError_t state = cudaEventQuery(buffer->free_after);  // cudaSuccess also when never recorded
      if (state == cudaErrorNotReady) continue;
      CLEAVE_TRY(cudaStatus(state, where + ": staging buffer event"));
      best = buffer.get();
    }
    if (!best) {
      auto buffer = std::make_unique<Buffer>();
      buffer->bytes = std::max<int64_t>((bytes + 255) / 256 * 256, 256);
      CLEAVE_TRY(cudaStatus(cudaMalloc(&buffer->data, static_cast<size_t>(buffer->bytes)),
                            where + ": cannot allocate " + std::to_string(buffer->bytes) + " bytes of staging memory"));
      cudaError_t created = cudaEventCreateWithFlags(&buffer->free_after, cudaEventDisableTiming);
      if (created != cudaSuccess) {
        (void)cudaFree(buffer->data);
        return cudaStatus(created, where + ": cudaEventCreate");
      }
      best = buffers_.emplace_back(std::move(buffer)).get();
    }
    best->reserved = true;
    return best;
  }

  // Marks `buffer` busy until the work enqueued on `stream` so far has finished.
  Status releaseAfter(Buffer* buffer, cudaStream_t stream) {
    buffer->reserved = false;
    return cudaStatus(cudaEventRecord(buffer->free_after, stream), "cudaEventRecord (staging buffer)");
  }

 private:
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

using Buffer = BufferPool::Buffer;

// ---- what the communicators of one process share ----

// Where a group's NCCL unique id comes from: created by one member, handed to the others.
class GroupIds {
 public:
  virtual ~GroupIds() = default;
  // The unique id of the communicator of `group` (global ranks, increasing) for member `rank`.
  // `stopped` says (non-ok) when to give up waiting because the communicators were aborted.
  virtual Expected<ncclUniqueId> idFor(std::span<const int> group, int rank, const std::string& what,
                                       Clock::time_point deadline, const std::function<Status()>& stopped) = 0;
};

// In one process: the first member to ask creates the id, the others find it in the map.
class InProcessGroupIds final : public GroupIds {
 public:
  Expected<ncclUniqueId> idFor(std::span<const int> group, int rank, const std::string& what, Clock::time_point,
                               const std::function<Status()>&) override {
    std::lock_guard lock(mutex_);
    std::vector<int> key(group.begin(), group.end());
    auto found = ids_.find(key);
    if (found != ids_.end()) return found->second;
    ncclUniqueId id;
    CLEAVE_NCCL_CHECK(ncclGetUniqueId(&id), rank, what);
    ids_.emplace(std::move(key), id);
    return id;
  }

 private:
  std::mutex mutex_;
  std::map<std::vector<int>, ncclUniqueId> ids_;
};

// The message carrying a group's unique id under MPI.
struct GroupIdMessage {
  uint64_t group_hash = 0;
  ncclUniqueId id;
};

// Under MPI: the group's lowest rank creates the id and sends it to every other member (tag
// kGroupIdTag, with the group's hash: a member may need another group's id first, so ids that arrive
// early are kept until asked for). Called from the rank's thread only.
class MpiGroupIds final : public GroupIds {
 public:
  explicit MpiGroupIds(MPI_Comm comm) : comm_(comm) {}
  ~MpiGroupIds() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && !abandoned_) MPI_Comm_free(&comm_);
  }
  // After a failure MPI may still read the buffers of unfinished sends, and freeing the communicator
  // could wait for dead peers: both are then left alone.
  void abandon() { abandoned_ = true; }

  Expected<ncclUniqueId> idFor(std::span<const int> group, int rank, const std::string& what,
                               Clock::time_point deadline, const std::function<Status()>& stopped) override {
    const uint64_t hash = groupHash(group);
    Backoff backoff;
    if (group[0] == rank) {
      // 1. The lowest rank creates the id and sends it to every other member; the messages are small
      //    (sent eagerly), so the sends complete without waiting for the members to receive them.
      GroupIdMessage& message = sent_.emplace_back();
      message.group_hash = hash;
      CLEAVE_NCCL_CHECK(ncclGetUniqueId(&message.id), rank, what);
      const std::string sending = what + ": sending the group's NCCL id";
      std::vector<MPI_Request> requests(group.size() - 1, MPI_REQUEST_NULL);
      for (size_t i = 1; i < group.size(); ++i)
        CLEAVE_MPI_CHECK(MPI_Isend(&message, static_cast<int>(sizeof(GroupIdMessage)), MPI_BYTE, group[i], kGroupIdTag,
                                   comm_, &requests[i - 1]),
                         rank, sending);
      while (true) {
        int done = 0;
        CLEAVE_MPI_CHECK(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
                         rank, sending);
        if (done) return message.id;
        Status stop = stopped();
        if (!stop.isOk() || Clock::now() >= deadline) {
          abandon();
          if (!stop.isOk()) return stop;
          return Status::remoteRank(what + ": sending the group's NCCL id to its other ranks timed out");
        }
        backoff.pause();
      }
    }
    // 2. Another member receives ids from the lowest rank until this group's has come.
    while (true) {
      auto found = arrived_.find(hash);
      if (found != arrived_.end()) return found->second;
      int arrived = 0;
      MPI_Status status;
      CLEAVE_MPI_CHECK(MPI_Iprobe(group[0], kGroupIdTag, comm_, &arrived, &status), rank,
                       what + ": waiting for the group's NCCL id");
      if (arrived) {
        GroupIdMessage message;
        CLEAVE_MPI_CHECK(MPI_Recv(&message, static_cast<int>(sizeof(GroupIdMessage)), MPI_BYTE, group[0], kGroupIdTag,
                                  comm_, MPI_STATUS_IGNORE),
                         rank, what + ": receiving the group's NCCL id");
        arrived_[message.group_hash] = message.id;
        continue;
      }
      CLEAVE_TRY(stopped());
      if (Clock::now() >= deadline)
        return Status::remoteRank(what + " timed out waiting for rank " + std::to_string(group[0]) +
                                  " to send the group's NCCL id (it has not reached the group's first collective)");
      backoff.pause();
    }
  }

 private:
  MPI_Comm comm_;
  bool abandoned_ = false;
  std::deque<GroupIdMessage> sent_;  // send buffers (MPI reads them until the sends complete)
  std::map<uint64_t, ncclUniqueId> arrived_;
};

class NcclCommunicator;

// One message between two ranks as the sender or the receiver saw it (in-process order check).
struct MessageRecord {
  int tag = 0;
  int64_t bytes = 0;
  bool sent = false;  // true: seen by send(), false: by recv()
};

// What the communicators of one process share: the abort state, the communicators themselves (an
// abort stops them all), where group ids come from, and (in one process) the order of messages.
struct SharedState {
  std::atomic<int> aborted_by{-1};
  std::atomic<bool> failed{false};  // some communicator failed or was aborted
  std::mutex mutex;                 // guards the fields below
  std::string abort_text;
  std::vector<NcclCommunicator*> members;
  std::map<std::pair<int, int>, std::deque<MessageRecord>> messages;  // by (sender, receiver)
  bool check_message_order = false;
  std::unique_ptr<GroupIds> group_ids;
  MpiGroupIds* mpi_group_ids = nullptr;  // group_ids under MPI
  bool finalize_mpi = false;             // MPI was initialized for these communicators

  // Finalizes MPI after success when it was initialized here; after a failure MPI is left as it is
  // (a dead peer could make MPI_Finalize wait forever): the process exits and mpirun ends the job.
  ~SharedState() {
    if (mpi_group_ids && failed) mpi_group_ids->abandon();
    group_ids.reset();
    if (finalize_mpi && !failed) MPI_Finalize();
  }

  // Pairs a send with its recv in the order NCCL pairs them (the order each side calls them) and
  // checks that they agree on tag and size; kBadInput naming both otherwise.
  Status checkMessageOrder(int sender, int receiver, MessageRecord record, const std::string& what) {
    std::lock_guard lock(mutex);
    std::deque<MessageRecord>& queue = messages[{sender, receiver}];
    if (queue.empty() || queue.front().sent == record.sent) {
      queue.push_back(record);
      return Status::ok();
    }
    MessageRecord other = queue.front();
    queue.pop_front();
    if (other.tag == record.tag && other.bytes == record.bytes) return Status::ok();
    return Status::badInput(what + " (" + std::to_string(record.bytes) + " bytes): NCCL delivers rank " +
                            std::to_string(sender) + "'s messages to rank " + std::to_string(receiver) +
                            " in the order they were sent, and the " + (record.sent ? "recv" : "send") +
                            " it meets has tag " + std::to_string(other.tag) + " (" + std::to_string(other.bytes) +
                            " bytes)");
  }
};

// One rank's endpoint (see the notes at the top of this file).
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int rank, int size, double timeout_seconds, CudaContext& context, std::shared_ptr<SharedState> shared)
      : rank_(rank), size_(size), timeout_(timeout_seconds), context_(context), shared_(std::move(shared)) {
    std::lock_guard lock(shared_->mutex);
    shared_->members.push_back(this);
  }
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // Creates the point-to-point streams and the event marking the compute stream's progress.
  Status setUp();
  // Creates the world, up and down NCCL communicators of `ranks` (every rank of this process) from
  // the ids (in that order) every rank of the job got, and connects every pair of ranks for
  // point-to-point transfers (so that a transfer never waits in NCCL for a peer's host to connect).
  static Status connect(std::span<NcclCommunicator* const> ranks, std::span<const ncclUniqueId, 3> ids);

  int rank() const override { return rank_; }
  int worldSize() const override { return size_; }
  Status allReduce(std::span<const int> group, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                   ReduceOp op) override;
  Status allGather(std::span<const int> group, const TensorView& input, const TensorView& output, int64_t dim) override;
  Status reduceScatter(std::span<const int> group, const TensorView& input, const TensorView& output, int64_t dim,
                       ReduceOp op) override;
  Status allToAll(std::span<const int> group, const TensorView& input, const TensorView& output, int64_t split_dim,
                  int64_t concat_dim) override;
  Status send(int peer, int tag, std::span<const uint8_t> bytes) override;
  Status recv(int peer, int tag, std::span<uint8_t> bytes) override;
  Status barrier(std::span<const int> group) override;
  void abort(const Status& error) override;
  int abortedBy() const override { return shared_->aborted_by.load(); }
  bool asynchronous() const override { return true; }
  Status deviceWaitForIssued() override;
  Status finishIssued() override;

 private:
  // One collective call: its description, this rank's position in the group, the group's NCCL
  // communicator and the deadline for issuing it.
  struct Call {
    std::string what;  // "all_reduce over ranks {0,1}"
    int position = 0;
    ncclComm_t comm = nullptr;
    Clock::time_point deadline;
  };
  // Work enqueued on a stream, finished when `done` has completed.
  struct Issued {
    std::string what;
    cudaStream_t stream = nullptr;
    cudaEvent_t done = nullptr;
    bool compute_waits = true;  // deviceWaitForIssued() makes the compute stream wait for it
  };
  // A message this rank sent itself, staged until its recv.
  struct SelfMessage {
    int tag = 0;
    Buffer* staging = nullptr;
    int64_t bytes = 0;
  };

  Status makeCurrent() const { return context_.makeCurrent().withContext("rank " + std::to_string(rank_) + ": "); }
  Expected<int> positionIn(const std::string& what, std::span<const int> group) const;
  Expected<Call> begin(const std::string& collective, std::span<const int> group);
  Expected<ncclComm_t> commFor(std::span<const int> group, int position, const std::string& what,
                               Clock::time_point deadline);
  Status startInit(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank);

  Status waitForCompute(cudaStream_t stream);
  Status runGroup(ncclComm_t comm, const std::string& what, Clock::time_point deadline, std::string_view call,
                  const std::function<ncclResult_t()>& calls);
  Status settle(ncclComm_t comm, const std::string& what, Clock::time_point deadline);
  Status issueCollective(const Call& call, const std::vector<Buffer*>& buffers,
                         const std::function<Status(cudaStream_t)>& pack, std::string_view nccl_call,
                         const std::function<ncclResult_t(cudaStream_t)>& calls,
                         const std::function<Status(cudaStream_t)>& unpack);
  Status issueTransfer(const std::string& what, bool sending, int peer, void* data, int64_t bytes);
  Status receiveFromSelf(const std::string& what, int tag, std::span<uint8_t> bytes);
  Status recordIssued(const std::string& what, cudaStream_t stream, bool compute_waits = true);
  Status checkAsyncErrors(const std::string& what);

  Status stopped(const std::string& what) const;
  Status stoppedError(const std::string& what) const;
  bool commsAborted() const;
  // Aborts this rank's NCCL communicators (from any thread; once): their device work stops.
  // `failure`: the job failed (under MPI, MPI is then not finalized).
  void abortComms(bool failure = true);

  const int rank_;
  const int size_;
  const double timeout_;
  CudaContext& context_;
  std::shared_ptr<SharedState> shared_;

  // Guards the NCCL communicators: every NCCL call on them happens under it, after checking
  // comms_aborted_, since another thread may abort (and so free) them at any time.
  mutable std::mutex nccl_mutex_;
  bool comms_aborted_ = false;
  ncclComm_t world_ = nullptr;  // collectives over every rank
  ncclComm_t up_ = nullptr;     // messages from lower to higher ranks
  ncclComm_t down_ = nullptr;   // messages from higher to lower ranks
  std::map<std::vector<int>, ncclComm_t> groups_;  // collectives over other groups, created on first use

  // Used by the rank's thread only.
  cudaStream_t up_stream_ = nullptr;    // up_'s transfers
  cudaStream_t down_stream_ = nullptr;  // down_'s transfers
  cudaEvent_t compute_mark_ = nullptr;  // recorded on the compute stream before each transfer
  std::deque<Issued> issued_;           // oldest first; popped once done
  std::deque<SelfMessage> self_messages_;
  BufferPool pool_;
};

// ---- set-up and shutdown ----

Status NcclCommunicator::setUp() {
  CLEAVE_TRY(makeCurrent());
  const std::string where = "rank " + std::to_string(rank_) + ": NCCL communicator";
  for (cudaStream_t* stream : {&up_stream_, &down_stream_})
    CLEAVE_TRY(cudaStatus(cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking), where + ": stream"));
  return cudaStatus(cudaEventCreateWithFlags(&compute_mark_, cudaEventDisableTiming), where + ": event");
}

// NCCL's non-blocking initialization: the communicator exists at once, and settle() waits until it
// is ready (every rank has joined).
Status NcclCommunicator::startInit(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank) {
  CLEAVE_TRY(makeCurrent());  // a communicator belongs to the device current when it is created
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclUniqueId id_copy = id;
  std::lock_guard lock(nccl_mutex_);
  return ncclStatus(ncclCommInitRankConfig(comm, nranks, id_copy, rank, &config), "ncclCommInitRankConfig", rank_,
                    "creating an NCCL communicator");
}

// Steps: 1. the world, up and down communicators, each created by all ranks of this process in one
// group (NCCL's way to create several ranks from one thread) and waited for; 2. every rank sends one
// byte up to every higher rank and down to every lower one, all in one group, which makes NCCL
// connect every pair now: later a transfer never waits in NCCL (on the host) for its peer's host to
// connect, which could deadlock with a collective the peer is waiting in.
Status NcclCommunicator::connect(std::span<NcclCommunicator* const> ranks, std::span<const ncclUniqueId, 3> ids) {
  const std::array<ncclComm_t NcclCommunicator::*, 3> slots = {&NcclCommunicator::world_, &NcclCommunicator::up_,
                                                               &NcclCommunicator::down_};
  const std::array<const char*, 3> names = {"world", "up", "down"};
  for (size_t which = 0; which < slots.size(); ++which) {
    CLEAVE_NCCL_CHECK(ncclGroupStart(), -1, "creating the NCCL communicators");
    Status started = Status::ok();
    for (NcclCommunicator* communicator : ranks) {
      started = communicator->startInit(&(communicator->*slots[which]), communicator->size_, ids[which],
                                        communicator->rank_);
      if (!started.isOk()) break;
    }
    ncclResult_t ended = ncclGroupEnd();  // always, to close the group
    CLEAVE_TRY(started);
    CLEAVE_TRY(ncclStatus(ended, "ncclGroupEnd", -1, "creating the NCCL communicators"));
    for (NcclCommunicator* communicator : ranks) {
      const std::string what = std::string("creating the ") + names[which] + " NCCL communicator of " +
                               std::to_string(communicator->size_) + " ranks";
      CLEAVE_TRY(communicator->settle(communicator->*slots[which], what, after(communicator->timeout_)));
    }
  }
  if (ranks.empty() || ranks[0]->size_ == 1) return Status::ok();

  std::vector<Buffer*> bytes(ranks.size(), nullptr);
  for (size_t i = 0; i < ranks.size(); ++i) {
    CLEAVE_TRY(ranks[i]->makeCurrent());
    CLEAVE_ASSIGN_OR_RETURN(bytes[i], ranks[i]->pool_.acquire(1 + ranks[i]->size_, "connecting the ranks"));
  }
  auto fine = [](ncclResult_t result) { return !ncclFailed(result); };
  const char* call = "ncclGroupStart";  // the call that failed, when one did
  ncclResult_t result = ncclGroupStart();
  if (result == ncclSuccess) {
    for (size_t i = 0; i < ranks.size() && fine(result); ++i) {
      NcclCommunicator& communicator = *ranks[i];
      auto* data = static_cast<uint8_t*>(bytes[i]->data);
      for (int peer = 0; peer < communicator.size_ && fine(result); ++peer) {
        if (peer == communicator.rank_) continue;
        const bool higher = peer > communicator.rank_;
        ncclComm_t comm = higher ? communicator.up_ : communicator.down_;
        cudaStream_t stream = higher ? communicator.up_stream_ : communicator.down_stream_;
        call = "ncclSend";
        result = ncclSend(data, 1, ncclUint8, peer, comm, stream);
        // The peer's message to this rank travels the other way.
        if (!fine(result)) break;
        call = "ncclRecv";
        result = ncclRecv(data + 1 + peer, 1, ncclUint8, peer, higher ? communicator.down_ : communicator.up_,
                          higher ? communicator.down_stream_ : communicator.up_stream_);
      }
    }
    ncclResult_t ended = ncclGroupEnd();  // always, to close the group
    if (fine(result)) {
      call = "ncclGroupEnd";
      result = ended;
    }
  }
  CLEAVE_TRY(ncclStatus(result, call, -1, "connecting the NCCL ranks"));
  const std::string what = "connecting every pair of ranks";
  for (size_t i = 0; i < ranks.size(); ++i) {
    NcclCommunicator& communicator = *ranks[i];
    for (ncclComm_t comm : {communicator.up_, communicator.down_})
      CLEAVE_TRY(communicator.settle(comm, what, after(communicator.timeout_)));
    CLEAVE_TRY(communicator.makeCurrent());
    for (cudaStream_t stream : {communicator.up_stream_, communicator.down_stream_}) {
      CLEAVE_TRY(communicator.recordIssued(what, stream));
      CLEAVE_TRY(communicator.pool_.releaseAfter(bytes[i], stream));
    }
  }
  for (NcclCommunicator* communicator : ranks) CLEAVE_TRY(communicator->finishIssued());
  return Status::ok();
}

// ncclCommAbort, not ncclCommDestroy: it never waits for the peers (destroying the communicators of
// several ranks one after the other from one thread could), and every transfer has finished when a
// run ends (finishIssued), or has failed.
NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard lock(shared_->mutex);
    std::erase(shared_->members, this);
  }
  (void)context_.makeCurrent();
  abortComms(/*failure=*/false);
  for (Issued& issued : issued_) (void)cudaEventDestroy(issued.done);
  if (compute_mark_) (void)cudaEventDestroy(compute_mark_);
  for (cudaStream_t stream : {up_stream_, down_stream_})
    if (stream) (void)cudaStreamDestroy(stream);
  // pool_ frees its buffers now, with this device current.
}

void NcclCommunicator::abortComms(bool failure) {
  std::lock_guard lock(nccl_mutex_);
  if (comms_aborted_) return;
  comms_aborted_ = true;
  if (failure) shared_->failed = true;
  int previous = -1;
  const bool had_device = cudaGetDevice(&previous) == cudaSuccess;
  (void)cudaSetDevice(context_.ordinal());
  for (auto& [group, comm] : groups_) (void)ncclCommAbort(comm);
  if (world_) (void)ncclCommAbort(world_);
  if (up_) (void)ncclCommAbort(up_);
  if (down_) (void)ncclCommAbort(down_);
  if (had_device) (void)cudaSetDevice(previous);
}

// Marks every communicator of the process stopped (the first rank to abort is the one named) and
// aborts their NCCL communicators, which ends their device work at once: their ranks' pending and
// later calls fail with "stopped: rank R failed". Ranks in other processes (mpirun) are not told:
// they notice through NCCL's errors or their timeouts.
void NcclCommunicator::abort(const Status& error) {
  std::lock_guard lock(shared_->mutex);  // stoppedError() reads the text under it
  int none = -1;
  if (shared_->aborted_by.compare_exchange_strong(none, rank_)) shared_->abort_text = error.message();
  for (NcclCommunicator* member : shared_->members) member->abortComms();
}

// ---- state and errors ----

bool NcclCommunicator::commsAborted() const {
  std::lock_guard lock(nccl_mutex_);
  return comms_aborted_;
}

// The error of a call after the communicators were stopped: by an abort, naming the rank that failed
// (kRemoteRank when it is another rank), or by an earlier error of this rank.
Status NcclCommunicator::stoppedError(const std::string& what) const {
  int by = shared_->aborted_by.load();
  if (by >= 0) {
    std::lock_guard lock(shared_->mutex);
    return Status::error(by == rank_ ? ErrorKind::kRuntime : ErrorKind::kRemoteRank,
                         what + " stopped: rank " + std::to_string(by) + " failed" +
                             (shared_->abort_text.empty() ? "" : " (" + shared_->abort_text + ")"));
  }
  return Status::runtime("rank " + std::to_string(rank_) + ": " + what +
                         " stopped: this rank's NCCL communicators were aborted after an earlier error");
}

Status NcclCommunicator::stopped(const std::string& what) const {
  if (shared_->aborted_by.load() >= 0 || commsAborted()) return stoppedError(what);
  return Status::ok();
}

Expected<int> NcclCommunicator::positionIn(const std::string& what, std::span<const int> group) const {
  if (group.empty()) return Status::badInput(what + ": the group is empty");
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i] < 0 || group[i] >= size_)
      return Status::badInput(what + ": rank " + std::to_string(group[i]) + " is not one of the " +
                              std::to_string(size_) + " ranks");
    if (i > 0 && group[i] <= group[i - 1]) return Status::badInput(what + ": the group's ranks are not increasing");
  }
  auto it = std::find(group.begin(), group.end(), rank_);
  if (it == group.end()) return Status::badInput(what + ": rank " + std::to_string(rank_) + " is not in the group");
  return static_cast<int>(it - group.begin());
}

Expected<NcclCommunicator::Call> NcclCommunicator::begin(const std::string& collective, std::span<const int> group) {
  Call call;
  call.what = collective + " over ranks " + groupText(group);
  CLEAVE_ASSIGN_OR_RETURN(call.position, positionIn(call.what, group));
  CLEAVE_TRY(makeCurrent());
  CLEAVE_TRY(stopped(call.what));
  call.deadline = after(timeout_);
  CLEAVE_ASSIGN_OR_RETURN(call.comm, commFor(group, call.position, call.what, call.deadline));
  return call;
}

// The group's communicator: the world one for every rank, else the one created for the group on its
// first collective (NCCL's ncclCommSplit would need every rank of the parent to split in the same
// order, which lazily created groups cannot promise; a fresh id per group needs only the members).
Expected<ncclComm_t> NcclCommunicator::commFor(std::span<const int> group, int position, const std::string& what,
                                               Clock::time_point deadline) {
  if (static_cast<int>(group.size()) == size_) return world_;  // increasing ranks in range: all of them
  std::vector<int> key(group.begin(), group.end());
  {
    std::lock_guard lock(nccl_mutex_);
    auto found = groups_.find(key);
    if (found != groups_.end()) return found->second;
  }
  const std::string creating = what + ": creating the group's NCCL communicator";
  CLEAVE_ASSIGN_OR_RETURN(ncclUniqueId id, shared_->group_ids->idFor(group, rank_, creating, deadline,
                                                                     [&] { return stopped(creating); }));
  ncclComm_t comm = nullptr;
  CLEAVE_TRY(startInit(&comm, static_cast<int>(group.size()), id, position));
  {
    std::lock_guard lock(nccl_mutex_);
    if (comms_aborted_) {
      (void)ncclCommAbort(comm);  // created after abortComms() ran: abort it here
      comm = nullptr;
    } else {
      groups_[key] = comm;
    }
  }
  if (!comm) return stoppedError(creating);
  CLEAVE_TRY(settle(comm, creating, deadline));
  return comm;
}

// ---- issuing work ----

Status NcclCommunicator::waitForCompute(cudaStream_t stream) {
  CLEAVE_TRY(cudaStatus(cudaEventRecord(compute_mark_, context_.compute()), "cudaEventRecord (compute stream)"));
  return cudaStatus(cudaStreamWaitEvent(stream, compute_mark_, 0), "cudaStreamWaitEvent");
}

// Runs `calls` (NCCL calls on `comm`) in one ncclGroupStart/End, then waits until they are enqueued.
Status NcclCommunicator::runGroup(ncclComm_t comm, const std::string& what, Clock::time_point deadline,
                                  std::string_view call, const std::function<ncclResult_t()>& calls) {
  Status error = Status::ok();
  bool aborted = false;
  {
    std::lock_guard lock(nccl_mutex_);
    aborted = comms_aborted_;
    if (!aborted) {
      error = ncclStatus(ncclGroupStart(), "ncclGroupStart", rank_, what, comm);
      if (error.isOk()) {
        error = ncclStatus(calls(), call, rank_, what, comm);
        Status ended = ncclStatus(ncclGroupEnd(), "ncclGroupEnd", rank_, what, comm);  // always, to close the group
        if (error.isOk()) error = ended;
      }
    }
  }
  if (aborted) return stoppedError(what);  // (outside the lock: abort() takes the locks the other way round)
  if (!error.isOk()) {
    abortComms();
    return error;
  }
  return settle(comm, what, deadline);
}

// Waits until `comm` is done with the work of the last call (non-blocking NCCL reports ncclInProgress
// meanwhile: creating a communicator, connecting to peers, enqueuing a group's kernels), failing on an
// NCCL error, an abort, or at `deadline`.
Status NcclCommunicator::settle(ncclComm_t comm, const std::string& what, Clock::time_point deadline) {
  Backoff backoff;
  while (true) {
    ncclResult_t state = ncclSuccess;
    Status error = Status::ok();
    bool aborted = false;
    {
      std::lock_guard lock(nccl_mutex_);
      aborted = comms_aborted_;
      if (!aborted) {
        ncclResult_t result = ncclCommGetAsyncError(comm, &state);
        if (result != ncclSuccess) state = result;
        error = ncclStatus(state, "ncclCommGetAsyncError", rank_, what, comm);
      }
    }
    if (aborted) return stoppedError(what);
    if (!error.isOk()) {
      abortComms();
      return error;
    }
    if (state == ncclSuccess) return Status::ok();
    if (shared_->aborted_by.load() >= 0) {
      abortComms();
      return stoppedError(what);
    }
    if (Clock::now() >= deadline) {
      abortComms();
      return Status::remoteRank("rank " + std::to_string(rank_) + ": " + what + " timed out after " +
                                secondsText(timeout_) + " s waiting for the other ranks to join it in NCCL");
    }
    backoff.pause();
  }
}

Status NcclCommunicator::recordIssued(const std::string& what, cudaStream_t stream, bool compute_waits) {
  // Forget what has finished, so the list stays short between finishIssued() calls.
  while (!issued_.empty() && cudaEventQuery(issued_.front().done) == cudaSuccess) {
    (void)cudaEventDestroy(issued_.front().done);
    issued_.pop_front();
  }
  Issued issued{what, stream, nullptr, compute_waits};
  CLEAVE_TRY(cudaStatus(cudaEventCreateWithFlags(&issued.done, cudaEventDisableTiming), "cudaEventCreate"));
  cudaError_t recorded = cudaEventRecord(issued.done, stream);
  if (recorded != cudaSuccess) {
    (void)cudaEventDestroy(issued.done);
    return cudaStatus(recorded, "cudaEventRecord");
  }
  issued_.push_back(std::move(issued));
  return Status::ok();
}

// Steps on the communication stream: 1. wait for the compute stream; 2. pack the input into
// per-rank blocks (when the layout needs it); 3. the NCCL calls in one group; 4. unpack the result;
// 5. the done event. The scratch buffers are released after the work on the stream.
Status NcclCommunicator::issueCollective(const Call& call, const std::vector<Buffer*>& buffers,
                                         const std::function<Status(cudaStream_t)>& pack, std::string_view nccl_call,
                                         const std::function<ncclResult_t(cudaStream_t)>& calls,
                                         const std::function<Status(cudaStream_t)>& unpack) {
  cudaStream_t stream = context_.communication();
  const std::string where = "rank " + std::to_string(rank_) + ": " + call.what + ": ";
  Status status = waitForCompute(stream).withContext(where);
  if (status.isOk() && pack) status = pack(stream).withContext(where);
  if (status.isOk())
    status = runGroup(call.comm, call.what, call.deadline, nccl_call, [&] { return calls(stream); });
  if (status.isOk() && unpack) status = unpack(stream).withContext(where);
  if (status.isOk()) status = recordIssued(call.what, stream).withContext(where);
  for (Buffer* buffer : buffers) {
    Status released = pool_.releaseAfter(buffer, stream);
    if (status.isOk()) status = released.withContext(where);
  }
  return status;
}

// Issues one ncclSend or ncclRecv with `peer` on the communicator and stream of the message's
// direction, after the compute stream's work. A send's done event does not concern the compute
// stream (its staging copy is on it already): only finishIssued() waits for it.
Status NcclCommunicator::issueTransfer(const std::string& what, bool sending, int peer, void* data, int64_t bytes) {
  const bool upward = sending ? peer > rank_ : peer < rank_;
  ncclComm_t comm = upward ? up_ : down_;
  cudaStream_t stream = upward ? up_stream_ : down_stream_;
  CLEAVE_TRY(waitForCompute(stream).withContext("rank " + std::to_string(rank_) + ": " + what + ": "));
  CLEAVE_TRY(runGroup(comm, what, after(timeout_), sending ? "ncclSend" : "ncclRecv", [&] {
    const auto count = static_cast<size_t>(bytes);
    return sending ? ncclSend(data, count, ncclUint8, peer, comm, stream)
                   : ncclRecv(data, count, ncclUint8, peer, comm, stream);
  }));
  return recordIssued(what, stream, /*compute_waits=*/!sending);
}

// ---- collectives ----

// One ncclAllReduce per tensor of the bucket, in groups (NCCL takes at most 2048 operations in one).
Status NcclCommunicator::allReduce(std::span<const int> group, std::span<const TensorView> inputs,
                                   std::span<const TensorView> outputs, ReduceOp op) {
  const std::string what = "all_reduce over ranks " + groupText(group);
  CLEAVE_TRY(checkAllReduceBucket(what, inputs, outputs));
  if (inputs.empty()) return Status::ok();
  const DType dtype = inputs[0].type.dtype;
  CLEAVE_ASSIGN_OR_RETURN(Call call, begin("all_reduce", group));
  constexpr size_t kCallsPerGroup = 1024;
  for (size_t first = 0; first < inputs.size(); first += kCallsPerGroup) {
    const size_t last = std::min(inputs.size(), first + kCallsPerGroup);
    CLEAVE_TRY(issueCollective(call, {}, nullptr, "ncclAllReduce", [&](cudaStream_t stream) {
      for (size_t i = first; i < last; ++i) {
        const auto count = static_cast<size_t>(inputs[i].type.numel());
        if (count == 0) continue;
        ncclResult_t result = ncclAllReduce(inputs[i].data, outputs[i].data, count, ncclTypeOf(dtype),
                                            ncclOpOf(op, dtype), call.comm, stream);
        if (ncclFailed(result)) return result;
      }
      return ncclSuccess;
    }, nullptr));
  }
  return Status::ok();
}

// NCCL gathers the ranks' buffers one after the other. Along dim 0 (or after leading dims of size
// 1) that is the output's layout; otherwise the blocks are gathered into scratch memory and each
// rank's block interleaved into the output's rows: `outer` rows of `row` bytes per rank.
Status NcclCommunicator::allGather(std::span<const int> group, const TensorView& input, const TensorView& output,
                                   int64_t dim) {
  const std::string what = "all_gather over ranks " + groupText(group);
  const auto n = static_cast<int64_t>(group.size());
  const Shape& in = input.type.shape;
  CLEAVE_TRY(checkAllGather(what, n, input, output, dim));
  CLEAVE_ASSIGN_OR_RETURN(Call call, begin("all_gather", group));
  const int64_t bytes = input.type.bytes();
  if (bytes == 0) return Status::ok();
  const int64_t outer = extent(in, 0, static_cast<size_t>(dim));
  const int64_t row = bytes / outer;
  std::vector<Buffer*> buffers;
  void* gathered = output.data;
  if (outer > 1) {
    CLEAVE_ASSIGN_OR_RETURN(Buffer * scratch, pool_.acquire(bytes * n, call.what));
    buffers.push_back(scratch);
    gathered = scratch->data;
  }
  auto unpack = [&](cudaStream_t stream) {
    for (int64_t q = 0; q < n; ++q)
      CLEAVE_TRY(copyRows(static_cast<uint8_t*>(output.data) + q * row, n * row,
                          static_cast<const uint8_t*>(gathered) + q * bytes, row, row, outer, stream));
    return Status::ok();
  };
  return issueCollective(call, buffers, nullptr, "ncclAllGather", [&](cudaStream_t stream) {
    return ncclAllGather(input.data, gathered, static_cast<size_t>(bytes), ncclUint8, call.comm, stream);
  }, outer > 1 ? std::function<Status(cudaStream_t)>(unpack) : nullptr);
}

// The mirror of allGather: when `dim` is not the leading one, the input's per-rank blocks are first
// packed one after the other into scratch memory, which NCCL reduce-scatters.
Status NcclCommunicator::reduceScatter(std::span<const int> group, const TensorView& input, const TensorView& output,
                                       int64_t dim, ReduceOp op) {
  const std::string what = "reduce_scatter over ranks " + groupText(group);
  const auto n = static_cast<int64_t>(group.size());
  const Shape& out = output.type.shape;
  CLEAVE_TRY(checkReduceScatter(what, n, input, output, dim));
  CLEAVE_ASSIGN_OR_RETURN(Call call, begin("reduce_scatter", group));
  const int64_t bytes = output.type.bytes();
  if (bytes == 0) return Status::ok();
  const DType dtype = input.type.dtype;
  const int64_t outer = extent(out, 0, static_cast<size_t>(dim));
  const int64_t row = bytes / outer;
  std::vector<Buffer*> buffers;
  const void* blocks = input.data;
  if (outer > 1) {
    CLEAVE_ASSIGN_OR_RETURN(Buffer * scratch, pool_.acquire(bytes * n, call.what));
    buffers.push_back(scratch);
    blocks = scratch->data;
  }
  auto pack = [&](cudaStream_t stream) {
    for (int64_t q = 0; q < n; ++q)
      CLEAVE_TRY(copyRows(static_cast<uint8_t*>(buffers[0]->data) + q * bytes, row,
                          static_cast<const uint8_t*>(input.data) + q * row, n * row, row, outer, stream));
    return Status::ok();
  };
  return issueCollective(call, buffers, outer > 1 ? std::function<Status(cudaStream_t)>(pack) : nullptr,
                         "ncclReduceScatter", [&](cudaStream_t stream) {
                           return ncclReduceScatter(blocks, output.data, static_cast<size_t>(output.type.numel()),
                                                    ncclTypeOf(dtype), ncclOpOf(op, dtype), call.comm, stream);
                         },
                         nullptr);
}

// ncclAlltoAll sends the j-th contiguous block to the group's j-th rank and places the block from
// rank q at q; the input's blocks along split_dim are packed into that layout first (unless already
// contiguous), and the received blocks interleaved along concat_dim afterwards (unless contiguous).
Status NcclCommunicator::allToAll(std::span<const int> group, const TensorView& input, const TensorView& output,
                                  int64_t split_dim, int64_t concat_dim) {
  const std::string what = "all_to_all over ranks " + groupText(group);
  const auto n = static_cast<int64_t>(group.size());
  const Shape& in = input.type.shape;
  CLEAVE_TRY(checkAllToAll(what, n, input, output, split_dim, concat_dim));
  Shape block = in;
  block[static_cast<size_t>(split_dim)] /= n;
  CLEAVE_ASSIGN_OR_RETURN(Call call, begin("all_to_all", group));
  const int64_t block_bytes = TensorType{input.type.dtype, block}.bytes();
  if (block_bytes == 0) return Status::ok();
  const int64_t split_outer = extent(in, 0, static_cast<size_t>(split_dim));
  const int64_t split_row = block_bytes / split_outer;
  const int64_t concat_outer = extent(block, 0, static_cast<size_t>(concat_dim));
  const int64_t concat_row = block_bytes / concat_outer;
  std::vector<Buffer*> buffers;
  void* packed = nullptr;  // the input's blocks one after the other, when not already so
  void* receive_blocks = output.data;
  if (split_outer > 1) {
    CLEAVE_ASSIGN_OR_RETURN(Buffer * scratch, pool_.acquire(block_bytes * n, call.what));
    buffers.push_back(scratch);
    packed = scratch->data;
  }
  const void* send_blocks = packed ? packed : input.data;
  if (concat_outer > 1) {
    CLEAVE_ASSIGN_OR_RETURN(Buffer * scratch, pool_.acquire(block_bytes * n, call.what));
    buffers.push_back(scratch);
    receive_blocks = scratch->data;
  }
  auto pack = [&](cudaStream_t stream) {
    for (int64_t j = 0; j < n; ++j)
      CLEAVE_TRY(copyRows(static_cast<uint8_t*>(packed) + j * block_bytes, split_row,
                          static_cast<const uint8_t*>(input.data) + j * split_row, n * split_row, split_row,
                          split_outer, stream));
    return Status::ok();
  };
  auto unpack = [&](cudaStream_t stream) {
    for (int64_t q = 0; q < n; ++q)
      CLEAVE_TRY(copyRows(static_cast<uint8_t*>(output.data) + q * concat_row, n * concat_row,
                          static_cast<const uint8_t*>(receive_blocks) + q * block_bytes, concat_row, concat_row,
                          concat_outer, stream));
    return Status::ok();
  };
  return issueCollective(
      call, buffers, split_outer > 1 ? std::function<Status(cudaStream_t)>(pack) : nullptr, "ncclAlltoAll",
      [&](cudaStream_t stream) {
        return ncclAlltoAll(send_blocks, receive_blocks, static_cast<size_t>(block_bytes), ncclUint8, call.comm, stream);
      },
      concat_outer > 1 ? std::function<Status(cudaStream_t)>(unpack) : nullptr);
}

// A one-byte all-reduce over the group, then waiting for everything issued.
Status NcclCommunicator::barrier(std::span<const int> group) {
  CLEAVE_ASSIGN_OR_RETURN(Call call, begin("barrier", group));
  CLEAVE_ASSIGN_OR_RETURN(Buffer * byte, pool_.acquire(1, call.what));
  CLEAVE_TRY(issueCollective(call, {byte}, nullptr, "ncclAllReduce", [&](cudaStream_t stream) {
    return ncclAllReduce(byte->data, byte->data, 1, ncclUint8, ncclMax, call.comm, stream);
  }, nullptr));
  return finishIssued();
}

// ---- point-to-point ----

// Buffered: the bytes are copied into a staging buffer on the compute stream, then sent from it;
// the buffer is reused once the send has finished.
Status NcclCommunicator::send(int peer, int tag, std::span<const uint8_t> bytes) {
  const std::string what = "send to rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  if (peer < 0 || peer >= size_)
    return Status::badInput(what + ": rank " + std::to_string(peer) + " is not one of the " + std::to_string(size_) +
                            " ranks");
  CLEAVE_TRY(makeCurrent());
  CLEAVE_TRY(stopped(what));
  const auto size = static_cast<int64_t>(bytes.size());
  if (shared_->check_message_order && peer != rank_)
    CLEAVE_TRY(shared_->checkMessageOrder(rank_, peer, {tag, size, true}, what));
  const std::string where = "rank " + std::to_string(rank_) + ": " + what;
  CLEAVE_ASSIGN_OR_RETURN(Buffer * staging, pool_.acquire(size, where));
  Status status = Status::ok();
  if (size > 0)
    status = cudaStatus(cudaMemcpyAsync(staging->data, bytes.data(), static_cast<size_t>(size),
                                        cudaMemcpyDeviceToDevice, context_.compute()),
                        where + ": staging copy");
  if (status.isOk() && peer == rank_) {
    self_messages_.push_back({tag, staging, size});  // released by its recv
    return Status::ok();
  }
  const bool upward = peer > rank_;
  if (status.isOk()) status = issueTransfer(what, true, peer, staging->data, size);
  Status released = pool_.releaseAfter(staging, upward ? up_stream_ : down_stream_);
  return status.isOk() ? released : status;
}

// A message to oneself: a device copy from its staging buffer, on the compute stream.
Status NcclCommunicator::receiveFromSelf(const std::string& what, int tag, std::span<uint8_t> bytes) {
  const auto size = static_cast<int64_t>(bytes.size());
  if (self_messages_.empty())
    return Status::badInput(what + ": this rank has not sent itself a message to receive (the recv would wait forever)");
  SelfMessage message = self_messages_.front();
  if (message.tag != tag || message.bytes != size)
    return Status::badInput(what + " (" + std::to_string(size) + " bytes): this rank's oldest message to itself has tag " +
                            std::to_string(message.tag) + " (" + std::to_string(message.bytes) + " bytes)");
  self_messages_.pop_front();
  Status status = Status::ok();
  if (size > 0)
    status = cudaStatus(cudaMemcpyAsync(bytes.data(), message.staging->data, static_cast<size_t>(size),
                                        cudaMemcpyDeviceToDevice, context_.compute()),
                        "rank " + std::to_string(rank_) + ": " + what);
  Status released = pool_.releaseAfter(message.staging, context_.compute());
  return status.isOk() ? released : status;
}

Status NcclCommunicator::recv(int peer, int tag, std::span<uint8_t> bytes) {
  const std::string what = "recv from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  if (peer < 0 || peer >= size_)
    return Status::badInput(what + ": rank " + std::to_string(peer) + " is not one of the " + std::to_string(size_) +
                            " ranks");
  CLEAVE_TRY(makeCurrent());
  CLEAVE_TRY(stopped(what));
  if (peer == rank_) return receiveFromSelf(what, tag, bytes);
  const auto size = static_cast<int64_t>(bytes.size());
  if (shared_->check_message_order)
    CLEAVE_TRY(shared_->checkMessageOrder(peer, rank_, {tag, size, false}, what));
  return issueTransfer(what, false, peer, bytes.data(), size);
}

// ---- waiting ----

// The compute stream waits for the last transfer on each stream that it must wait for (later ones
// on a stream finish after earlier ones).
Status NcclCommunicator::deviceWaitForIssued() {
  CLEAVE_TRY(makeCurrent());
  std::set<cudaStream_t> waited;
  for (auto it = issued_.rbegin(); it != issued_.rend(); ++it) {
    if (!it->compute_waits || waited.count(it->stream)) continue;
    CLEAVE_TRY(cudaStatus(cudaStreamWaitEvent(context_.compute(), it->done, 0),
                          "rank " + std::to_string(rank_) + ": waiting for " + it->what));
    waited.insert(it->stream);
  }
  return Status::ok();
}

// An asynchronous NCCL error of any of this rank's communicators, which are then aborted.
Status NcclCommunicator::checkAsyncErrors(const std::string& what) {
  Status error = Status::ok();
  {
    std::lock_guard lock(nccl_mutex_);
    if (comms_aborted_) return Status::ok();  // stopped() reports it
    std::vector<ncclComm_t> comms = {world_, up_, down_};
    for (auto& [group, comm] : groups_) comms.push_back(comm);
    for (ncclComm_t comm : comms) {
      ncclResult_t state = ncclSuccess;
      ncclResult_t result = ncclCommGetAsyncError(comm, &state);
      if (result != ncclSuccess) state = result;
      error = ncclStatus(state, "ncclCommGetAsyncError", rank_, what, comm);
      if (!error.isOk()) break;
    }
  }
  if (error.isOk()) return Status::ok();
  abortComms();
  return error;
}

// Waits for the issued work, oldest first, polling the done events, NCCL's asynchronous errors and
// the abort flag; at the deadline, aborts the communicators (which ends their device work) and names
// the transfer that did not finish.
Status NcclCommunicator::finishIssued() {
  CLEAVE_TRY(makeCurrent());
  CLEAVE_TRY(stopped(issued_.empty() ? std::string("finishing the transfers") : issued_.front().what));
  const Clock::time_point deadline = after(timeout_);
  Backoff backoff;
  while (!issued_.empty()) {
    Issued& oldest = issued_.front();
    cudaError_t state = cudaEventQuery(oldest.done);
    if (state == cudaSuccess) {
      (void)cudaEventDestroy(oldest.done);
      issued_.pop_front();
      continue;
    }
    const std::string where = "rank " + std::to_string(rank_) + ": " + oldest.what;
    if (state != cudaErrorNotReady) {
      abortComms();
      return cudaStatus(state, where);
    }
    CLEAVE_TRY(stopped(oldest.what));
    CLEAVE_TRY(checkAsyncErrors(oldest.what));
    if (Clock::now() >= deadline) {
      abortComms();
      return Status::remoteRank(where + " timed out after " + secondsText(timeout_) +
                                " s (issued, but not finished on the device: a rank taking part has not reached it)");
    }
    backoff.pause();
  }
  return Status::ok();
}

// ---- MPI ----

// Initializes MPI unless it already is (an MpiJob of this process did it): true when initialized
// here. The rank's thread calls MPI while the MPI communicator's service thread may too.
Expected<bool> initializeMpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return Status::internal("MPI was finalized before the NCCL communicator was created");
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED)
      return Status::runtime("MPI was initialized without thread support (the NCCL communicator calls it from the "
                             "rank's thread); initialize it with MPI_THREAD_MULTIPLE");
    return false;
  }
  int provided = 0;
  CLEAVE_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), -1, "");
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return Status::runtime("the MPI library lacks thread support (MPI_THREAD_SERIALIZED at least)");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return true;
}

}  // namespace

// ---- the factories ----

Expected<std::vector<std::unique_ptr<Communicator>>> createNcclCommunicators(std::span<Device* const> devices,
                                                                             double timeout_seconds) {
  if (devices.empty()) return Status::usage("the nccl backend needs at least one cuda device");
  const int size = static_cast<int>(devices.size());
  // 1. One distinct GPU per rank.
  std::vector<CudaContext*> contexts;
  std::map<int, int> rank_of_ordinal;
  for (int rank = 0; rank < size; ++rank) {
    Device* device = devices[static_cast<size_t>(rank)];
    CudaContext* context = device ? cudaContextOf(*device) : nullptr;
    if (!context)
      return Status::usage("rank " + std::to_string(rank) + ": the nccl backend needs a cuda device, not " +
                           (device ? device->name() : std::string("none")));
    auto [it, inserted] = rank_of_ordinal.emplace(context->ordinal(), rank);
    if (!inserted)
      return Status::usage("rank " + std::to_string(rank) + ": GPU " + std::to_string(context->ordinal()) +
                           " already serves rank " + std::to_string(it->second) + " (NCCL needs one GPU per rank)");
    contexts.push_back(context);
  }
  // 2. The endpoints, sharing their abort state and group ids.
  auto shared = std::make_shared<SharedState>();
  shared->group_ids = std::make_unique<InProcessGroupIds>();
  shared->check_message_order = true;
  std::vector<std::unique_ptr<NcclCommunicator>> endpoints;
  std::vector<NcclCommunicator*> raw;
  for (int rank = 0; rank < size; ++rank) {
    endpoints.push_back(
        std::make_unique<NcclCommunicator>(rank, size, timeout_seconds, *contexts[static_cast<size_t>(rank)], shared));
    raw.push_back(endpoints.back().get());
    CLEAVE_TRY(endpoints.back()->setUp());
  }
  // 3. The NCCL communicators.
  std::array<ncclUniqueId, 3> ids;  // world, up, down
  for (ncclUniqueId& id : ids) CLEAVE_NCCL_CHECK(ncclGetUniqueId(&id), -1, "creating the NCCL communicators");
  CLEAVE_TRY(NcclCommunicator::connect(raw, ids));
  std::vector<std::unique_ptr<Communicator>> communicators;
  for (auto& endpoint : endpoints) communicators.push_back(std::move(endpoint));
  return communicators;
}

// Steps: 1. MPI (initialized here unless it already is); 2. rank 0's NCCL ids broadcast to every
// process (non-blocking, polled against the timeout); 3. the NCCL communicators.
Expected<std::unique_ptr<Communicator>> createNcclCommunicatorForProcess(Device& device, double timeout_seconds) {
  CudaContext* context = cudaContextOf(device);
  if (!context) return Status::usage("the nccl backend needs a cuda device, not " + device.name());
  CLEAVE_ASSIGN_OR_RETURN(bool initialized_here, initializeMpi());
  auto shared = std::make_shared<SharedState>();
  shared->finalize_mpi = initialized_here;
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string where = "rank " + std::to_string(rank) + ": creating the NCCL communicator";
  const std::string creating = "creating the NCCL communicator";
  MPI_Comm comm = MPI_COMM_NULL;
  CLEAVE_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm), rank, creating);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  auto group_ids = std::make_unique<MpiGroupIds>(comm);
  shared->mpi_group_ids = group_ids.get();
  shared->group_ids = std::move(group_ids);
  auto endpoint = std::make_unique<NcclCommunicator>(rank, size, timeout_seconds, *context, shared);
  CLEAVE_TRY(endpoint->setUp());

  std::array<ncclUniqueId, 3> ids;  // world, up, down
  if (rank == 0)
    for (ncclUniqueId& id : ids) CLEAVE_NCCL_CHECK(ncclGetUniqueId(&id), rank, creating);
  MPI_Request request;
  CLEAVE_MPI_CHECK(MPI_Ibcast(ids.data(), static_cast<int>(sizeof ids), MPI_BYTE, 0, comm, &request), rank, creating);
  const Clock::time_point deadline = after(timeout_seconds);
  Backoff backoff;
  while (true) {
    int done = 0;
    CLEAVE_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE), rank, creating + ": broadcasting the NCCL ids");
    if (done) break;
    if (Clock::now() >= deadline) {
      shared->failed = true;
      shared->mpi_group_ids->abandon();
      return Status::remoteRank(where + ": timed out after " + secondsText(timeout_seconds) +
                                " s waiting for rank 0's NCCL ids");
    }
    backoff.pause();
  }
  NcclCommunicator* raw = endpoint.get();
  CLEAVE_TRY(NcclCommunicator::connect(std::span<NcclCommunicator* const>(&raw, 1), ids));
  return std::unique_ptr<Communicator>(std::move(endpoint));
}

}  // namespace cleave::runtime
