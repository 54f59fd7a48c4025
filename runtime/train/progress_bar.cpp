// ProgressBar: a one-line training progress display on stderr (step/total, loss, samples/s, ETA).
#include "runtime/train/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace cleave::runtime {
namespace {

constexpr int kBarWidth = 24;
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);

std::string formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto total = static_cast<int64_t>(std::llround(seconds));
  char text[32];
  if (total >= 3600)
    std::snprintf(text, sizeof text, "%lldh%02lldm", static_cast<long long>(total / 3600),
                  static_cast<long long>(total / 60 % 60));
  else if (total >= 60)
    std::snprintf(text, sizeof text, "%lldm%02llds", static_cast<long long>(total / 60), static_cast<long long>(total % 60));
  else
    std::snprintf(text, sizeof text, "%llds", static_cast<long long>(total));
  return text;
}

}  // namespace

bool stderrIsTerminal() { return ::isatty(STDERR_FILENO) == 1; }

ProgressBar::ProgressBar(int64_t first_step, int64_t total_steps, bool enabled)
    : first_step_(first_step), total_steps_(total_steps), enabled_(enabled) {}

std::string ProgressBar::render(int64_t step, int64_t total, double loss, double samples_per_s, double eta_seconds) {
  int filled = total > 0 ? static_cast<int>(kBarWidth * std::min<int64_t>(step, total) / total) : 0;
  std::string bar = "[" + std::string(static_cast<size_t>(filled), '#') +
                    std::string(static_cast<size_t>(kBarWidth - filled), ' ') + "]";
  char text[160];
  std::snprintf(text, sizeof text, "%s %lld/%lld  loss %.4f  %.0f samples/s  ETA %s", bar.c_str(),
                static_cast<long long>(step), static_cast<long long>(total), loss, samples_per_s,
                formatDuration(eta_seconds).c_str());
  return text;
}

void ProgressBar::update(int64_t step, double loss, double samples_per_s) {
  if (!enabled_) return;
  Clock::time_point now = Clock::now();
  if (step < total_steps_ && drawn_ && now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  // ETA from this run's pace: the time per step so far times the steps left.
  double elapsed = std::chrono::duration<double>(now - start_).count();
  int64_t done = step - first_step_;
  double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_steps_ - step) : NAN;
  draw(render(step, total_steps_, loss, samples_per_s, eta));
}

void ProgressBar::draw(const std::string& line) {
  // '\r' returns to the line start; "\x1b[K" clears what a longer previous line left.
  std::fprintf(stderr, "\r%s\x1b[K", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::printLine(const std::string& text) {
  if (enabled_ && drawn_) std::fputs("\r\x1b[K", stderr);
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
  drawn_ = false;
}

void ProgressBar::finish() {
  if (enabled_ && drawn_) std::fputs("\n", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace cleave::runtime
