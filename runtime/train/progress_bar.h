// ProgressBar: a one-line training progress display on stderr (step/total, loss, samples/s, ETA).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace cleave::runtime {

// True when stderr is a terminal (where a progress bar makes sense).
bool stderrIsTerminal();

// Redraws one line with '\r', at most about 10 times a second; does nothing when disabled.
class ProgressBar {
 public:
  // A bar for steps first_step+1 .. total_steps (first_step > 0 after a resume).
  ProgressBar(int64_t first_step, int64_t total_steps, bool enabled);
  // Shows that `step` steps are done; redraws when 0.1 s have passed since the last draw, or at the end.
  void update(int64_t step, double loss, double samples_per_s);
  // Prints `text` on its own line; the bar is redrawn below it on the next update.
  void printLine(const std::string& text);
  // Leaves the bar's last state on screen and moves to a new line.
  void finish();

  // The bar's text for a state, e.g. "[#####     ] 50/100  loss 0.4312  1234 samples/s  ETA 1m05s".
  static std::string render(int64_t step, int64_t total, double loss, double samples_per_s, double eta_seconds);

 private:
  using Clock = std::chrono::steady_clock;
  void draw(const std::string& line);

  int64_t first_step_;
  int64_t total_steps_;
  bool enabled_;
  bool drawn_ = false;  // a bar line is on screen without a newline after it
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_draw_{};
};

}  // namespace cleave::runtime
