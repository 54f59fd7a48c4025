// Building blocks shared by the CPU kernel files: threads, dtype dispatch, broadcasting, scratch
// memory, and the index geometry of axes, slices and sliding windows.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cpu/cpu_vector_math.h"
#include "runtime/device/kernel.h"

namespace cleave::runtime::cpu {

// ---- Threads ----

// Work, in units of about one simple arithmetic operation, below which a loop stays on the calling
// thread: waking a thread costs more than this.
constexpr int64_t kMinParallelWork = int64_t{1} << 15;

// The thread count a kernel call may use (at least 1).
inline int threadCount(const KernelCall& call) { return std::max(1, call.threads); }

// Splits [0, n) into contiguous ranges and calls body(begin, end) once per range, on up to `threads`
// OpenMP threads; stays on the calling thread when n·work_per_item is below kMinParallelWork.
template <class Body>
void parallelFor(int64_t n, int threads, int64_t work_per_item, Body&& body) {
  if (n <= 0) return;
  const int64_t per_item = std::max<int64_t>(1, work_per_item);
  const int64_t work = n > std::numeric_limits<int64_t>::max() / per_item ? std::numeric_limits<int64_t>::max()
                                                                          : n * per_item;
  const int64_t chunks = std::min<int64_t>({static_cast<int64_t>(threads), n, work / kMinParallelWork});
  if (chunks <= 1) {
    body(int64_t{0}, n);
    return;
  }
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    // Chunk c holds n / chunks items, one more for each of the first n % chunks chunks.
    const int64_t begin = n / chunks * c + std::min(c, n % chunks);
    body(begin, begin + n / chunks + (c < n % chunks ? 1 : 0));
  }
}

// Σ partial(begin, end) over the blocks [0, block), [block, 2·block), ... of [0, n), added in block
// order: the result is the same for every thread count.
template <class Partial>
double blockedSum(int64_t n, int threads, int64_t block, int64_t work_per_item, Partial&& partial) {
  if (n <= 0) return 0.0;
  const int64_t blocks = (n + block - 1) / block;
  std::vector<double> sums(static_cast<size_t>(blocks));
  parallelFor(blocks, threads, block * work_per_item, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) sums[b] = partial(b * block, std::min(n, (b + 1) * block));
  });
  double total = 0.0;
  for (double s : sums) total += s;
  return total;
}

// Copies `bytes` bytes from `source` to `destination` (not overlapping) on up to `threads` threads;
// does nothing when they are the same address (a plan may alias a copy's result with its operand).
void parallelCopy(void* destination, const void* source, int64_t bytes, int threads);

// ---- Dtype dispatch ----

// "<op>: <dtype> not supported on cpu yet" (kBadInput).
Status unsupportedDType(const KernelCall& call, DType dtype);

// Calls fn(T{}) with T = float or double; other dtypes are unsupported.
template <class Fn>
Status visitFloat(const KernelCall& call, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(float{});
    case DType::kF64: return fn(double{});
    default: return unsupportedDType(call, dtype);
  }
}

// Calls fn(T{}) with the element type of a float or integer dtype (f16 and bf16 are unsupported).
template <class Fn>
Status visitNumeric(const KernelCall& call, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(float{});
    case DType::kF64: return fn(double{});
    case DType::kI64: return fn(int64_t{});
    case DType::kI32: return fn(int32_t{});
    case DType::kI8: return fn(int8_t{});
    case DType::kU8: return fn(uint8_t{});
    default: return unsupportedDType(call, dtype);
  }
}

// Calls fn(T{}) with an unsigned integer type of the dtype's size: data movement needs only that.
template <class Fn>
Status visitBySize(DType dtype, Fn&& fn) {
  switch (dtypeSize(dtype)) {
    case 1: return fn(uint8_t{});
    case 2: return fn(uint16_t{});
    case 4: return fn(uint32_t{});
    default: return fn(uint64_t{});
  }
}

// Calls fn(I{}) with I = int64_t or int32_t for an index dtype.
template <class Fn>
Status visitIndex(const KernelCall& call, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kI64: return fn(int64_t{});
    case DType::kI32: return fn(int32_t{});
    default: return unsupportedDType(call, dtype);
  }
}

// ---- Scratch memory ----

// Number of independent scratch buffers per thread.
constexpr int kScratchSlots = 4;

// `bytes` of per-thread memory for a kernel's temporaries (64-byte aligned, contents undefined),
// reused across calls so that large temporaries are not mapped and page-faulted on every call; null
// when the allocation fails. A kernel uses a distinct `slot` (0..kScratchSlots-1) for each buffer it
// needs at the same time; the memory stays valid until the same thread asks for the same slot again.
void* scratchBytes(int slot, int64_t bytes);

// `count` elements of T from scratchBytes.
template <class T>
T* scratch(int slot, int64_t count) {
  return static_cast<T*>(scratchBytes(slot, count * static_cast<int64_t>(sizeof(T))));
}

// "<op>: cannot allocate N bytes of scratch memory" (kRuntime).
Status scratchAllocationFailure(const KernelCall& call, int64_t bytes);

// ---- Broadcasting ----

// The iteration space of a broadcasting elementwise op, with adjacent dims merged where every
// operand either spans both or is broadcast over both, and size-1 result dims dropped.
struct BroadcastLayout {
  Shape dims;                                 // merged result dims; {1} for a single element
  std::vector<std::vector<int64_t>> strides;  // strides[operand][dim] in elements; 0 where broadcast

  // Whether `operand` advances along the innermost dim (stride 1) rather than repeating (stride 0).
  bool steps(int operand) const { return strides[operand].back() != 0; }
};

// The layout of `result` computed from `operands` (each numpy-broadcastable to it).
BroadcastLayout makeBroadcastLayout(const Shape& result, std::initializer_list<const Shape*> operands);

// Walks the result elements [begin, end) in runs along the innermost dim: calls
// segment(result_offset, operand_offsets, length) per run, operand offsets being element offsets.
template <size_t N, class Segment>
void forEachSegment(const BroadcastLayout& layout, int64_t begin, int64_t end, Segment&& segment) {
  const size_t rank = layout.dims.size();
  const int64_t inner = layout.dims[rank - 1];
  // 1. The multi-index of `begin` and the operand offsets there.
  std::vector<int64_t> index(rank);
  std::array<int64_t, N> offsets{};
  int64_t rest = begin;
  for (size_t d = rank; d-- > 0;) {
    index[d] = rest % layout.dims[d];
    rest /= layout.dims[d];
    for (size_t k = 0; k < N; ++k) offsets[k] += index[d] * layout.strides[k][d];
  }
  // 2. One run per innermost row (partial at the ends), then an odometer step over the outer dims.
  for (int64_t position = begin; position < end;) {
    const int64_t length = std::min(inner - index[rank - 1], end - position);
    segment(position, offsets, length);
    position += length;
    index[rank - 1] += length;
    for (size_t k = 0; k < N; ++k) offsets[k] += length * layout.strides[k][rank - 1];
    if (index[rank - 1] < inner) continue;
    for (size_t k = 0; k < N; ++k) offsets[k] -= inner * layout.strides[k][rank - 1];
    index[rank - 1] = 0;
    for (size_t d = rank - 1; d-- > 0;) {
      ++index[d];
      for (size_t k = 0; k < N; ++k) offsets[k] += layout.strides[k][d];
      if (index[d] < layout.dims[d]) break;
      for (size_t k = 0; k < N; ++k) offsets[k] -= layout.dims[d] * layout.strides[k][d];
      index[d] = 0;
    }
  }
}

// ---- Normalisation ----

// Mean and 1/sqrt(biased variance + epsilon) of one row, in double (two passes).
template <class T>
std::pair<double, double> rowMoments(const T* x, int64_t length, double epsilon) {
  const double mean = sumOf(length, [x](int64_t i) { return x[i]; }) / static_cast<double>(length);
  const double squares = sumOf(length, [x, mean](int64_t i) {
    const double centred = static_cast<double>(x[i]) - mean;
    return centred * centred;
  });
  return {mean, 1.0 / std::sqrt(squares / static_cast<double>(length) + epsilon)};
}

// 1/sqrt(mean(x²) + epsilon) of one row, in double (rms_norm and rms_norm_grad).
template <class T>
double rowRmsReciprocal(const T* x, int64_t length, double epsilon) {
  const double squares = sumOf(length, [x](int64_t i) {
    const double value = static_cast<double>(x[i]);
    return value * value;
  });
  return 1.0 / std::sqrt(squares / static_cast<double>(length) + epsilon);
}

// ---- Labels ----

// The number of labels that are not ignore_index, or a kBadInput error naming the first label
// outside [0, classes) (softmax_cross_entropy and its gradient).
template <class I>
Expected<int64_t> countLabels(const KernelCall& call, const I* labels, int64_t count, int64_t classes,
                              int64_t ignore_index) {
  int64_t counted = 0;
  for (int64_t r = 0; r < count; ++r) {
    const int64_t label = labels[r];
    if (label == ignore_index) continue;
    if (label < 0 || label >= classes)
      return Status::badInput(std::string(call.op.def.name) + ": label " + std::to_string(label) + " at position " +
                              std::to_string(r) + " is out of range [0, " + std::to_string(classes) +
                              ") and is not ignore_index (" + std::to_string(ignore_index) + ")");
    ++counted;
  }
  return counted;
}

// One row of softmax_cross_entropy's gradient (and of the fused loss and gradient): e^(x − max)
// once per element, kept in `out`, summed in double; then out = (e / sum − onehot(label))·scale.
// Returns the row's max and the sum, from which the fused kernel takes the row's loss. (Call it
// inside withWidestVectors: its loops vectorise.)
template <class T>
struct ExpSum {
  T max;
  double sum;
};
template <class T>
CLEAVE_INLINE ExpSum<T> crossEntropyGradientRow(const T* row, T* out, int64_t classes, int64_t label, T scale) {
  const T max = maxOf(row, classes);
  for (int64_t c = 0; c < classes; ++c) out[c] = vexp(row[c] - max);
  const double sum = sumOf(classes, [out](int64_t c) { return out[c]; });
  const T inverse_sum = static_cast<T>(1.0 / sum);
  for (int64_t c = 0; c < classes; ++c) out[c] = (out[c] * inverse_sum - (c == label ? T(1) : T(0))) * scale;
  return {max, sum};
}

// ---- Index geometry ----

// A tensor seen as [outer, length, inner] around one of its dims.
struct AxisView {
  int64_t outer = 1;   // product of the dims before the axis
  int64_t length = 1;  // the axis's size
  int64_t inner = 1;   // product of the dims after it
};

// Where gather_nd reads (and its gradient writes): index tuple `row` (k integers, after the first
// batch_dims dims of the indices) addresses a slice of data's trailing dims.
class NdAddressing {
 public:
  NdAddressing(const Shape& data_shape, const Shape& index_shape, int64_t batch_dims);
  int64_t rows() const { return rows_; }             // index tuples
  int64_t tupleSize() const { return k_; }           // k
  int64_t sliceSize() const { return slice_; }       // elements per slice
  // The data offset of row `row`'s slice, or -1 when an index is out of range (`bad` is then its position).
  template <class I>
  int64_t offset(int64_t row, const I* tuple, int64_t& bad) const {
    int64_t offset = 0, batch = per_batch_ > 0 ? row / per_batch_ : 0;
    for (int64_t d = batch_dims_ - 1; d >= 0; --d) {
      offset += batch % data_shape_[d] * strides_[d];
      batch /= data_shape_[d];
    }
    for (int64_t j = 0; j < k_; ++j) {
      const int64_t dim = data_shape_[batch_dims_ + j];
      int64_t index = tuple[j];
      if (index < -dim || index >= dim) {
        bad = j;
        return -1;
      }
      offset += (index < 0 ? index + dim : index) * strides_[batch_dims_ + j];
    }
    return offset;
  }

 private:
  Shape data_shape_;
  std::vector<int64_t> strides_;
  int64_t batch_dims_, k_, slice_ = 1, per_batch_ = 1, rows_ = 1;
};

// The view of `shape` around `axis` (already normalised to [0, rank)).
AxisView axisView(const Shape& shape, int64_t axis);

// Product of shape[first..last).
int64_t dimsProduct(const Shape& shape, size_t first, size_t last);

// Where gather_elements reads (and its gradient writes): element i of indices of `index_shape`
// addresses the data element at i's coordinates with the `axis` one replaced by the index.
class ElementsAddressing {
 public:
  ElementsAddressing(const Shape& data_shape, const Shape& index_shape, int64_t axis);
  // The axis's size in data (indices lie in [-length, length)).
  int64_t length() const { return length_; }
  // The data offset of element i for index `index`, already in [0, length).
  int64_t offset(int64_t i, int64_t index) const;

 private:
  Shape index_shape_;
  std::vector<int64_t> index_strides_, data_strides_;
  int64_t axis_, length_;
};

// One dim of a slice: the first index read, the step between reads, and how many reads.
struct SliceDim {
  int64_t start = 0;
  int64_t step = 1;
  int64_t count = 0;
};

// Resolves a slice's starts/ends/axes/steps attributes against `input` (ONNX Slice: negative
// indices count from the end, then clamp), one SliceDim per input dim; checks that the counts give
// `sliced` (the slice's result shape), else an internal error.
Expected<std::vector<SliceDim>> resolveSliceDims(const KernelCall& call, const Shape& input, const Shape& sliced);

// The geometry of a conv2d or 2-D pooling window over NCHW images.
struct Window2d {
  int64_t batch = 0, height = 0, width = 0;  // input N, H, W
  int64_t out_height = 0, out_width = 0;
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
};

// Reads strides, pads and dilations (the defaults where absent or empty; a pool's strides default
// to its kernel) for an input [N,C,H,W], an output [N,*,Ho,Wo] and a kernel of kernel_h × kernel_w.
Window2d readWindow(const OpContext& op, const Shape& input, const Shape& output, int64_t kernel_h, int64_t kernel_w,
                    bool pooling);

}  // namespace cleave::runtime::cpu
