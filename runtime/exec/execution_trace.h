// ExecutionTrace: when each rank's instructions ran, on which stream, written as a Chrome trace.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "ir/status.h"

namespace cleave::runtime {

// One instruction's run on a rank.
struct TraceEvent {
  int rank = 0;
  int stream = 0;          // 0 compute, 1 communication
  std::string name;        // "matmul", "all_reduce", ...
  std::string detail;      // where it came from: "instruction 12 of train (matmul from model.cir:5:3)"
  int64_t step = 0;        // the training step (0 outside training)
  double start_us = 0;     // since the trace began
  double duration_us = 0;
};

// Collects events from every rank's threads (thread-safe) and writes them for Perfetto or
// chrome://tracing: one process per rank, one thread per stream.
class ExecutionTrace {
 public:
  using Clock = std::chrono::steady_clock;

  ExecutionTrace() : origin_(Clock::now()) {}
  // Microseconds from the trace's start to `t`.
  double since(Clock::time_point t) const { return std::chrono::duration<double, std::micro>(t - origin_).count(); }
  // The step events are tagged with from now on.
  void setStep(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }
  // Adds one event.
  void record(TraceEvent event);
  // The events so far, in the order they were recorded.
  std::vector<TraceEvent> events() const;
  // Writes {"traceEvents": [...]} to `path` atomically; errors name the file.
  Status write(const std::string& path) const;

 private:
  Clock::time_point origin_;
  int64_t step_ = 0;
  mutable std::mutex mutex_;
  std::vector<TraceEvent> events_;
};

}  // namespace cleave::runtime
