// MpiCommunicator: the ranks of a plan as the processes of an MPI job (mpirun), one rank each.
#include "runtime/comm/mpi_communicator.h"

#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/comm/collective_algorithms.h"
#include "runtime/comm/mpi_check.h"
#include "runtime/comm/rank_activity.h"
#include "runtime/exec/tensor_blocks.h"

namespace cleave::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Set by the SIGTERM handler; the communicator's service thread acts on it.
volatile sig_atomic_t terminate_requested = 0;
void onTerminate(int) { terminate_requested = 1; }

constexpr int kControlTag = 1;
constexpr int64_t kMaxMessageBytes = int64_t{1} << 30;  // larger transfers travel as several messages
// How long a rank waits for the others' answers to its pings, and, after SIGTERM, how long it keeps
// answering theirs before it exits (mpirun sends SIGKILL one second after SIGTERM).
constexpr double kPingSeconds = 0.3;
constexpr double kTerminationSeconds = 0.6;

// What the ranks' service threads tell each other.
enum ControlKind : int32_t { kPing = 1, kPong = 2, kAbort = 3 };

struct ControlMessage {
  int32_t kind = 0;
  int32_t from = -1;
  int32_t waiting_for = -1;  // pong: the rank the sender is waiting for (-1: none)
  int32_t failed_rank = -1;  // abort: the rank that failed
  uint64_t nonce = 0;        // pong: the nonce of the ping it answers
  char text[480] = {};       // abort: the failed rank's error; pong: what the sender does (both cut to fit)
};

std::string secondsText(double seconds) {
  std::ostringstream text;
  text << seconds;
  return text.str();
}

std::string ranksText(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Pauses between polls of a wait: none for the first polls, then sleeps growing from 2 µs to 100 µs,
// so a waiting rank leaves the cores to ranks that compute.
class Backoff {
 public:
  void pause() {
    if (++polls_ <= 32) return;
    std::this_thread::sleep_for(pause_);
    pause_ = std::min(pause_ * 2, std::chrono::microseconds(100));
  }
  void reset() {
    polls_ = 0;
    pause_ = std::chrono::microseconds(2);
  }

 private:
  int polls_ = 0;
  std::chrono::microseconds pause_{2};
};

// Buffers of finished transfers, kept by each thread for its next ones: a fresh buffer of a few MB
// per collective costs a page fault per 4 KB (a tenth of a data-parallel convnet step went to
// faulting in and zeroing the ring's buffers). A buffer from here holds stale bytes.
std::vector<std::vector<uint8_t>>& spareBuffers() {
  thread_local std::vector<std::vector<uint8_t>> pool;
  return pool;
}

// A buffer of at least `bytes` bytes: `buffer` itself when it is one, else one from the pool.
void ensureBuffer(std::vector<uint8_t>& buffer, int64_t bytes) {
  std::vector<std::vector<uint8_t>>& pool = spareBuffers();
  if (buffer.empty() && !pool.empty()) {
    buffer = std::move(pool.back());
    pool.pop_back();
  }
  if (buffer.size() < static_cast<size_t>(bytes)) buffer.resize(static_cast<size_t>(bytes));
}

void returnBuffer(std::vector<uint8_t>& buffer) {
  if (!buffer.empty()) spareBuffers().push_back(std::move(buffer));
  buffer = {};
}

// The non-blocking transfers of one operation: requests, the peer and expected size of each, and
// the temporary buffers they read or fill (from the thread's spare buffers, and back there after).
struct Transfers {
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  std::vector<int64_t> receive_bytes;  // -1 for a send
  std::vector<std::vector<uint8_t>> buffers;

  Transfers() = default;
  Transfers(const Transfers&) = delete;
  Transfers& operator=(const Transfers&) = delete;
  ~Transfers() {
    for (std::vector<uint8_t>& buffer : buffers) returnBuffer(buffer);
  }

  // A temporary buffer of at least `bytes` bytes that lives as long as the transfers (or, once
  // abandoned, for good: MpiCommunicator::abandon takes the buffers).
  uint8_t* buffer(int64_t bytes) {
    std::vector<uint8_t>& buffer = buffers.emplace_back();
    ensureBuffer(buffer, bytes);
    return buffer.data();
  }
};

// One rank's endpoint over MPI (see MpiJob::createCommunicator): collectives and the plan's messages
// as non-blocking point-to-point transfers, a service thread for control messages (ping, pong,
// abort) and buffered sends.
class MpiCommunicator final : public Communicator {
 public:
  static Expected<std::unique_ptr<Communicator>> create(int rank, int size, double timeout_seconds,
                                                        double stall_seconds);
  ~MpiCommunicator() override;

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
  int abortedBy() const override { return aborted_by_.load(); }

 private:
  friend class MpiRing;
  MpiCommunicator(int rank, int size, double timeout_seconds, double stall_seconds)
      : rank_(rank), size_(size), timeout_(timeout_seconds), stall_seconds_(stall_seconds),
        activity_(rankActivity(rank)) {}

  // One collective call: its description, this rank's position in the group, its tag and deadline.
  struct Call {
    std::string what;  // "all_reduce over ranks {0,1}"
    size_t position = 0;
    int tag = 0;
    Clock::time_point deadline;
  };
  Expected<size_t> positionIn(const std::string& what, std::span<const int> group) const;
  Expected<Call> begin(const std::string& collective, std::span<const int> group) const;
  Clock::time_point deadline() const { return after(timeout_ - pingSeconds()); }
  double pingSeconds() const { return std::min(kPingSeconds, timeout_ / 10); }

  void postSend(Transfers& transfers, const void* data, int64_t bytes, int peer, int tag, MPI_Comm comm);
  void postRecv(Transfers& transfers, void* data, int64_t bytes, int peer, int tag, MPI_Comm comm);
  Status waitAll(Transfers& transfers, const std::string& what, Clock::time_point deadline);
  void abandon(Transfers& transfers);
  Status stoppedError(const std::string& what) const;
  uint64_t pingEveryone();
  std::string diagnose(const std::vector<int>& awaited);
  void warnStalled(const StallClock& clock, const std::string& what, int awaited);

  void sendControl(int peer, const ControlMessage& message);
  bool progressSends();
  bool pollControl();
  void serviceLoop();
  [[noreturn]] void exitOnSigterm();

  const int rank_;
  const int size_;
  const double timeout_;
  const double stall_seconds_;  // a wait this long warns which rank holds it up (0: never)
  RankActivity& activity_;      // this rank's: the rank it waits for and its instructions, told in pongs
  int tag_limit_ = 32767;  // MPI_TAG_UB
  MPI_Comm collectives_ = MPI_COMM_NULL, messages_ = MPI_COMM_NULL, control_ = MPI_COMM_NULL;

  std::atomic<bool> aborted_{false};
  std::atomic<int> aborted_by_{-1};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> terminating_{false};

  mutable std::mutex mutex_;  // guards every field below
  std::condition_variable pong_arrived_;
  std::string abort_text_;
  struct Pong {
    uint64_t nonce = 0;    // of the ping it answers
    int waiting_for = -1;  // the rank the sender waits for
    std::string activity;  // what the sender does (RankActivity::describe)
  };
  std::map<int, Pong> pongs_;  // by rank: its latest answer
  uint64_t next_nonce_ = 0;
  struct PendingSend {
    MPI_Request request;
    std::vector<uint8_t> bytes;
  };
  std::vector<std::unique_ptr<PendingSend>> pending_sends_;  // buffered sends in flight
  std::vector<std::vector<uint8_t>> abandoned_;  // buffers of failed transfers MPI may still touch

  std::thread service_;
  struct sigaction previous_sigterm_ = {};
  struct sigaction previous_sigpipe_ = {};
};

// ---- set-up and shutdown ----

Expected<std::unique_ptr<Communicator>> MpiCommunicator::create(int rank, int size, double timeout_seconds,
                                                                double stall_seconds) {
  std::unique_ptr<MpiCommunicator> communicator(new MpiCommunicator(rank, size, timeout_seconds, stall_seconds));
  // Separate communicators keep collectives, the plan's tagged messages and control messages apart.
  for (MPI_Comm* comm : {&communicator->collectives_, &communicator->messages_, &communicator->control_}) {
    CLEAVE_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, comm), rank, "creating the MPI communicator");
    MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN);
  }
  void* tag_limit = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_limit, &found);
  if (found) communicator->tag_limit_ = *static_cast<int*>(tag_limit);
  struct sigaction action = {};
  action.sa_handler = onTerminate;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, &communicator->previous_sigterm_);
  // A write to the socket of a rank that died (its host crashed) fails with EPIPE instead of killing
  // this rank by SIGPIPE: the rank then names the ranks it lost within the timeout and exits 3
  // (tests/e2e/mpi_hosts.sh once saw a rank of a live host die by SIGPIPE, silently).
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &communicator->previous_sigpipe_);
  communicator->service_ = std::thread([raw = communicator.get()] { raw->serviceLoop(); });
  return std::unique_ptr<Communicator>(std::move(communicator));
}

// Steps: stop the service thread, let buffered sends finish (at most the timeout; after an abort, half
// a second for the abort messages), restore SIGTERM and SIGPIPE.
MpiCommunicator::~MpiCommunicator() {
  stopping_ = true;
  service_.join();
  Clock::time_point deadline = after(aborted_ ? std::min(timeout_, 0.5) : timeout_);
  while (true) {
    progressSends();
    if (pending_sends_.empty()) break;
    if (Clock::now() >= deadline) {
      for (auto& pending : pending_sends_) MPI_Request_free(&pending->request);
      for (auto& pending : pending_sends_) abandoned_.push_back(std::move(pending->bytes));
      pending_sends_.clear();
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  sigaction(SIGTERM, &previous_sigterm_, nullptr);
  sigaction(SIGPIPE, &previous_sigpipe_, nullptr);
}

Expected<size_t> MpiCommunicator::positionIn(const std::string& what, std::span<const int> group) const {
  if (group.empty()) return Status::badInput(what + ": the group is empty");
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i] < 0 || group[i] >= size_)
      return Status::badInput(what + ": rank " + std::to_string(group[i]) + " is not one of the " +
                              std::to_string(size_) + " ranks");
    if (i > 0 && group[i] <= group[i - 1]) return Status::badInput(what + ": the group's ranks are not increasing");
  }
  auto it = std::find(group.begin(), group.end(), rank_);
  if (it == group.end()) return Status::badInput(what + ": rank " + std::to_string(rank_) + " is not in the group");
  return static_cast<size_t>(it - group.begin());
}

// A collective's tag is a hash of its group: calls of one group follow each other in the same order
// on every member, and MPI keeps the messages between two ranks under one tag in order.
Expected<MpiCommunicator::Call> MpiCommunicator::begin(const std::string& collective, std::span<const int> group) const {
  Call call;
  call.what = collective + " over ranks " + groupText(group);
  CLEAVE_ASSIGN_OR_RETURN(call.position, positionIn(call.what, group));
  uint64_t hash = 0xcbf29ce484222325ull;
  for (int member : group) {
    hash ^= static_cast<uint64_t>(member) + 1;
    hash *= 0x100000001b3ull;
  }
  call.tag = static_cast<int>(hash % static_cast<uint64_t>(tag_limit_));
  call.deadline = deadline();
  if (aborted_) return stoppedError(call.what);
  return call;
}

// ---- transfers ----

void MpiCommunicator::postSend(Transfers& transfers, const void* data, int64_t bytes, int peer, int tag, MPI_Comm comm) {
  int64_t offset = 0;
  do {  // a message per piece; an empty transfer is one empty message
    int64_t piece = std::min(bytes - offset, kMaxMessageBytes);
    MPI_Request request;
    MPI_Isend(static_cast<const uint8_t*>(data) + offset, static_cast<int>(piece), MPI_BYTE, peer, tag, comm, &request);
    transfers.requests.push_back(request);
    transfers.peers.push_back(peer);
    transfers.receive_bytes.push_back(-1);
    offset += piece;
  } while (offset < bytes);
}

void MpiCommunicator::postRecv(Transfers& transfers, void* data, int64_t bytes, int peer, int tag, MPI_Comm comm) {
  int64_t offset = 0;
  do {
    int64_t piece = std::min(bytes - offset, kMaxMessageBytes);
    MPI_Request request;
    MPI_Irecv(static_cast<uint8_t*>(data) + offset, static_cast<int>(piece), MPI_BYTE, peer, tag, comm, &request);
    transfers.requests.push_back(request);
    transfers.peers.push_back(peer);
    transfers.receive_bytes.push_back(piece);
    offset += piece;
  } while (offset < bytes);
}

// Steps: poll the requests (with pauses) until all have completed, checking each received message's
// size; stop early when a rank aborts; at the deadline name the ranks not heard from, and ask every
// rank who is at fault. After SIGTERM the wait goes on: the service thread ends the process.
Status MpiCommunicator::waitAll(Transfers& transfers, const std::string& what, Clock::time_point deadline) {
  const int count = static_cast<int>(transfers.requests.size());
  std::vector<int> indices(static_cast<size_t>(count));
  std::vector<MPI_Status> statuses(static_cast<size_t>(count));
  std::vector<bool> done(static_cast<size_t>(count), false);
  int remaining = count;
  Backoff backoff;
  activity_.setWaitingFor(count > 0 ? transfers.peers[0] : -1);
  StallClock stall(stall_seconds_);
  while (remaining > 0) {
    int completed = 0;
    int rc = MPI_Testsome(count, transfers.requests.data(), &completed, indices.data(), statuses.data());
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
      std::vector<int> peers = transfers.peers;
      abandon(transfers);
      return Status::runtime(mpiStatus(rc, "MPI_Testsome", rank_, what).message() + diagnose(peers));
    }
    if (completed != MPI_UNDEFINED && completed > 0) {
      for (int k = 0; k < completed; ++k) {
        const auto i = static_cast<size_t>(indices[static_cast<size_t>(k)]);
        done[i] = true;
        const MPI_Status& status = statuses[static_cast<size_t>(k)];
        const int peer = transfers.peers[i];
        if (rc == MPI_ERR_IN_STATUS && status.MPI_ERROR != MPI_SUCCESS) {
          abandon(transfers);
          if (status.MPI_ERROR == MPI_ERR_TRUNCATE)
            return Status::badInput(what + ": rank " + std::to_string(peer) + " sent more than the " +
                                    std::to_string(transfers.receive_bytes[i]) + " bytes rank " +
                                    std::to_string(rank_) + " expects (their programs do not fit together)");
          return Status::runtime(mpiStatus(status.MPI_ERROR, "MPI_Testsome", rank_,
                                           what + ": the transfer with rank " + std::to_string(peer))
                                     .message() +
                                 diagnose({peer}));
        }
        if (transfers.receive_bytes[i] >= 0) {
          int received = 0;
          MPI_Get_count(&status, MPI_BYTE, &received);
          if (received != transfers.receive_bytes[i]) {
            abandon(transfers);
            return Status::badInput(what + ": rank " + std::to_string(peer) + " sent " + std::to_string(received) +
                                    " bytes where rank " + std::to_string(rank_) + " expects " +
                                    std::to_string(transfers.receive_bytes[i]) +
                                    " (their programs do not fit together)");
          }
        }
      }
      remaining -= completed;
      for (size_t i = 0; i < done.size(); ++i)
        if (!done[i]) {
          activity_.setWaitingFor(transfers.peers[i]);
          break;
        }
      backoff.reset();
      continue;
    }
    if (aborted_) {
      abandon(transfers);
      return stoppedError(what);
    }
    if (!terminating_ && Clock::now() >= deadline) {
      std::vector<int> missing;
      for (size_t i = 0; i < done.size(); ++i)
        if (!done[i] && std::find(missing.begin(), missing.end(), transfers.peers[i]) == missing.end())
          missing.push_back(transfers.peers[i]);
      std::sort(missing.begin(), missing.end());
      abandon(transfers);
      return Status::remoteRank(what + " timed out after " + secondsText(timeout_) + " s waiting for " +
                                ranksText(missing) + diagnose(missing));
    }
    if (!terminating_ && stall.due()) warnStalled(stall, what, activity_.waitingFor());
    backoff.pause();
  }
  activity_.setWaitingFor(-1);
  return Status::ok();
}

// Gives up on transfers that have not completed: receives are cancelled, sends left to finish, and
// the buffers kept, since MPI may still use them.
void MpiCommunicator::abandon(Transfers& transfers) {
  for (size_t i = 0; i < transfers.requests.size(); ++i) {
    if (transfers.requests[i] == MPI_REQUEST_NULL) continue;
    if (transfers.receive_bytes[i] >= 0) MPI_Cancel(&transfers.requests[i]);
    MPI_Request_free(&transfers.requests[i]);
  }
  std::lock_guard lock(mutex_);
  for (auto& buffer : transfers.buffers) abandoned_.push_back(std::move(buffer));
  transfers.buffers.clear();
  activity_.setWaitingFor(-1);
}

// kRemoteRank when another rank failed (this rank's own abort keeps kRuntime: its error is reported).
Status MpiCommunicator::stoppedError(const std::string& what) const {
  std::lock_guard lock(mutex_);
  const int by = aborted_by_.load();
  return Status::error(by == rank_ ? ErrorKind::kRuntime : ErrorKind::kRemoteRank,
                       what + " stopped: rank " + std::to_string(by) + " failed" +
                           (abort_text_.empty() ? "" : " (" + abort_text_ + ")"));
}

// Pings every other rank and waits briefly (pingSeconds) for their answers; returns the pings' nonce.
uint64_t MpiCommunicator::pingEveryone() {
  uint64_t nonce;
  {
    std::lock_guard lock(mutex_);
    nonce = ++next_nonce_;
  }
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    ControlMessage ping;
    ping.kind = kPing;
    ping.from = rank_;
    ping.nonce = nonce;
    sendControl(peer, ping);
  }
  std::unique_lock lock(mutex_);
  pong_arrived_.wait_until(lock, after(pingSeconds()), [&] {
    for (int peer = 0; peer < size_; ++peer) {
      auto it = pongs_.find(peer);
      if (peer != rank_ && (it == pongs_.end() || it->second.nonce != nonce)) return false;
    }
    return true;
  });
  return nonce;
}

// Pings every other rank: a rank that does not answer is dead (or its process hangs); when all
// answer, the chain of who waits for whom, from the first awaited rank, ends at the rank at fault.
// Returns the finding as "; ..." to append to a timeout's message.
std::string MpiCommunicator::diagnose(const std::vector<int>& awaited) {
  const uint64_t nonce = pingEveryone();
  std::lock_guard lock(mutex_);
  std::vector<int> silent;
  for (int peer = 0; peer < size_; ++peer) {
    auto it = pongs_.find(peer);
    if (peer != rank_ && (it == pongs_.end() || it->second.nonce != nonce)) silent.push_back(peer);
  }
  if (!silent.empty())
    return "; " + ranksText(silent) + (silent.size() == 1 ? " does" : " do") +
           " not answer (the process died or hangs)";
  if (awaited.empty()) return "";
  int culprit = awaited[0];
  std::set<int> seen = {culprit};
  std::string chain;
  while (true) {
    int next = pongs_[culprit].waiting_for;
    if (next < 0 || next == rank_ || seen.count(next)) break;
    chain += "rank " + std::to_string(culprit) + " waits for rank " + std::to_string(next) + ", ";
    culprit = next;
    seen.insert(culprit);
  }
  return "; " + chain + "rank " + std::to_string(culprit) + " is running but has not arrived (it is " +
         pongs_[culprit].activity + ")";
}

// Warns that this rank has waited long for `awaited`: pings every rank, then names the rank at the
// end of the chain of waits and what it does, or that it does not answer.
void MpiCommunicator::warnStalled(const StallClock& clock, const std::string& what, int awaited) {
  if (awaited < 0) return;
  const uint64_t nonce = pingEveryone();
  std::string chain;
  {
    std::lock_guard lock(mutex_);
    chain = stallChain(rank_, awaited, [&](int rank) {
      auto it = pongs_.find(rank);
      if (it == pongs_.end() || it->second.nonce != nonce) return StalledRank{rank, -1, "", false};
      return StalledRank{rank, it->second.waiting_for, it->second.activity, true};
    });
  }
  printStallWarning(stallWarningStart(rank_, clock.waited(), what, awaited) + "; " + chain);
}

// ---- control messages and the service thread ----

void MpiCommunicator::sendControl(int peer, const ControlMessage& message) {
  auto pending = std::make_unique<PendingSend>();
  pending->bytes.resize(sizeof(ControlMessage));
  std::memcpy(pending->bytes.data(), &message, sizeof(ControlMessage));
  MPI_Isend(pending->bytes.data(), static_cast<int>(sizeof(ControlMessage)), MPI_BYTE, peer, kControlTag, control_,
            &pending->request);
  std::lock_guard lock(mutex_);
  pending_sends_.push_back(std::move(pending));
}

// Tests the buffered sends in flight and forgets those done; true when some were pending.
bool MpiCommunicator::progressSends() {
  std::lock_guard lock(mutex_);
  if (pending_sends_.empty()) return false;
  for (auto& pending : pending_sends_) {
    int done = 0;
    MPI_Test(&pending->request, &done, MPI_STATUS_IGNORE);
    if (done) pending.reset();
  }
  std::erase(pending_sends_, nullptr);
  return true;
}

// Answers one control message if one has arrived; true when one had.
bool MpiCommunicator::pollControl() {
  int arrived = 0;
  MPI_Status status;
  ControlMessage message;
  MPI_Iprobe(MPI_ANY_SOURCE, kControlTag, control_, &arrived, &status);
  if (!arrived) return false;
  MPI_Recv(&message, static_cast<int>(sizeof message), MPI_BYTE, status.MPI_SOURCE, kControlTag, control_,
           MPI_STATUS_IGNORE);
  if (message.kind == kPing) {
    ControlMessage pong;
    pong.kind = kPong;
    pong.from = rank_;
    pong.waiting_for = activity_.waitingFor();
    pong.nonce = message.nonce;
    std::string activity = activity_.describe();
    std::strncpy(pong.text, activity.c_str(), sizeof pong.text - 1);
    sendControl(message.from, pong);
  } else if (message.kind == kPong) {
    std::lock_guard lock(mutex_);
    message.text[sizeof message.text - 1] = '\0';
    pongs_[message.from] = Pong{message.nonce, message.waiting_for, message.text};
    pong_arrived_.notify_all();
  } else if (message.kind == kAbort) {
    std::lock_guard lock(mutex_);
    if (!aborted_) {
      message.text[sizeof message.text - 1] = '\0';
      abort_text_ = message.text;
      aborted_by_ = message.failed_rank;
      aborted_ = true;
    }
  }
  return true;
}

// Answers control messages and moves buffered sends on (MPI progresses only inside MPI calls), until
// the communicator stops; acts on SIGTERM.
void MpiCommunicator::serviceLoop() {
  while (!stopping_) {
    bool busy = pollControl();
    busy = progressSends() || busy;
    if (terminate_requested) exitOnSigterm();
    std::this_thread::sleep_for(busy ? std::chrono::microseconds(20) : std::chrono::microseconds(1000));
  }
}

// mpirun ends the job (it sends SIGTERM once a rank died or failed): says why, from this rank's view
// (the abort it received, or the ranks that do not answer pings within kPingSeconds), keeps
// answering the others' pings until kTerminationSeconds after the signal, and exits with status 3.
void MpiCommunicator::exitOnSigterm() {
  terminating_ = true;
  Clock::time_point exit_at = after(kTerminationSeconds);
  std::string reason;
  if (aborted_) {
    std::lock_guard lock(mutex_);
    reason = "rank " + std::to_string(aborted_by_.load()) + " failed" +
             (abort_text_.empty() ? "" : " (" + abort_text_ + ")");
  } else {
    uint64_t nonce;
    {
      std::lock_guard lock(mutex_);
      nonce = ++next_nonce_;
    }
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      ControlMessage ping;
      ping.kind = kPing;
      ping.from = rank_;
      ping.nonce = nonce;
      sendControl(peer, ping);
    }
    Clock::time_point until = after(kPingSeconds);
    while (Clock::now() < until) {
      bool busy = pollControl();
      busy = progressSends() || busy;
      if (!busy) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::vector<int> silent;
    {
      std::lock_guard lock(mutex_);
      for (int peer = 0; peer < size_; ++peer) {
        auto it = pongs_.find(peer);
        if (peer != rank_ && (it == pongs_.end() || it->second.nonce != nonce)) silent.push_back(peer);
      }
    }
    // Several silent ranks: some may be stopping at the same time (mpirun stops every host at once).
    reason = silent.empty()      ? "every other rank still answers (the job was stopped from outside)"
             : silent.size() == 1 ? ranksText(silent) + " died (no answer; mpirun names the process and its signal)"
                                  : ranksText(silent) + " died or are stopping too (no answer; mpirun names the "
                                                        "process lost first and its signal)";
  }
  if (const int awaited = activity_.waitingFor(); awaited >= 0)
    reason += "; it was waiting for rank " + std::to_string(awaited);
  // Said at once: mpirun may kill the remaining ranks as soon as the first of them exits.
  std::string message = "cleave: error: rank " + std::to_string(rank_) + ": stopped by mpirun (SIGTERM): " + reason + "\n";
  ssize_t written = ::write(STDERR_FILENO, message.data(), message.size());
  (void)written;
  while (Clock::now() < exit_at) {
    bool busy = pollControl();
    busy = progressSends() || busy;
    if (!busy) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::_Exit(3);
}

void MpiCommunicator::abort(const Status& error) {
  std::string text;
  {
    std::lock_guard lock(mutex_);
    if (aborted_) return;
    aborted_by_ = rank_;
    aborted_ = true;
    text = error.message();
  }
  ControlMessage message;
  message.kind = kAbort;
  message.from = rank_;
  message.failed_rank = rank_;
  std::strncpy(message.text, text.c_str(), sizeof message.text - 1);
  for (int peer = 0; peer < size_; ++peer)
    if (peer != rank_) sendControl(peer, message);
}

// ---- the ring all-reduce over messages ----

// The ring's transport over MPI: each step sends this rank's chunk to the successor and receives the
// predecessor's into a buffer.
class MpiRing final : public RingTransport {
 public:
  MpiRing(MpiCommunicator& communicator, const MpiCommunicator::Call& call, std::span<const TensorView> bucket,
          int predecessor, int successor)
      : communicator_(communicator), call_(call), bucket_(bucket), predecessor_(predecessor), successor_(successor) {}
  ~MpiRing() override {
    returnBuffer(packed_);
    returnBuffer(received_);
  }

  Expected<std::vector<ElementRun>> exchange(int64_t, int64_t send_begin, int64_t send_end, int64_t receive_begin,
                                             int64_t receive_end) override {
    const int64_t element_bytes = dtypeSize(bucket_[0].type.dtype);
    Transfers transfers;
    // 1. What to send: the chunk in place when it lies in one tensor, else packed.
    std::vector<ElementRun> runs = flatRuns(bucket_, send_begin, send_end);
    const int64_t send_bytes = (send_end - send_begin) * element_bytes;
    const uint8_t* send_data = runs.size() == 1 ? runs[0].data : nullptr;
    if (runs.size() > 1) {
      ensureBuffer(packed_, send_bytes);
      uint8_t* packed = packed_.data();
      for (const ElementRun& run : runs) {
        std::memcpy(packed, run.data, static_cast<size_t>(run.count * element_bytes));
        packed += run.count * element_bytes;
      }
      send_data = packed_.data();
    }
    // 2. Both transfers at once, then wait for them.
    const int64_t receive_bytes = (receive_end - receive_begin) * element_bytes;
    ensureBuffer(received_, receive_bytes);
    communicator_.postRecv(transfers, received_.data(), receive_bytes, predecessor_, call_.tag,
                           communicator_.collectives_);
    communicator_.postSend(transfers, send_data, send_bytes, successor_, call_.tag, communicator_.collectives_);
    if (Status waited = communicator_.waitAll(transfers, call_.what, call_.deadline); !waited) {
      // Abandoned transfers may still touch their buffers: like abandon(), keep them for good.
      std::lock_guard lock(communicator_.mutex_);
      communicator_.abandoned_.push_back(std::exchange(received_, {}));
      communicator_.abandoned_.push_back(std::exchange(packed_, {}));
      return waited;
    }
    return std::vector<ElementRun>{ElementRun{received_.data(), receive_end - receive_begin}};
  }
  void stepDone(int64_t) override {}

 private:
  MpiCommunicator& communicator_;
  const MpiCommunicator::Call& call_;
  std::span<const TensorView> bucket_;
  int predecessor_, successor_;
  // The packed chunk to send and the received one (read until the next step), from the thread's
  // spare buffers and back there when the ring is done.
  std::vector<uint8_t> packed_, received_;
};

// ---- collectives ----

Status MpiCommunicator::allReduce(std::span<const int> group, std::span<const TensorView> inputs,
                                  std::span<const TensorView> outputs, ReduceOp op) {
  // 1. Check the bucket and copy each input into its output, where the ring works.
  const std::string what = "all_reduce over ranks " + groupText(group);
  CLEAVE_TRY(checkAllReduceBucket(what, inputs, outputs));
  int64_t total = 0;
  for (const TensorView& input : inputs) total += input.type.numel();
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].data != outputs[i].data)
      std::memcpy(outputs[i].data, inputs[i].data, static_cast<size_t>(inputs[i].type.bytes()));
  const auto n = static_cast<int64_t>(group.size());
  if (n == 1) return positionIn(what, group).status();
  if (inputs.empty()) return Status::ok();

  // 2. The ring (collective_algorithms.h), exactly as the local communicator runs it.
  CLEAVE_ASSIGN_OR_RETURN(Call call, begin("all_reduce", group));
  const auto p = static_cast<int64_t>(call.position);
  MpiRing ring(*this, call, outputs, group[static_cast<size_t>((p + n - 1) % n)],
               group[static_cast<size_t>((p + 1) % n)]);
  return ringAllReduce(outputs, total, p, n, op, ring);
}

// Every member sends its input to every other; the blocks land in group order.
Status MpiCommunicator::allGather(std::span<const int> group, const TensorView& input, const TensorView& output,
                                  int64_t dim) {
  const std::string what = "all_gather over ranks " + groupText(group);
  const auto n = static_cast<int64_t>(group.size());
  const Shape& in = input.type.shape;
  const Shape& out = output.type.shape;
  CLEAVE_TRY(checkAllGather(what, n, input, output, dim));
  CLEAVE_ASSIGN_OR_RETURN(Call call, begin("all_gather", group));

  const int64_t bytes = input.type.bytes();
  Transfers transfers;
  std::vector<const uint8_t*> blocks(group.size(), static_cast<const uint8_t*>(input.data));
  for (size_t q = 0; q < group.size(); ++q) {
    if (q == call.position) continue;
    uint8_t* block = transfers.buffer(bytes);
    blocks[q] = block;
    postRecv(transfers, block, bytes, group[q], call.tag, collectives_);
    postSend(transfers, input.data, bytes, group[q], call.tag, collectives_);
  }
  CLEAVE_TRY(waitAll(transfers, call.what, call.deadline));
  Shape zero(in.size(), 0);
  for (size_t q = 0; q < group.size(); ++q) {
    Shape at(in.size(), 0);
    at[static_cast<size_t>(dim)] = static_cast<int64_t>(q) * in[static_cast<size_t>(dim)];
    copyBox(blocks[q], in, zero, output.data, out, at, in, dtypeSize(input.type.dtype));
  }
  return Status::ok();
}

// Every member sends each other member that member's block of its input; each rank reduces the
// blocks in group order, as the local communicator does.
Status MpiCommunicator::reduceScatter(std::span<const int> group, const TensorView& input, const TensorView& output,
                                      int64_t dim, ReduceOp op) {
  const std::string what = "reduce_scatter over ranks " + groupText(group);
  const auto n = static_cast<int64_t>(group.size());
  const Shape& in = input.type.shape;
  const Shape& out = output.type.shape;
  CLEAVE_TRY(checkReduceScatter(what, n, input, output, dim));
  CLEAVE_ASSIGN_OR_RETURN(Call call, begin("reduce_scatter", group));

  // 1. Every member's block q of the input, packed; this rank's own block comes from its input.
  const DType dtype = input.type.dtype;
  const int64_t element_bytes = dtypeSize(dtype);
  const int64_t bytes = output.type.bytes();
  Transfers transfers;
  Shape zero(in.size(), 0);
  auto blockStart = [&](size_t q) {
    Shape start(in.size(), 0);
    start[static_cast<size_t>(dim)] = static_cast<int64_t>(q) * out[static_cast<size_t>(dim)];
    return start;
  };
  std::vector<const uint8_t*> blocks(group.size(), nullptr);
  for (size_t q = 0; q < group.size(); ++q) {
    uint8_t* block = transfers.buffer(bytes);
    if (q == call.position) {
      copyBox(input.data, in, blockStart(q), block, out, zero, out, element_bytes);
      blocks[q] = block;
      continue;
    }
    copyBox(input.data, in, blockStart(q), block, out, zero, out, element_bytes);
    postSend(transfers, block, bytes, group[q], call.tag, collectives_);
    uint8_t* received = transfers.buffer(bytes);
    blocks[q] = received;
    postRecv(transfers, received, bytes, group[q], call.tag, collectives_);
  }
  CLEAVE_TRY(waitAll(transfers, call.what, call.deadline));

  // 2. Reduce in group order.
  std::memcpy(output.data, blocks[0], static_cast<size_t>(bytes));
  for (size_t q = 1; q < group.size(); ++q) combineElements(dtype, output.data, blocks[q], output.type.numel(), op);
  if (op == ReduceOp::kMean) divideElements(dtype, output.data, output.type.numel(), n);
  return Status::ok();
}

// Block q (along split_dim) of this rank's input goes to the group's q-th rank; the block from the
// q-th rank lands at position q along concat_dim.
Status MpiCommunicator::allToAll(std::span<const int> group, const TensorView& input, const TensorView& output,
                                 int64_t split_dim, int64_t concat_dim) {
  const std::string what = "all_to_all over ranks " + groupText(group);
  const auto n = static_cast<int64_t>(group.size());
  const Shape& in = input.type.shape;
  const Shape& out = output.type.shape;
  CLEAVE_TRY(checkAllToAll(what, n, input, output, split_dim, concat_dim));
  Shape block = in;
  block[static_cast<size_t>(split_dim)] /= n;
  CLEAVE_ASSIGN_OR_RETURN(Call call, begin("all_to_all", group));

  const int64_t element_bytes = dtypeSize(input.type.dtype);
  const int64_t bytes = TensorType{input.type.dtype, block}.bytes();
  Shape zero(in.size(), 0);
  Transfers transfers;
  std::vector<const uint8_t*> blocks(group.size(), nullptr);
  for (size_t q = 0; q < group.size(); ++q) {
    Shape from(in.size(), 0);
    from[static_cast<size_t>(split_dim)] = static_cast<int64_t>(q) * block[static_cast<size_t>(split_dim)];
    uint8_t* packed = transfers.buffer(bytes);
    copyBox(input.data, in, from, packed, block, zero, block, element_bytes);
    if (q == call.position) {
      blocks[q] = packed;
      continue;
    }
    postSend(transfers, packed, bytes, group[q], call.tag, collectives_);
    uint8_t* received = transfers.buffer(bytes);
    blocks[q] = received;
    postRecv(transfers, received, bytes, group[q], call.tag, collectives_);
  }
  CLEAVE_TRY(waitAll(transfers, call.what, call.deadline));
  for (size_t q = 0; q < group.size(); ++q) {
    Shape to(in.size(), 0);
    to[static_cast<size_t>(concat_dim)] = static_cast<int64_t>(q) * block[static_cast<size_t>(concat_dim)];
    copyBox(blocks[q], block, zero, output.data, out, to, block, element_bytes);
  }
  return Status::ok();
}

// An empty message to and from every other member.
Status MpiCommunicator::barrier(std::span<const int> group) {
  CLEAVE_ASSIGN_OR_RETURN(Call call, begin("barrier", group));
  Transfers transfers;
  for (size_t q = 0; q < group.size(); ++q) {
    if (q == call.position) continue;
    postRecv(transfers, nullptr, 0, group[q], call.tag, collectives_);
    postSend(transfers, nullptr, 0, group[q], call.tag, collectives_);
  }
  return waitAll(transfers, call.what, call.deadline);
}

// ---- the plan's messages ----

Status MpiCommunicator::send(int peer, int tag, std::span<const uint8_t> bytes) {
  const std::string what = "send to rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  if (peer < 0 || peer >= size_)
    return Status::badInput(what + ": rank " + std::to_string(peer) + " is not one of the " + std::to_string(size_) +
                            " ranks");
  if (tag < 0 || tag > tag_limit_)
    return Status::badInput(what + ": MPI tags lie in [0, " + std::to_string(tag_limit_) + "]");
  if (aborted_) return stoppedError(what);
  // Buffered: the bytes are copied and the service thread sees the send through.
  auto pending = std::make_unique<PendingSend>();
  pending->bytes.assign(bytes.begin(), bytes.end());
  if (static_cast<int64_t>(bytes.size()) > kMaxMessageBytes)
    return Status::badInput(what + ": " + std::to_string(bytes.size()) + " bytes is more than one message carries (" +
                            std::to_string(kMaxMessageBytes) + ")");
  MPI_Isend(pending->bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, peer, tag, messages_, &pending->request);
  std::lock_guard lock(mutex_);
  pending_sends_.push_back(std::move(pending));
  return Status::ok();
}

Status MpiCommunicator::recv(int peer, int tag, std::span<uint8_t> bytes) {
  const std::string what = "recv from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  if (peer < 0 || peer >= size_)
    return Status::badInput(what + ": rank " + std::to_string(peer) + " is not one of the " + std::to_string(size_) +
                            " ranks");
  if (tag < 0 || tag > tag_limit_)
    return Status::badInput(what + ": MPI tags lie in [0, " + std::to_string(tag_limit_) + "]");
  if (static_cast<int64_t>(bytes.size()) > kMaxMessageBytes)
    return Status::badInput(what + ": " + std::to_string(bytes.size()) + " bytes is more than one message carries (" +
                            std::to_string(kMaxMessageBytes) + ")");
  if (aborted_) return stoppedError(what);
  Transfers transfers;
  postRecv(transfers, bytes.data(), static_cast<int64_t>(bytes.size()), peer, tag, messages_);
  return waitAll(transfers, what, deadline());
}

}  // namespace

// ---- the job ----

Expected<std::unique_ptr<MpiJob>> MpiJob::join() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return Status::internal("MPI is already initialized in this process");
  int provided = 0;
  CLEAVE_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), -1, "");
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    return Status::runtime("the MPI library does not support MPI_THREAD_MULTIPLE (a rank's compute and "
                           "communication threads both call MPI); use Open MPI 4.1 built with thread support");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 0, local_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm host;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host) == MPI_SUCCESS) {
    MPI_Comm_size(host, &local_size);
    MPI_Comm_free(&host);
  }
  return std::unique_ptr<MpiJob>(new MpiJob(rank, size, local_size));
}

MpiJob::~MpiJob() {
  if (!failed_) MPI_Finalize();
}

Expected<std::unique_ptr<Communicator>> MpiJob::createCommunicator(double timeout_seconds, double stall_seconds) {
  return MpiCommunicator::create(rank_, size_, timeout_seconds, stall_seconds);
}

}  // namespace cleave::runtime
