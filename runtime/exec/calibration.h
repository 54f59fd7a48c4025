// Calibration measurements: how fast this machine's CPU kernels and local communication run (cleave calibrate).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/op_table.h"
#include "ir/plan.pb.h"
#include "ir/status.h"

namespace cleave::runtime {

// One kernel to time: its op, operand and result types and attributes.
struct KernelInstance {
  OpId op;
  std::vector<TensorType> operands, results;
  AttrMap attrs;

  // The kernel of `op` on `operands`, its result types from the op's shape rule (kBadInput when
  // the rule rejects them).
  static Expected<KernelInstance> of(OpId op, std::vector<TensorType> operands, AttrMap attrs = {});
  // The op, operand and result types and attribute names: kernels alike in these cost alike.
  std::string signature() const;
};

// A kernel of a program and how many times the program runs it.
struct CountedKernel {
  KernelInstance kernel;
  int count = 1;
};

// Adds the kernels of `program` in `rank` that have a CPU kernel to `kernels`, alike ones (by
// signature, also with those already there) counted once, in order of first appearance; kBadInput
// when the program is missing or a type or attribute does not parse.
Status collectCpuKernels(const planpb::RankPlan& rank, std::string_view program, std::vector<CountedKernel>& kernels);

// The seconds one call of `kernel` takes while `devices` threads call it at once, each on its own
// zero-filled buffers and single-threaded (a device is one core of a host whose other cores work
// too, as the ranks of a plan run): each thread's fastest call over about `budget` seconds (at
// least 3 calls), averaged over the threads. The fastest, because other jobs on the machine only
// ever slow a call down: the spec describes the machine, not its neighbours. A kernel's error
// (data-dependent, on zeros) is returned.
Expected<double> kernelSeconds(const KernelInstance& kernel, int devices, double budget);

// A two-rank plan whose program "train" moves `floats` floats `count` times in turn: in-place
// all-reduces, or ping-pongs (rank 0 sends and receives the answer, rank 1 answers). With
// `then_read`, a kernel reads each result, so the compute thread waits for the communication
// thread as a plan's next layer does.
planpb::Plan communicationPlan(bool all_reduce, int count, int64_t floats, bool then_read);

// The seconds one all-reduce (or ping-pong) of `floats` floats takes through the runtime (executor,
// communication thread, local communicator, one core per rank): the difference between the fastest
// runs of programs of 9 and of 1, over 8, each program run for about `budget` seconds (at least 5 runs).
Expected<double> communicationSeconds(bool all_reduce, int64_t floats, bool then_read, double budget);

}  // namespace cleave::runtime
