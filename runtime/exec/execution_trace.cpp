// ExecutionTrace: thread-safe event collection and its Chrome trace (JSON) form.
#include "runtime/exec/execution_trace.h"

#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "runtime/io/file_io.h"

namespace cleave::runtime {

void ExecutionTrace::record(TraceEvent event) {
  std::lock_guard lock(mutex_);
  events_.push_back(std::move(event));
}

std::vector<TraceEvent> ExecutionTrace::events() const {
  std::lock_guard lock(mutex_);
  return events_;
}

Status ExecutionTrace::write(const std::string& path) const {
  nlohmann::json events = nlohmann::json::array();
  std::set<std::pair<int, int>> threads;
  for (const TraceEvent& e : this->events()) {
    events.push_back({{"name", e.name},
                      {"ph", "X"},
                      {"ts", e.start_us},
                      {"dur", e.duration_us},
                      {"pid", e.rank},
                      {"tid", e.stream},
                      {"args", {{"instruction", e.detail}, {"step", e.step}}}});
    threads.insert({e.rank, e.stream});
  }
  for (const auto& [rank, stream] : threads) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", rank},
                      {"tid", stream},
                      {"args", {{"name", stream == 0 ? "compute" : "communication"}}}});
  }
  std::string text = nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
  return writeFileAtomically(path, [&](FileWriter& out) { return out.write(text.data(), text.size()); });
}

}  // namespace cleave::runtime
