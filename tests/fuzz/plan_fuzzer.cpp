// Fuzz target: the .cplan loader (parse, validation), inspect's rank report, and preparing and running small plans.
#include <cstdint>
#include <string>

#include "ir/plan.h"
#include "ir/plan.pb.h"
#include "analysis/plan_report.h"
#include "runtime/device/device.h"
#include "runtime/exec/executor.h"
#include "tests/fuzz/fuzz_input_file.h"

namespace {

// Plans whose arena is at most this and that have at most this many instructions are also run, so
// a fuzzed plan that validates reaches the executor and its kernels without slowing the fuzzer.
constexpr int64_t kMaxArenaBytesToRun = 1 << 20;
constexpr int kMaxInstructionsToRun = 200;

bool smallEnoughToRun(const cleave::planpb::Plan& plan) {
  if (plan.devices() != 1 || plan.ranks(0).arena_bytes() > kMaxArenaBytesToRun) return false;
  for (const auto& program : plan.ranks(0).programs())
    if (program.instructions_size() > kMaxInstructionsToRun) return false;
  return true;
}

}  // namespace

// Any input must load or fail with an error. A plan validatePlan accepts is what the rest of
// cleave trusts: inspect's report of every rank and program must work on it, and a small
// single-device plan must prepare, initialize its parameters and run every program (on whatever
// its arena holds) without crashing; an error from the run is allowed.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = cleave::fuzz::writeInputFile(data, size, "plan.cplan");
  auto plan = cleave::readPlanFile(path);
  if (!plan) return 0;
  for (const auto& rank : (*plan)->ranks())
    for (const auto& program : rank.programs()) (void)cleave::reportRank(rank, program.name());
  if (!smallEnoughToRun(**plan)) return 0;
  std::unique_ptr<cleave::runtime::Device> device = cleave::runtime::createCpuDevice();
  cleave::runtime::ExecutorOptions options;
  options.threads = 1;
  auto executor = cleave::runtime::createSingleDeviceExecutor(**plan, *device, options);
  if (!executor || !(*executor)->initializeParameters()) return 0;
  for (const std::string& program : (*executor)->programNames()) (void)(*executor)->run(program);
  return 0;
}
