// RankActivity: what a rank is doing now (the instruction each of its threads runs, the rank it waits
// for), so that a rank kept waiting can say which rank stalls it and what that rank is doing.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace cleave::runtime {

// One rank's activity. The executor marks the instruction each of the rank's threads runs; the
// communicator marks the rank it waits for. Every field is atomic: other threads (a waiting rank of
// the same process, the MPI service thread answering a ping) read it while the rank runs.
class RankActivity {
 public:
  // The rank's thread that runs kernels (and stream-0 transfers), and its communication thread.
  enum Lane { kCompute = 0, kCommunication = 1 };

  // The calling thread, working on `lane`, starts `where` ("instruction 14 of train (matmul from
  // m.cir:9:3)"); the string must outlive the run. It is also the calling thread's current
  // instruction (currentInstruction()).
  void begin(Lane lane, const std::string* where);
  // The calling thread is done with its instruction on `lane`.
  void end(Lane lane);
  // The rank waits for rank `peer` (-1: no longer waits).
  void setWaitingFor(int peer) { waiting_for_.store(peer, std::memory_order_relaxed); }
  // The rank it waits for, or -1.
  int waitingFor() const { return waiting_for_.load(std::memory_order_relaxed); }
  // What the rank does, e.g. "in instruction 14 of train (matmul from m.cir:9:3) for 12.3 s", or
  // "between instructions for 4 s" when neither thread runs one.
  std::string describe() const;

  // The instruction the calling thread runs ("" when none): what a communicator names as its own.
  static std::string currentInstruction();

 private:
  struct LaneState {
    std::atomic<const std::string*> where{nullptr};
    std::atomic<int64_t> since_ns{0};  // steady clock: when `where` started, or when the last one ended
  };
  LaneState lanes_[2];
  std::atomic<int> waiting_for_{-1};
};

// Marks, while it lives, that `activity`'s rank waits for rank `peer`.
class WaitingFor {
 public:
  WaitingFor(RankActivity& activity, int peer) : activity_(activity) { activity.setWaitingFor(peer); }
  ~WaitingFor() { activity_.setWaitingFor(-1); }
  WaitingFor(const WaitingFor&) = delete;
  WaitingFor& operator=(const WaitingFor&) = delete;

 private:
  RankActivity& activity_;
};

// "rank 0 has waited 10 s for rank 1 in all_reduce over ranks {0,1} (instruction 28 of train
// (all_reduce))": the start of a stall warning of rank `me`, waiting in `what` for `awaited`.
std::string stallWarningStart(int me, double waited_seconds, const std::string& what, int awaited);

// The activity of rank `rank` in this process (created on first use; references stay valid). Every
// part of a process that deals with a rank (its executor, its communicators) shares this one record.
RankActivity& rankActivity(int rank);

// Ranks of the same process, or a peer's answer to a ping: how the stalled chain is told.
struct StalledRank {
  int rank = -1;
  int waiting_for = -1;  // the rank it waits for, -1: none
  std::string activity;  // RankActivity::describe(), or "" when it did not answer
  bool answered = true;  // false: its process did not answer (dead, stopped, or cut off)
};

// The chain from the rank waited for to the one at fault, e.g. "rank 1 waits for rank 2 (in
// instruction 9 of train (recv) for 10 s); rank 2 is in instruction 14 of train (matmul from
// m.cir:9:3) for 10.1 s". `find(r)` gives what is known of rank r. `me` is the rank asking.
template <class Find>
std::string stallChain(int me, int awaited, Find find) {
  std::vector<int> seen = {me};
  std::string text;
  for (int rank = awaited;;) {
    StalledRank state = find(rank);
    seen.push_back(rank);
    std::string name = "rank " + std::to_string(rank);
    if (!state.answered) return text + name + " does not answer (its process died, is stopped, or is cut off)";
    bool waits = state.waiting_for >= 0;
    bool cycle = false;
    for (int r : seen) cycle = cycle || r == state.waiting_for;
    if (!waits) return text + name + " is " + state.activity;
    text += name + " waits for rank " + std::to_string(state.waiting_for) + " (" + state.activity + ")";
    if (cycle) return text + ": the ranks wait for each other (their programs do not fit together)";
    text += "; ";
    rank = state.waiting_for;
  }
}

// Prints one warning line, "cleave: warning: <text>", on stderr in one write.
void printStallWarning(const std::string& text);

// When a wait that began at `start` is due for a stall warning: after `seconds`, then after twice
// as long, and so on (0: never).
class StallClock {
 public:
  using Clock = std::chrono::steady_clock;
  StallClock(double seconds, Clock::time_point start = Clock::now());
  // The time of the next warning (far in the future when off).
  Clock::time_point next() const { return next_; }
  // True once the next warning is due; moves the next one on.
  bool due(Clock::time_point now = Clock::now());
  // Seconds since the wait began.
  double waited(Clock::time_point now = Clock::now()) const;

 private:
  Clock::time_point start_;
  Clock::time_point next_;
  double interval_;  // seconds from start_ to next_
};

}  // namespace cleave::runtime
