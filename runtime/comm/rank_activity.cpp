// RankActivity: what a rank is doing now, for the warnings about a rank that stalls the others.
#include "runtime/comm/rank_activity.h"

#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>

namespace cleave::runtime {
namespace {

using Clock = std::chrono::steady_clock;

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

std::string secondsSince(int64_t since_ns) {
  char text[32];
  double seconds = static_cast<double>(nowNs() - since_ns) / 1e9;
  std::snprintf(text, sizeof text, seconds < 10 ? "%.1f s" : "%.0f s", seconds);
  return text;
}

thread_local const std::string* current_instruction = nullptr;

}  // namespace

void RankActivity::begin(Lane lane, const std::string* where) {
  LaneState& state = lanes_[lane];
  state.since_ns.store(nowNs(), std::memory_order_relaxed);
  state.where.store(where, std::memory_order_release);
  current_instruction = where;
}

void RankActivity::end(Lane lane) {
  LaneState& state = lanes_[lane];
  state.where.store(nullptr, std::memory_order_release);
  state.since_ns.store(nowNs(), std::memory_order_relaxed);
  current_instruction = nullptr;
}

std::string RankActivity::describe() const {
  const std::string* compute = lanes_[kCompute].where.load(std::memory_order_acquire);
  const std::string* communication = lanes_[kCommunication].where.load(std::memory_order_acquire);
  std::string compute_since = secondsSince(lanes_[kCompute].since_ns.load(std::memory_order_relaxed));
  std::string communication_since = secondsSince(lanes_[kCommunication].since_ns.load(std::memory_order_relaxed));
  if (compute && communication)
    return "in " + *compute + " for " + compute_since + ", its communication thread in " + *communication + " for " +
           communication_since;
  if (compute) return "in " + *compute + " for " + compute_since;
  if (communication) return "in " + *communication + " for " + communication_since;
  return "between instructions for " + compute_since;
}

std::string RankActivity::currentInstruction() { return current_instruction ? *current_instruction : std::string(); }

RankActivity& rankActivity(int rank) {
  static std::mutex mutex;
  static auto* activities = new std::map<int, std::unique_ptr<RankActivity>>();  // never freed: threads may
                                                                                 // outlive static destructors
  std::lock_guard lock(mutex);
  std::unique_ptr<RankActivity>& slot = (*activities)[rank];
  if (!slot) slot = std::make_unique<RankActivity>();
  return *slot;
}

std::string stallWarningStart(int me, double waited_seconds, const std::string& what, int awaited) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, waited_seconds < 1 ? "%.1f" : "%.0f", waited_seconds);
  std::string instruction = RankActivity::currentInstruction();
  return "rank " + std::to_string(me) + " has waited " + seconds + " s for rank " + std::to_string(awaited) + " in " +
         what + (instruction.empty() ? "" : " (" + instruction + ")");
}

void printStallWarning(const std::string& text) {
  std::string line = "cleave: warning: " + text + "\n";
  ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
  (void)written;
}

StallClock::StallClock(double seconds, Clock::time_point start) : start_(start), interval_(seconds) {
  next_ = seconds > 0 ? start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds))
                      : Clock::time_point::max();
}

bool StallClock::due(Clock::time_point now) {
  if (interval_ <= 0 || now < next_) return false;
  interval_ *= 2;  // the next warning when the wait has lasted twice as long
  next_ = start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval_));
  return true;
}

double StallClock::waited(Clock::time_point now) const {
  return std::chrono::duration<double>(now - start_).count();
}

}  // namespace cleave::runtime
