// Tests for learning-rate schedules: the --lr-schedule parser, its text, and the factors against
// PyTorch's schedulers (tests/fixtures/training_features/lr_schedules.json, made by make_training_features.py).
#include "ir/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

namespace cleave {
namespace {

TEST(LrScheduleTest, FactorsEqualPyTorchSchedulers) {
  std::ifstream file(std::string(CLEAVE_SOURCE_DIR) + "/tests/fixtures/training_features/lr_schedules.json");
  ASSERT_TRUE(file);
  const nlohmann::json fixture = nlohmann::json::parse(file);
  ASSERT_GE(fixture["cases"].size(), 8u);
  for (const auto& c : fixture["cases"]) {
    const std::string text = c["schedule"];
    auto schedule = parseLrSchedule(text);
    ASSERT_TRUE(schedule) << text << ": " << schedule.status().message();
    const std::string optimizer = c["optimizer"];
    const double lr = std::stod(optimizer.substr(optimizer.find("lr=") + 3));
    const auto& lrs = c["lrs"];
    for (size_t t = 0; t < lrs.size(); ++t) {
      const double expected = lrs[t];
      EXPECT_NEAR(lr * schedule->factor(static_cast<int64_t>(t)), expected, 1e-12 * lr)
          << text << " (PyTorch's " << c["pytorch"].get<std::string>() << ") at step " << t;
    }
  }
}

TEST(LrScheduleTest, TextRoundTrips) {
  for (const char* text : {"constant", "constant:warmup=10", "linear:warmup=5,total=30,final=0",
                           "cosine:warmup=8,warmup_start=0.25,total=30,final=0.10000000000000001",
                           "step:step_size=7,gamma=0.5"}) {
    auto schedule = parseLrSchedule(text);
    ASSERT_TRUE(schedule) << text << ": " << schedule.status().message();
    EXPECT_EQ(lrScheduleText(*schedule), text);
  }
  EXPECT_TRUE(parseLrSchedule("constant")->isConstant());
  EXPECT_FALSE(parseLrSchedule("constant:warmup=2")->isConstant());
}

TEST(LrScheduleTest, BadSpecsAreUsageErrorsThatSayWhy) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : {Case{"exponential", "unknown schedule 'exponential'"},
                        Case{"linear:warmup=5", "needs total=T"},
                        Case{"cosine:warmup=10,total=10", "above warmup (10)"},
                        Case{"step:total=4", "unknown key 'total' for step (keys: warmup, warmup_start, step_size, gamma)"},
                        Case{"constant:final=0.1", "unknown key 'final'"},
                        Case{"step:step_size=0", "step_size must be at least 1"},
                        Case{"linear:total=-3", "whole number of steps"},
                        Case{"linear:total=10,final=x", "'final' needs a finite number"},
                        Case{"constant:warmup=2,warmup=3", "given twice"},
                        Case{"constant:warmup_start=2,warmup=3", "warmup_start must be in [0, 1]"},
                        Case{"linear:total", "expected key=value"}}) {
    auto schedule = parseLrSchedule(c.text);
    ASSERT_FALSE(schedule) << c.text;
    EXPECT_EQ(schedule.status().kind(), ErrorKind::kUsage) << c.text;
    EXPECT_NE(schedule.status().message().find(c.says), std::string::npos) << schedule.status().message();
  }
}

TEST(LrScheduleTest, CosineHoldsItsFinalFactorAfterTotal) {
  auto schedule = parseLrSchedule("cosine:warmup=2,total=12,final=0.1");
  ASSERT_TRUE(schedule);
  EXPECT_DOUBLE_EQ(schedule->factor(0), 0.0);
  EXPECT_DOUBLE_EQ(schedule->factor(1), 0.5);
  EXPECT_DOUBLE_EQ(schedule->factor(2), 1.0);
  EXPECT_NEAR(schedule->factor(12), 0.1, 1e-15);
  EXPECT_NEAR(schedule->factor(100), 0.1, 1e-15);
}

}  // namespace
}  // namespace cleave
