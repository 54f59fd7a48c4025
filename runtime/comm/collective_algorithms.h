// Collective algorithms independent of transport: element-wise reductions and the ring all-reduce schedule,
// shared by every communicator so that all of them give bitwise the same results.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ir/dtype.h"
#include "ir/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/exec/executor.h"

namespace cleave::runtime {

// accumulator[i] = other[i] (op) accumulator[i] for `count` elements of `dtype`; sums of bools and
// maxima of bools are "or", a NaN in either operand of a max wins (as torch.max). kMean combines as
// kSum (the division is a separate last step).
void combineElements(DType dtype, void* accumulator, const void* other, int64_t count, ReduceOp op);

// Divides `count` elements of `dtype` by `divisor` (a mean's last step); integers truncate toward
// zero, bools stay.
void divideElements(DType dtype, void* data, int64_t count, int64_t divisor);

// A run of consecutive elements in memory.
struct ElementRun {
  uint8_t* data = nullptr;
  int64_t count = 0;
};

// The runs of memory holding elements [begin, end) of `tensors` seen as one flat buffer (their
// elements one tensor after the other), in order.
std::vector<ElementRun> flatRuns(std::span<const TensorView> tensors, int64_t begin, int64_t end);

// What the ring all-reduce needs from a transport: the predecessor's chunk at each step.
class RingTransport {
 public:
  virtual ~RingTransport() = default;
  // Ring step `step`: hands this rank's elements [send_begin, send_end) (as they stand after the
  // previous step) to the successor, and returns runs (in order) holding the predecessor's elements
  // [receive_begin, receive_end) as they stand after its previous step. The runs stay readable until
  // stepDone(step).
  virtual Expected<std::vector<ElementRun>> exchange(int64_t step, int64_t send_begin, int64_t send_end,
                                                     int64_t receive_begin, int64_t receive_end) = 0;
  // This rank has finished step `step`.
  virtual void stepDone(int64_t step) = 0;
};

// Ring all-reduce of `bucket` (tensors of one dtype, `total` elements together, holding this rank's
// values; they end up holding the result) at `position` of a group of `n` ranks. The bucket is cut
// into n chunks, chunk c being elements [total·c/n, total·(c+1)/n). At step T (0 .. 2n-3) rank p
// works on chunk (p - 1 - T) mod n, from its predecessor p-1: during the first n-1 steps
// (reduce-scatter) it combines the predecessor's partial result into its own, so chunk c is summed
// in ring order starting at rank c, and a mean is divided at step n-2; during the last n-1 steps
// (all-gather) it copies the finished chunk. Every rank therefore gets bitwise the same result, the
// same on any transport.
Status ringAllReduce(std::span<const TensorView> bucket, int64_t total, int64_t position, int64_t n, ReduceOp op,
                     RingTransport& transport);

}  // namespace cleave::runtime
