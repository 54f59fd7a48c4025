// LocalCommunicator: the ranks of a plan as threads of one process, communicating through shared memory.
#include "runtime/comm/local_communicator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "runtime/comm/collective_algorithms.h"
#include "runtime/comm/rank_activity.h"
#include "runtime/exec/tensor_blocks.h"

namespace cleave::runtime {
namespace {

using Clock = std::chrono::steady_clock;

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

// ---- shared state ----

// One rank's part in a collective: the tensors it brought and how far it got.
struct Member {
  std::vector<TensorView> inputs;
  std::vector<TensorView> outputs;
  int64_t progress = -1;  // -1: not arrived; then the number of steps it completed
};

// One collective call of a group, met by its members.
struct Rendezvous {
  std::string collective;
  std::vector<Member> members;  // by position in the group
  size_t left = 0;              // members done with it
};

// What the endpoints of one process share; every field is guarded by `mutex`.
struct LocalWorld {
  LocalWorld(int size, double timeout_seconds, double stall_seconds)
      : size(size), timeout_seconds(timeout_seconds), stall_seconds(stall_seconds) {}
  const int size;
  const double timeout_seconds;
  const double stall_seconds;  // a rank waiting this long warns which rank holds it up (0: never)
  std::mutex mutex;
  std::condition_variable changed;
  bool aborted = false;
  int aborted_by = -1;
  // Open collectives by (group, the group's call number).
  std::map<std::pair<std::vector<int>, int64_t>, std::shared_ptr<Rendezvous>> rendezvous;
  // Sent and not yet received messages by (from, to, tag), oldest first.
  std::map<std::tuple<int, int, int>, std::deque<std::vector<uint8_t>>> mailboxes;
};

class SharedMemoryRing;

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalWorld> world, int rank)
      : world_(std::move(world)), rank_(rank), activity_(rankActivity(rank)) {}

  int rank() const override { return rank_; }
  int worldSize() const override { return world_->size; }

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
  int abortedBy() const override {
    std::lock_guard lock(world_->mutex);
    return world_->aborted_by;
  }

 private:
  // A collective this rank has joined.
  struct Joined {
    std::shared_ptr<Rendezvous> rendezvous;
    size_t position = 0;  // this rank's place in the group
    std::vector<int> group;
    std::string what;  // "all_reduce over ranks {0,1}", for errors
    Clock::time_point deadline;
  };

  Expected<size_t> positionIn(const std::string& what, std::span<const int> group) const;
  Expected<Joined> join(const std::string& collective, std::span<const int> group, Member member);
  Status waitFor(std::unique_lock<std::mutex>& lock, const Joined& joined, size_t position, int64_t progress);
  Status waitForAll(const Joined& joined, int64_t progress);
  void setProgress(const Joined& joined, int64_t progress);
  void leave(const Joined& joined);
  Status stoppedError(const std::string& what) const;
  Status mismatch(const Joined& joined, const std::string& detail);
  void warnStalled(const StallClock& clock, const std::string& what, int awaited) const;

  friend class SharedMemoryRing;
  std::shared_ptr<LocalWorld> world_;
  int rank_;
  RankActivity& activity_;
  std::map<std::vector<int>, int64_t> next_call_;  // per group: the number of its next collective
};

Expected<size_t> LocalCommunicator::positionIn(const std::string& what, std::span<const int> group) const {
  if (group.empty()) return Status::badInput(what + ": the group is empty");
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i] < 0 || group[i] >= world_->size)
      return Status::badInput(what + ": rank " + std::to_string(group[i]) + " is not one of the " +
                              std::to_string(world_->size) + " ranks");
    if (i > 0 && group[i] <= group[i - 1]) return Status::badInput(what + ": the group's ranks are not increasing");
  }
  auto it = std::find(group.begin(), group.end(), rank_);
  if (it == group.end()) return Status::badInput(what + ": rank " + std::to_string(rank_) + " is not in the group");
  return static_cast<size_t>(it - group.begin());
}

// kRemoteRank when another rank failed (this rank's own abort keeps kRuntime: its error is reported).
Status LocalCommunicator::stoppedError(const std::string& what) const {
  const int by = world_->aborted_by;
  return Status::error(by == rank_ ? ErrorKind::kRuntime : ErrorKind::kRemoteRank,
                       what + " stopped: rank " + std::to_string(by) + " failed");
}

// Steps: check the group, take the group's next call number, then under the lock find or open the
// rendezvous of that call and put this rank's tensors in it.
Expected<LocalCommunicator::Joined> LocalCommunicator::join(const std::string& collective, std::span<const int> group,
                                                            Member member) {
  Joined joined;
  joined.group.assign(group.begin(), group.end());
  joined.what = collective + " over ranks " + groupText(group);
  CLEAVE_ASSIGN_OR_RETURN(joined.position, positionIn(joined.what, group));
  int64_t call = next_call_[joined.group]++;
  joined.deadline = Clock::now() +
                    std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(world_->timeout_seconds));
  std::unique_lock lock(world_->mutex);
  if (world_->aborted) return stoppedError(joined.what);
  std::shared_ptr<Rendezvous>& slot = world_->rendezvous[{joined.group, call}];
  if (!slot) {
    slot = std::make_shared<Rendezvous>();
    slot->collective = collective;
    slot->members.resize(group.size());
  }
  joined.rendezvous = slot;
  if (slot->collective != collective) {
    lock.unlock();
    return mismatch(joined, "rank " + std::to_string(rank_) + " calls " + collective + " where another rank called " +
                                slot->collective);
  }
  member.progress = 0;
  slot->members[joined.position] = std::move(member);
  world_->changed.notify_all();
  return joined;
}

// Waits until the member at `position` has completed `progress` steps; a timeout names the group's
// ranks that have not arrived (or, when all have, the one waited for). A long wait warns which rank
// holds it up and what that rank does (warnStalled).
Status LocalCommunicator::waitFor(std::unique_lock<std::mutex>& lock, const Joined& joined, size_t position,
                                  int64_t progress) {
  const auto& members = joined.rendezvous->members;
  auto missing = [&] {
    std::vector<int> ranks;
    for (size_t i = 0; i < members.size(); ++i)
      if (members[i].progress < 0) ranks.push_back(joined.group[i]);
    if (ranks.empty()) ranks.push_back(joined.group[position]);
    return ranks;
  };
  if (world_->aborted) return stoppedError(joined.what);
  if (members[position].progress >= progress) return Status::ok();
  WaitingFor waiting(activity_, joined.group[position]);
  StallClock stall(world_->stall_seconds);
  while (true) {
    if (world_->aborted) return stoppedError(joined.what);
    if (members[position].progress >= progress) return Status::ok();
    if (world_->changed.wait_until(lock, std::min(joined.deadline, stall.next())) == std::cv_status::timeout &&
        members[position].progress < progress && !world_->aborted) {
      if (Clock::now() >= joined.deadline)
        return Status::remoteRank(joined.what + " timed out after " + secondsText(world_->timeout_seconds) +
                                  " s waiting for " + ranksText(missing()));
      if (stall.due()) warnStalled(stall, joined.what, missing()[0]);
    }
  }
}

// Warns that this rank has waited long for `awaited`, naming the rank at the end of the chain of
// waits and what it does. Called with the world's lock held (other ranks' activities are atomics).
void LocalCommunicator::warnStalled(const StallClock& clock, const std::string& what, int awaited) const {
  std::string chain = stallChain(rank_, awaited, [](int rank) {
    const RankActivity& activity = rankActivity(rank);
    return StalledRank{rank, activity.waitingFor(), activity.describe(), true};
  });
  printStallWarning(stallWarningStart(rank_, clock.waited(), what, awaited) + "; " + chain);
}

Status LocalCommunicator::waitForAll(const Joined& joined, int64_t progress) {
  std::unique_lock lock(world_->mutex);
  for (size_t i = 0; i < joined.rendezvous->members.size(); ++i) CLEAVE_TRY(waitFor(lock, joined, i, progress));
  return Status::ok();
}

void LocalCommunicator::setProgress(const Joined& joined, int64_t progress) {
  std::lock_guard lock(world_->mutex);
  joined.rendezvous->members[joined.position].progress = progress;
  world_->changed.notify_all();
}

// Leaves the rendezvous; the last member to leave closes it.
void LocalCommunicator::leave(const Joined& joined) {
  std::lock_guard lock(world_->mutex);
  if (++joined.rendezvous->left == joined.rendezvous->members.size()) {
    for (auto it = world_->rendezvous.begin(); it != world_->rendezvous.end(); ++it) {
      if (it->second == joined.rendezvous) {
        world_->rendezvous.erase(it);
        break;
      }
    }
  }
}

// Ranks disagree about a collective: the plan's programs do not fit together. Stops everyone.
Status LocalCommunicator::mismatch(const Joined& joined, const std::string& detail) {
  Status error = Status::badInput(joined.what + ": " + detail);
  abort(error);
  return error;
}

void LocalCommunicator::abort(const Status& error) {
  std::lock_guard lock(world_->mutex);
  if (!world_->aborted) {
    world_->aborted = true;
    world_->aborted_by = rank_;
  }
  world_->changed.notify_all();
}

// The ring of an all-reduce through shared memory: a rank reads its predecessor's chunk in place.
// It starts step T once its predecessor has finished step T-1 (the chunk is ready) and its successor
// has finished step T+1-n (the successor no longer reads the chunk about to be overwritten).
class SharedMemoryRing final : public RingTransport {
 public:
  SharedMemoryRing(LocalCommunicator& communicator, const LocalCommunicator::Joined& joined, size_t predecessor,
                   size_t successor)
      : communicator_(communicator), joined_(joined), predecessor_(predecessor), successor_(successor) {}
  Expected<std::vector<ElementRun>> exchange(int64_t step, int64_t, int64_t, int64_t receive_begin,
                                             int64_t receive_end) override {
    const auto n = static_cast<int64_t>(joined_.group.size());
    {
      std::unique_lock lock(communicator_.world_->mutex);
      CLEAVE_TRY(communicator_.waitFor(lock, joined_, predecessor_, step));
      CLEAVE_TRY(communicator_.waitFor(lock, joined_, successor_, step + 2 - n));
    }
    return flatRuns(joined_.rendezvous->members[predecessor_].outputs, receive_begin, receive_end);
  }
  void stepDone(int64_t step) override { communicator_.setProgress(joined_, step + 1); }

 private:
  LocalCommunicator& communicator_;
  const LocalCommunicator::Joined& joined_;
  size_t predecessor_, successor_;
};

// Ring all-reduce (collective_algorithms.h) over the members' outputs, read in place; a rank leaves
// once its successor has finished reading from it.
Status LocalCommunicator::allReduce(std::span<const int> group, std::span<const TensorView> inputs,
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
  const DType dtype = inputs[0].type.dtype;

  // 2. Meet the group; every member must bring the same bucket layout.
  Member member;
  member.outputs.assign(outputs.begin(), outputs.end());
  CLEAVE_ASSIGN_OR_RETURN(Joined joined, join("all_reduce", group, std::move(member)));
  const auto p = static_cast<int64_t>(joined.position);
  const size_t predecessor = static_cast<size_t>((p + n - 1) % n), successor = static_cast<size_t>((p + 1) % n);
  auto& members = joined.rendezvous->members;
  {
    std::unique_lock lock(world_->mutex);
    CLEAVE_TRY(waitFor(lock, joined, predecessor, 0));
  }
  const std::vector<TensorView>& mine = members[joined.position].outputs;
  const std::vector<TensorView>& theirs = members[predecessor].outputs;
  bool same_layout = theirs.size() == mine.size();
  for (size_t i = 0; same_layout && i < mine.size(); ++i)
    same_layout = theirs[i].type.numel() == mine[i].type.numel() && theirs[i].type.dtype == dtype;
  if (!same_layout)
    return mismatch(joined, "rank " + std::to_string(joined.group[predecessor]) + " and rank " + std::to_string(rank_) +
                                " bring buckets of different tensors");

  // 3. The 2(n-1) ring steps.
  SharedMemoryRing ring(*this, joined, predecessor, successor);
  CLEAVE_TRY(ringAllReduce(mine, total, p, n, op, ring));

  // 4. Leave once the successor has read everything it needs from this rank.
  {
    std::unique_lock lock(world_->mutex);
    CLEAVE_TRY(waitFor(lock, joined, successor, 2 * (n - 1)));
  }
  leave(joined);
  return Status::ok();
}

// Each rank copies every member's input into its block of its own output, then waits until every
// member has done so (its input may be read until then).
Status LocalCommunicator::allGather(std::span<const int> group, const TensorView& input, const TensorView& output,
                                    int64_t dim) {
  const std::string what = "all_gather over ranks " + groupText(group);
  const auto n = static_cast<int64_t>(group.size());
  const Shape& in = input.type.shape;
  const Shape& out = output.type.shape;
  CLEAVE_TRY(checkAllGather(what, n, input, output, dim));
  CLEAVE_TRY(positionIn(what, group).status());
  if (n == 1) {
    std::memcpy(output.data, input.data, static_cast<size_t>(input.type.bytes()));
    return Status::ok();
  }

  Member member;
  member.inputs = {input};
  CLEAVE_ASSIGN_OR_RETURN(Joined joined, join("all_gather", group, std::move(member)));
  CLEAVE_TRY(waitForAll(joined, 0));
  const auto& members = joined.rendezvous->members;
  for (size_t q = 0; q < members.size(); ++q)
    if (members[q].inputs[0].type != input.type)
      return mismatch(joined, "rank " + std::to_string(joined.group[q]) + " gathers " +
                                  members[q].inputs[0].type.str() + ", rank " + std::to_string(rank_) + " " +
                                  input.type.str());
  Shape zero(in.size(), 0);
  for (size_t q = 0; q < members.size(); ++q) {
    Shape at(in.size(), 0);
    at[static_cast<size_t>(dim)] = static_cast<int64_t>(q) * in[static_cast<size_t>(dim)];
    copyBox(members[q].inputs[0].data, in, zero, output.data, out, at, in, dtypeSize(input.type.dtype));
  }
  setProgress(joined, 1);
  CLEAVE_TRY(waitForAll(joined, 1));
  leave(joined);
  return Status::ok();
}

// Each rank reduces its block of every member's input into its output, in group order (so the
// result does not depend on timing), then waits until every member has read what it needs.
Status LocalCommunicator::reduceScatter(std::span<const int> group, const TensorView& input, const TensorView& output,
                                        int64_t dim, ReduceOp op) {
  const std::string what = "reduce_scatter over ranks " + groupText(group);
  const auto n = static_cast<int64_t>(group.size());
  const Shape& in = input.type.shape;
  const Shape& out = output.type.shape;
  CLEAVE_TRY(checkReduceScatter(what, n, input, output, dim));
  CLEAVE_ASSIGN_OR_RETURN(size_t position, positionIn(what, group));
  if (n == 1) {
    std::memcpy(output.data, input.data, static_cast<size_t>(input.type.bytes()));
    return Status::ok();
  }

  Member member;
  member.inputs = {input};
  CLEAVE_ASSIGN_OR_RETURN(Joined joined, join("reduce_scatter", group, std::move(member)));
  CLEAVE_TRY(waitForAll(joined, 0));
  const auto& members = joined.rendezvous->members;
  for (size_t q = 0; q < members.size(); ++q)
    if (members[q].inputs[0].type != input.type)
      return mismatch(joined, "rank " + std::to_string(joined.group[q]) + " scatters " +
                                  members[q].inputs[0].type.str() + ", rank " + std::to_string(rank_) + " " +
                                  input.type.str());
  const DType dtype = input.type.dtype;
  const int64_t element_bytes = dtypeSize(dtype);
  Shape block_start(in.size(), 0), zero(in.size(), 0);
  block_start[static_cast<size_t>(dim)] = static_cast<int64_t>(position) * out[static_cast<size_t>(dim)];
  copyBox(members[0].inputs[0].data, in, block_start, output.data, out, zero, out, element_bytes);
  for (size_t q = 1; q < members.size(); ++q) {
    const auto* source = static_cast<const uint8_t*>(members[q].inputs[0].data);
    auto* target = static_cast<uint8_t*>(output.data);
    forEachBoxRun(in, block_start, out, zero, out, [&](int64_t from, int64_t to, int64_t count) {
      combineElements(dtype, target + to * element_bytes, source + from * element_bytes, count, op);
    });
  }
  if (op == ReduceOp::kMean) divideElements(dtype, output.data, output.type.numel(), n);
  setProgress(joined, 1);
  CLEAVE_TRY(waitForAll(joined, 1));
  leave(joined);
  return Status::ok();
}

// Rank p takes block p (along split_dim) of every member's input and puts member q's block at
// position q along concat_dim of its output.
Status LocalCommunicator::allToAll(std::span<const int> group, const TensorView& input, const TensorView& output,
                                   int64_t split_dim, int64_t concat_dim) {
  const std::string what = "all_to_all over ranks " + groupText(group);
  const auto n = static_cast<int64_t>(group.size());
  const Shape& in = input.type.shape;
  const Shape& out = output.type.shape;
  CLEAVE_TRY(checkAllToAll(what, n, input, output, split_dim, concat_dim));
  Shape block = in;
  block[static_cast<size_t>(split_dim)] /= n;
  CLEAVE_ASSIGN_OR_RETURN(size_t position, positionIn(what, group));
  if (n == 1) {
    std::memcpy(output.data, input.data, static_cast<size_t>(input.type.bytes()));
    return Status::ok();
  }

  Member member;
  member.inputs = {input};
  CLEAVE_ASSIGN_OR_RETURN(Joined joined, join("all_to_all", group, std::move(member)));
  CLEAVE_TRY(waitForAll(joined, 0));
  const auto& members = joined.rendezvous->members;
  for (size_t q = 0; q < members.size(); ++q)
    if (members[q].inputs[0].type != input.type)
      return mismatch(joined, "rank " + std::to_string(joined.group[q]) + " sends " + members[q].inputs[0].type.str() +
                                  ", rank " + std::to_string(rank_) + " " + input.type.str());
  Shape from(in.size(), 0);
  from[static_cast<size_t>(split_dim)] = static_cast<int64_t>(position) * block[static_cast<size_t>(split_dim)];
  for (size_t q = 0; q < members.size(); ++q) {
    Shape to(in.size(), 0);
    to[static_cast<size_t>(concat_dim)] = static_cast<int64_t>(q) * block[static_cast<size_t>(concat_dim)];
    copyBox(members[q].inputs[0].data, in, from, output.data, out, to, block, dtypeSize(input.type.dtype));
  }
  setProgress(joined, 1);
  CLEAVE_TRY(waitForAll(joined, 1));
  leave(joined);
  return Status::ok();
}

Status LocalCommunicator::barrier(std::span<const int> group) {
  CLEAVE_ASSIGN_OR_RETURN(Joined joined, join("barrier", group, Member{}));
  CLEAVE_TRY(waitForAll(joined, 0));
  leave(joined);
  return Status::ok();
}

Status LocalCommunicator::send(int peer, int tag, std::span<const uint8_t> bytes) {
  const std::string what = "send to rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  if (peer < 0 || peer >= world_->size)
    return Status::badInput(what + ": rank " + std::to_string(peer) + " is not one of the " +
                            std::to_string(world_->size) + " ranks");
  std::vector<uint8_t> message(bytes.begin(), bytes.end());
  std::lock_guard lock(world_->mutex);
  if (world_->aborted) return stoppedError(what);
  world_->mailboxes[{rank_, peer, tag}].push_back(std::move(message));
  world_->changed.notify_all();
  return Status::ok();
}

Status LocalCommunicator::recv(int peer, int tag, std::span<uint8_t> bytes) {
  const std::string what = "recv from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  if (peer < 0 || peer >= world_->size)
    return Status::badInput(what + ": rank " + std::to_string(peer) + " is not one of the " +
                            std::to_string(world_->size) + " ranks");
  auto deadline = Clock::now() +
                  std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(world_->timeout_seconds));
  std::vector<uint8_t> message;
  {
    std::unique_lock lock(world_->mutex);
    const std::tuple<int, int, int> key{peer, rank_, tag};
    WaitingFor waiting(activity_, peer);
    StallClock stall(world_->stall_seconds);
    while (true) {
      if (world_->aborted) return stoppedError(what);
      auto box = world_->mailboxes.find(key);
      if (box != world_->mailboxes.end() && !box->second.empty()) {
        message = std::move(box->second.front());
        box->second.pop_front();
        if (box->second.empty()) world_->mailboxes.erase(box);
        break;
      }
      if (world_->changed.wait_until(lock, std::min(deadline, stall.next())) == std::cv_status::timeout) {
        box = world_->mailboxes.find(key);
        if ((box == world_->mailboxes.end() || box->second.empty()) && !world_->aborted) {
          if (Clock::now() >= deadline)
            return Status::remoteRank(what + " timed out after " + secondsText(world_->timeout_seconds) +
                                      " s waiting for rank " + std::to_string(peer));
          if (stall.due()) warnStalled(stall, what, peer);
        }
      }
    }
  }
  if (message.size() != bytes.size())
    return Status::badInput(what + ": the message has " + std::to_string(message.size()) + " bytes, the buffer " +
                            std::to_string(bytes.size()));
  std::memcpy(bytes.data(), message.data(), message.size());
  return Status::ok();
}

}  // namespace

std::vector<std::unique_ptr<Communicator>> createLocalCommunicators(int ranks, double timeout_seconds,
                                                                    double stall_seconds) {
  auto world = std::make_shared<LocalWorld>(ranks, timeout_seconds, stall_seconds);
  std::vector<std::unique_ptr<Communicator>> endpoints;
  for (int rank = 0; rank < ranks; ++rank) endpoints.push_back(std::make_unique<LocalCommunicator>(world, rank));
  return endpoints;
}

}  // namespace cleave::runtime
