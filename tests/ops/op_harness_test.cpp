// The op harness in test mode (every op's cases: reference, CPU kernel, gradient check) and, with
// CLEAVE_OP_HARNESS_PERF=1, perf mode (CPU kernel times; ctest leaves it out).
#include <gtest/gtest.h>

#include <cstdio>

#include "ir/ops/fused_body.h"
#include "runtime/device/kernel.h"
#include "tests/ops/op_cases.h"

namespace cleave::op_harness {
namespace {

std::vector<OpId> allOps() {
  std::vector<OpId> ops;
  for (const OpDef& def : allOpDefs()) ops.push_back(def.id);
  return ops;
}

const CaseList* casesOf(OpId op) {
  auto it = casesByOp().find(op);
  return it == casesByOp().end() ? nullptr : &it->second;
}

class OpHarness : public ::testing::TestWithParam<OpId> {};

// Communication ops are not kernels: they are declared so here and must have no CPU kernel and no
// cases. Every other op has cases, each agreeing with the reference; differentiable ops pass at
// least one gradient check. Every case's sharding rule is checked against its types.
TEST_P(OpHarness, CpuKernelMatchesReferenceAndGradientMatchesFiniteDifferences) {
  const OpId op = GetParam();
  const CaseList* cases = casesOf(op);
  if (isCommunicationOp(op)) {
    EXPECT_EQ(runtime::findCpuKernel(op), nullptr) << opName(op) << " is communication, not a kernel";
    EXPECT_EQ(cases, nullptr) << opName(op) << " is communication: its cases belong to the communicator tests";
    std::printf("%s: communication op, not a kernel (lowered to communication instructions)\n",
                std::string(opName(op)).c_str());
    return;
  }
  ASSERT_NE(runtime::findCpuKernel(op), nullptr) << "no cpu kernel for " << opName(op);
  ASSERT_TRUE(cases != nullptr && !cases->empty())
      << opName(op) << " has no harness cases: declare them in tests/ops/" << opFamilyName(opDef(op).family)
      << "_cases.cpp";
  int referenced = 0, gradient_checked = 0;
  for (const OpCase& c : *cases) {
    SCOPED_TRACE(c.describe());
    auto types = resultTypes(c);
    ASSERT_TRUE(types) << "invalid case: " << types.status().message();
    const std::string sharding = checkShardingRule(c);
    EXPECT_TRUE(sharding.empty()) << "sharding rule: " << sharding;
    auto cpu = runCpuKernel(c);
    ASSERT_TRUE(cpu) << "cpu kernel: " << cpu.status().message();
    auto reference = referenceResults(c.op, c.attrs, c.operands, *types);
    if (reference) {
      ASSERT_TRUE(*reference) << "reference: " << reference->status().message();
      ASSERT_EQ((*reference)->size(), cpu->size());
      for (size_t r = 0; r < cpu->size(); ++r) {
        const Tolerance tolerance = c.tolerance.value_or(defaultTolerance((*cpu)[r].type.dtype));
        const std::string diff = compareTensors((*cpu)[r], (**reference)[r], tolerance);
        EXPECT_TRUE(diff.empty()) << "result " << r << " against the reference: " << diff;
      }
      ++referenced;
    }
    if (c.perf) continue;  // large: timed in perf mode, too big for the gradient check
    bool applies = false;
    const std::string gradient = checkGradient(c, applies);
    EXPECT_TRUE(gradient.empty()) << "gradient check: " << gradient;
    gradient_checked += applies;
  }
  EXPECT_GT(referenced, 0) << opName(op) << ": no case has a reference";
  if (opDef(op).gradient) {
    EXPECT_GT(gradient_checked, 0) << opName(op) << " is differentiable but no case checks its gradient";
  }
  std::printf("%s: %zu cases, %d against the reference, %d gradient checks\n", std::string(opName(op)).c_str(),
              cases->size(), referenced, gradient_checked);
}

INSTANTIATE_TEST_SUITE_P(EveryOp, OpHarness, ::testing::ValuesIn(allOps()),
                         [](const ::testing::TestParamInfo<OpId>& info) { return std::string(opName(info.param)); });

// No case names an op outside the table, and the totals (printed for the record).
TEST(OpHarnessTable, CasesCoverTheTable) {
  size_t ops = 0, cases = 0, communication = 0;
  for (const OpDef& def : allOpDefs()) {
    if (isCommunicationOp(def.id)) ++communication;
    else if (casesOf(def.id)) ++ops;
  }
  for (const auto& [op, list] : casesByOp()) cases += list.size();
  std::printf("op harness: %zu ops with %zu cases, %zu communication ops declared, %d ops in the table\n", ops, cases,
              communication, kNumOps);
  EXPECT_EQ(ops + communication, static_cast<size_t>(kNumOps));
}

// Every f32 case of a fusable op (softmax: along the last axis), run as the one step of a fused
// node (JIT-compiled with LLVM),
// gives the op's own kernel's results within 1e-6 relative; a one-element operand of rank 0 is
// also tried as a literal of the body (pow's multiplying path, constants folded into bodies).
TEST(FusedKernels, EveryFusableCaseMatchesItsUnfusedKernel) {
  int compared = 0;
  for (const auto& [op, list] : casesByOp()) {
    if (!opDef(op).fusable && !opDef(op).fusable_along_last_axis) continue;
    for (const OpCase& c : list) {
      auto types = resultTypes(c);
      if (!types || (*types)[0].dtype != DType::kF32) continue;
      bool all_f32 = true;
      for (const TensorData& t : c.operands) all_f32 = all_f32 && t.type.dtype == DType::kF32;
      if (!all_f32) continue;
      SCOPED_TRACE(c.describe());
      auto unfused = runCpuKernel(c);
      ASSERT_TRUE(unfused) << unfused.status().message();
      for (bool literals : {false, true}) {
        FusedBody body;
        FusedStep step{op, {}, c.attrs};
        OpCase fused;
        fused.op = OpId::fused;
        fused.label = c.label + (literals ? " (literals)" : "");
        bool literal_used = false;
        for (size_t a = 0; a < c.operands.size(); ++a) {
          const TensorData& t = c.operands[a];
          if (literals && t.type.rank() == 0 && a > 0) {
            step.args.push_back({FusedArg::Kind::kLiteral, 0, static_cast<double>(*t.as<float>())});
            literal_used = true;
          } else {
            step.args.push_back({FusedArg::Kind::kOperand, static_cast<int>(fused.operands.size()), 0.0});
            fused.operands.push_back(t);
          }
        }
        if (literals && !literal_used) continue;
        // A step per result (layer_norm_grad's three), all returned.
        for (size_t k = 0; k < types->size(); ++k) {
          body.steps.push_back(step);
          body.steps.back().result = static_cast<int>(k);
          body.returned.push_back(static_cast<int>(k));
        }
        fused.attrs = {{"body", printFusedBody(body)}};
        // A broadcast that widens the result past every operand's rank keeps its own kernel; a row
        // op along another axis than the last is not fusable.
        auto fused_types = resultTypes(fused);
        if (!fused_types || *fused_types != *types) continue;
        auto result = runCpuKernel(fused, 2);
        ASSERT_TRUE(result) << printFusedBody(body) << ": " << result.status().message();
        for (size_t k = 0; k < types->size(); ++k) {
          const std::string diff = compareTensors((*result)[k], (*unfused)[k], Tolerance{1e-6, 1e-7});
          EXPECT_TRUE(diff.empty()) << printFusedBody(body) << ", result " << k << ": " << diff;
        }
        ++compared;
      }
    }
  }
  std::printf("fused kernels: %d cases of fusable ops compared with their unfused kernels\n", compared);
  EXPECT_GT(compared, 50);
}

// Perf mode: CPU kernel time per case, with GB/s and GFLOP/s from the op's cost rule.
TEST(OpHarnessPerf, CpuKernelTimes) {
  if (!perfModeEnabled()) GTEST_SKIP() << "perf mode: set CLEAVE_OP_HARNESS_PERF=1";
  for (const auto& [op, list] : casesByOp())
    for (const OpCase& c : list) {
      auto call = CpuCall::prepare(c, 1);
      ASSERT_TRUE(call) << c.describe() << ": " << call.status().message();
      reportPerf(c, "cpu", [&] { return call->run(); });
    }
}

}  // namespace
}  // namespace cleave::op_harness
