// Learning-rate schedules: the --lr-schedule parser, its canonical text and the optimizer-op attributes.
#include "ir/lr_schedule.h"

#include <charconv>
#include <cstdio>

#include "ir/op_table.h"
#include "ir/spec_items.h"

namespace cleave {
namespace {

constexpr const char* kForm = "constant|linear|cosine|step[:key=value,...]";

Status scheduleError(std::string_view text, const std::string& problem) {
  return Status::usage("bad --lr-schedule '" + std::string(text) + "': " + problem);
}

const char* decayName(LrDecay decay) {
  switch (decay) {
    case LrDecay::kConstant: return "constant";
    case LrDecay::kLinear: return "linear";
    case LrDecay::kCosine: return "cosine";
    case LrDecay::kStep: return "step";
  }
  return "constant";
}

std::optional<LrDecay> parseDecay(std::string_view name) {
  for (LrDecay decay : {LrDecay::kConstant, LrDecay::kLinear, LrDecay::kCosine, LrDecay::kStep})
    if (name == decayName(decay)) return decay;
  return std::nullopt;
}

const char* keysOf(LrDecay decay) {
  switch (decay) {
    case LrDecay::kLinear:
    case LrDecay::kCosine: return "warmup, warmup_start, total, final";
    case LrDecay::kStep: return "warmup, warmup_start, step_size, gamma";
    case LrDecay::kConstant: break;
  }
  return "warmup, warmup_start";
}

Expected<double> parseNumber(std::string_view text, std::string_view key, std::string_view value) {
  std::optional<double> number = parseFiniteNumber(value);
  if (!number) return scheduleError(text, "'" + std::string(key) + "' needs a finite number, got '" + std::string(value) + "'");
  return *number;
}

Expected<int64_t> parseCount(std::string_view text, std::string_view key, std::string_view value) {
  int64_t count = 0;
  auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), count);
  if (error != std::errc() || end != value.data() + value.size() || count < 0)
    return scheduleError(text, "'" + std::string(key) + "' needs a whole number of steps >= 0, got '" +
                                   std::string(value) + "'");
  return count;
}

// Applies one key=value; keys that do not belong to the decay list those that do.
Status applyKey(std::string_view text, LrSchedule& s, std::string_view key, std::string_view value) {
  const bool has_end = s.decay == LrDecay::kLinear || s.decay == LrDecay::kCosine;
  if (key == "warmup") {
    CLEAVE_ASSIGN_OR_RETURN(s.warmup, parseCount(text, key, value));
  } else if (key == "warmup_start") {
    CLEAVE_ASSIGN_OR_RETURN(s.warmup_start, parseNumber(text, key, value));
  } else if (key == "total" && has_end) {
    CLEAVE_ASSIGN_OR_RETURN(s.total, parseCount(text, key, value));
  } else if (key == "final" && has_end) {
    CLEAVE_ASSIGN_OR_RETURN(s.final_factor, parseNumber(text, key, value));
  } else if (key == "step_size" && s.decay == LrDecay::kStep) {
    CLEAVE_ASSIGN_OR_RETURN(s.step_size, parseCount(text, key, value));
  } else if (key == "gamma" && s.decay == LrDecay::kStep) {
    CLEAVE_ASSIGN_OR_RETURN(s.gamma, parseNumber(text, key, value));
  } else {
    return scheduleError(text, "unknown key '" + std::string(key) + "' for " + decayName(s.decay) + " (keys: " +
                                   keysOf(s.decay) + ")");
  }
  return Status::ok();
}

Status checkSchedule(std::string_view text, const LrSchedule& s) {
  if (s.warmup_start < 0 || s.warmup_start > 1) return scheduleError(text, "warmup_start must be in [0, 1]");
  if (s.decay == LrDecay::kLinear || s.decay == LrDecay::kCosine) {
    if (s.total <= s.warmup)
      return scheduleError(text, std::string(decayName(s.decay)) + " needs total=T, the step the decay ends at, above warmup (" +
                                     std::to_string(s.warmup) + ")");
    if (s.final_factor < 0) return scheduleError(text, "final must be >= 0 (a factor of lr)");
  }
  if (s.decay == LrDecay::kStep) {
    if (s.step_size < 1) return scheduleError(text, "step_size must be at least 1");
    if (s.gamma <= 0) return scheduleError(text, "gamma must be > 0");
  }
  return Status::ok();
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

}  // namespace

Expected<LrSchedule> parseLrSchedule(std::string_view text) {
  size_t colon = text.find(':');
  std::string_view name = text.substr(0, colon);
  std::optional<LrDecay> decay = parseDecay(name);
  if (!decay) return scheduleError(text, "unknown schedule '" + std::string(name) + "' (expected " + kForm + ")");
  LrSchedule schedule;
  schedule.decay = *decay;
  std::string_view rest = colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
  CLEAVE_ASSIGN_OR_RETURN(std::vector<SpecItem> items,
                          splitSpecItems(rest, [&](const std::string& problem) { return scheduleError(text, problem); }));
  for (const SpecItem& item : items) CLEAVE_TRY(applyKey(text, schedule, item.key, item.value));
  CLEAVE_TRY(checkSchedule(text, schedule));
  return schedule;
}

std::string lrScheduleText(const LrSchedule& s) {
  std::string text = decayName(s.decay);
  std::string keys;
  auto add = [&](const char* key, const std::string& value) { keys += (keys.empty() ? "" : ",") + std::string(key) + "=" + value; };
  if (s.warmup > 0) add("warmup", std::to_string(s.warmup));
  if (s.warmup > 0 && s.warmup_start != 0) add("warmup_start", number(s.warmup_start));
  if (s.decay == LrDecay::kLinear || s.decay == LrDecay::kCosine) {
    add("total", std::to_string(s.total));
    add("final", number(s.final_factor));
  }
  if (s.decay == LrDecay::kStep) {
    add("step_size", std::to_string(s.step_size));
    add("gamma", number(s.gamma));
  }
  return keys.empty() ? text : text + ":" + keys;
}

void addLrScheduleAttrs(const LrSchedule& s, AttrMap& attrs) {
  if (s.isConstant()) return;
  attrs["lr_decay"] = std::string(decayName(s.decay));
  attrs["warmup"] = s.warmup;
  attrs["warmup_start"] = s.warmup_start;
  attrs["total_steps"] = s.total;
  attrs["final_factor"] = s.final_factor;
  attrs["step_size"] = s.step_size;
  attrs["gamma"] = s.gamma;
}

LrSchedule lrScheduleOf(const OpContext& op) {
  LrSchedule s;
  if (!op.has("lr_decay")) return s;
  s.decay = parseDecay(op.getString("lr_decay")).value_or(LrDecay::kConstant);
  s.warmup = op.getInt("warmup");
  s.warmup_start = op.getFloat("warmup_start");
  s.total = op.getInt("total_steps");
  s.final_factor = op.getFloat("final_factor");
  s.step_size = op.getInt("step_size");
  s.gamma = op.getFloat("gamma");
  return s;
}

Status checkLrScheduleAttrs(const OpContext& op) {
  if (!op.has("lr_decay")) return Status::ok();
  if (!parseDecay(op.getString("lr_decay")))
    return Status::badInput(std::string(op.def.name) + ": lr_decay must be one of constant, linear, cosine, step; got '" +
                            op.getString("lr_decay") + "'");
  const LrSchedule schedule = lrScheduleOf(op);
  Status valid = checkSchedule(lrScheduleText(schedule), schedule);
  if (valid) return valid;
  return Status::badInput(std::string(op.def.name) + ": " + valid.message());
}

std::vector<AttrSpec> lrScheduleAttrSpecs() {
  const LrSchedule defaults;
  return {{"lr_decay", AttrKind::kString, false, std::string("constant")},
          {"warmup", AttrKind::kInt, false, defaults.warmup},
          {"warmup_start", AttrKind::kFloat, false, defaults.warmup_start},
          {"total_steps", AttrKind::kInt, false, defaults.total},
          {"final_factor", AttrKind::kFloat, false, defaults.final_factor},
          {"step_size", AttrKind::kInt, false, defaults.step_size},
          {"gamma", AttrKind::kFloat, false, defaults.gamma}};
}

}  // namespace cleave
