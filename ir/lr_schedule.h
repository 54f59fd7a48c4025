// Learning-rate schedules: the factor of the base learning rate at each optimizer step, as
// torch.optim.lr_scheduler's linear warm-up followed by a constant, linear, cosine or step decay.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/attribute.h"
#include "ir/ops/host_device.h"
#include "ir/status.h"

namespace cleave {

struct OpContext;
struct AttrSpec;

// The decay after the warm-up.
enum class LrDecay : int { kConstant, kLinear, kCosine, kStep };

// A schedule. Step t counts the optimizer steps already taken (0 for the first step), as PyTorch's
// scheduler.last_epoch when scheduler.step() follows optimizer.step().
struct LrSchedule {
  LrDecay decay = LrDecay::kConstant;
  int64_t warmup = 0;        // warm-up steps: LinearLR(start_factor=warmup_start, total_iters=warmup)
  double warmup_start = 0;   // the factor at step 0 of the warm-up
  int64_t total = 0;         // linear and cosine: the step at which the decay reaches final_factor
  double final_factor = 0;   // linear and cosine: the factor from step `total` on
  int64_t step_size = 1;     // step: the factor is multiplied by gamma every step_size steps
  double gamma = 0.1;

  // The factor of the base learning rate at step t:
  // - t < warmup: warmup_start + (1 − warmup_start)·t / warmup;
  // - after it, with u = t − warmup and D = total − warmup: constant 1; linear 1 + (final − 1)·min(u, D)/D
  //   (LinearLR(1, final, D)); cosine final + (1 − final)·(1 + cos(π·min(u, D)/D))/2
  //   (CosineAnnealingLR(D, eta_min = final·lr), held at final after D); step gamma^⌊u / step_size⌋.
  CLEAVE_HOST_DEVICE double factor(int64_t t) const {
    if (t < warmup) return warmup_start + (1.0 - warmup_start) * static_cast<double>(t) / static_cast<double>(warmup);
    const int64_t u = t - warmup, span = total - warmup;
    const double progress = span > 0 ? static_cast<double>(u < span ? u : span) / static_cast<double>(span) : 1.0;
    switch (decay) {
      case LrDecay::kConstant: return 1.0;
      case LrDecay::kLinear: return 1.0 + (final_factor - 1.0) * progress;
      case LrDecay::kCosine: return final_factor + (1.0 - final_factor) * (1.0 + cos(3.14159265358979323846 * progress)) / 2.0;
      case LrDecay::kStep: return pow(gamma, static_cast<double>(u / step_size));
    }
    return 1.0;
  }
  // True for the schedule that keeps the learning rate as given (no attributes needed).
  bool isConstant() const { return decay == LrDecay::kConstant && warmup == 0; }
};

// Parses "constant|linear|cosine|step[:key=value,...]": keys warmup, warmup_start (every decay),
// total and final (linear, cosine; total is required and must exceed warmup), step_size and gamma
// (step). Items may be separated by ',' or ';'. Unknown names or keys and out-of-range values are
// usage errors that list the valid choices.
Expected<LrSchedule> parseLrSchedule(std::string_view text);

// The canonical text of `schedule` ("cosine:warmup=100,total=1000,final=0.1"), which parseLrSchedule reads back.
std::string lrScheduleText(const LrSchedule& schedule);

// The optimizer-op attributes that carry a schedule ("lr_decay", "warmup", ...); none for a constant one.
void addLrScheduleAttrs(const LrSchedule& schedule, AttrMap& attrs);
// The schedule an optimizer op's attributes describe (constant when they name none).
LrSchedule lrScheduleOf(const OpContext& op);
// The attribute checks of an optimizer op's shape rule: a known lr_decay and values parseLrSchedule accepts.
Status checkLrScheduleAttrs(const OpContext& op);
// The attributes addLrScheduleAttrs may set, with their defaults, for an optimizer op's definition.
std::vector<AttrSpec> lrScheduleAttrSpecs();

}  // namespace cleave
