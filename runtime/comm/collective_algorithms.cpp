// Collective algorithms independent of transport: element-wise reductions and the ring all-reduce schedule,
// shared by every communicator so that all of them give bitwise the same results.
#include "runtime/comm/collective_algorithms.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/device/element_access.h"

namespace cleave::runtime {
namespace {

template <class T>
void combineValues(T* accumulator, const T* other, int64_t count, ReduceOp op) {
  if (op == ReduceOp::kMax) {
#pragma omp simd
    for (int64_t i = 0; i < count; ++i)  // a NaN in either operand wins, as torch.max
      accumulator[i] = (other[i] > accumulator[i] || other[i] != other[i]) ? other[i] : accumulator[i];
  } else {
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) accumulator[i] = static_cast<T>(other[i] + accumulator[i]);
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void combineHalves(uint16_t* accumulator, const uint16_t* other, int64_t count, ReduceOp op) {
  for (int64_t i = 0; i < count; ++i) {
    float a = ToFloat(accumulator[i]), b = ToFloat(other[i]);
    float result = op == ReduceOp::kMax ? ((b > a || b != b) ? b : a) : b + a;
    accumulator[i] = FromFloat(result);
  }
}

template <class T>
void divideTyped(T* values, int64_t count, int64_t divisor) {
  const auto d = static_cast<T>(divisor);
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) values[i] = static_cast<T>(values[i] / d);
}

}  // namespace

void combineElements(DType dtype, void* accumulator, const void* other, int64_t count, ReduceOp op) {
  switch (dtype) {
    case DType::kF32:
      combineValues(static_cast<float*>(accumulator), static_cast<const float*>(other), count, op);
      return;
    case DType::kF64:
      combineValues(static_cast<double*>(accumulator), static_cast<const double*>(other), count, op);
      return;
    case DType::kI64:
      combineValues(static_cast<int64_t*>(accumulator), static_cast<const int64_t*>(other), count, op);
      return;
    case DType::kI32:
      combineValues(static_cast<int32_t*>(accumulator), static_cast<const int32_t*>(other), count, op);
      return;
    case DType::kI8:
      combineValues(static_cast<int8_t*>(accumulator), static_cast<const int8_t*>(other), count, op);
      return;
    case DType::kU8:
      combineValues(static_cast<uint8_t*>(accumulator), static_cast<const uint8_t*>(other), count, op);
      return;
    case DType::kF16:
      combineHalves<halfToFloat, floatToHalf>(static_cast<uint16_t*>(accumulator), static_cast<const uint16_t*>(other),
                                              count, op);
      return;
    case DType::kBF16:
      combineHalves<bfloat16ToFloat, floatToBfloat16>(static_cast<uint16_t*>(accumulator),
                                                      static_cast<const uint16_t*>(other), count, op);
      return;
    case DType::kBool: {
      auto* a = static_cast<uint8_t*>(accumulator);
      const auto* b = static_cast<const uint8_t*>(other);
      for (int64_t i = 0; i < count; ++i) a[i] = (a[i] | b[i]) != 0 ? 1 : 0;
      return;
    }
  }
}

void divideElements(DType dtype, void* data, int64_t count, int64_t divisor) {
  switch (dtype) {
    case DType::kF32: divideTyped(static_cast<float*>(data), count, divisor); return;
    case DType::kF64: divideTyped(static_cast<double*>(data), count, divisor); return;
    case DType::kI64: divideTyped(static_cast<int64_t*>(data), count, divisor); return;
    case DType::kI32: divideTyped(static_cast<int32_t*>(data), count, divisor); return;
    case DType::kBool: return;
    default:  // f16, bf16, i8, u8: through doubles
      for (int64_t i = 0; i < count; ++i) {
        double value = loadElement(dtype, data, i);
        storeElement(dtype, data, i, isFloat(dtype) ? value / static_cast<double>(divisor) : std::trunc(value / divisor));
      }
  }
}

std::vector<ElementRun> flatRuns(std::span<const TensorView> tensors, int64_t begin, int64_t end) {
  std::vector<ElementRun> runs;
  int64_t offset = 0;
  for (const TensorView& tensor : tensors) {
    if (offset >= end) break;
    int64_t count = tensor.type.numel();
    int64_t low = std::max(begin, offset), high = std::min(end, offset + count);
    if (low < high)
      runs.push_back(ElementRun{static_cast<uint8_t*>(tensor.data) + (low - offset) * dtypeSize(tensor.type.dtype),
                                high - low});
    offset += count;
  }
  return runs;
}

// Steps: per ring step, the chunk worked on and the chunk handed on; the transport's predecessor
// runs are walked in lockstep with this rank's runs of the chunk.
Status ringAllReduce(std::span<const TensorView> bucket, int64_t total, int64_t position, int64_t n, ReduceOp op,
                     RingTransport& transport) {
  if (bucket.empty() || n < 2) return Status::ok();
  const DType dtype = bucket[0].type.dtype;
  const int64_t element_bytes = dtypeSize(dtype);
  auto chunkBegin = [total, n](int64_t chunk) { return total * chunk / n; };
  for (int64_t step = 0; step < 2 * (n - 1); ++step) {
    // 1. The chunk to work on (from the predecessor) and the one this rank finished last step.
    const int64_t chunk = ((position - 1 - step) % n + n) % n;
    const int64_t sent = ((position - step) % n + n) % n;
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ElementRun> theirs,
                            transport.exchange(step, chunkBegin(sent), chunkBegin(sent + 1), chunkBegin(chunk),
                                               chunkBegin(chunk + 1)));
    // 2. Combine (or copy) run by run.
    std::vector<ElementRun> mine = flatRuns(bucket, chunkBegin(chunk), chunkBegin(chunk + 1));
    size_t their_index = 0;
    int64_t their_used = 0;
    for (const ElementRun& own : mine) {
      int64_t done = 0;
      while (done < own.count) {
        if (their_index >= theirs.size())
          return Status::internal("ring all-reduce: the predecessor's chunk is shorter than this rank's");
        const ElementRun& other = theirs[their_index];
        int64_t count = std::min(own.count - done, other.count - their_used);
        uint8_t* target = own.data + done * element_bytes;
        const uint8_t* source = other.data + their_used * element_bytes;
        if (step < n - 1) {
          combineElements(dtype, target, source, count, op);
          if (op == ReduceOp::kMean && step == n - 2) divideElements(dtype, target, count, n);
        } else {
          std::memcpy(target, source, static_cast<size_t>(count * element_bytes));
        }
        done += count;
        their_used += count;
        if (their_used == other.count) {
          ++their_index;
          their_used = 0;
        }
      }
    }
    transport.stepDone(step);
  }
  return Status::ok();
}

}  // namespace cleave::runtime
