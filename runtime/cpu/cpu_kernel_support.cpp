// Building blocks shared by the CPU kernel files (the parts that are not templates).
#include "runtime/cpu/cpu_kernel_support.h"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "ir/ops/op_rules.h"

namespace cleave::runtime::cpu {

void parallelCopy(void* destination, const void* source, int64_t bytes, int threads) {
  if (destination == source || bytes <= 0) return;
  constexpr int64_t kBlock = 1 << 16;  // bytes per parallel work item
  auto* to = static_cast<std::byte*>(destination);
  const auto* from = static_cast<const std::byte*>(source);
  const int64_t blocks = (bytes + kBlock - 1) / kBlock;
  // A memcpy moves about 8 bytes per simple operation's time: the work per block is kBlock / 8.
  parallelFor(blocks, threads, kBlock / 8, [&](int64_t first, int64_t last) {
    const int64_t begin = first * kBlock, end = std::min(bytes, last * kBlock);
    std::memcpy(to + begin, from + begin, static_cast<size_t>(end - begin));
  });
}

Status unsupportedDType(const KernelCall& call, DType dtype) {
  return Status::badInput(std::string(call.op.def.name) + ": " + std::string(dtypeName(dtype)) +
                          " not supported on cpu yet");
}

Status scratchAllocationFailure(const KernelCall& call, int64_t bytes) {
  return Status::runtime(std::string(call.op.def.name) + ": cannot allocate " + std::to_string(bytes) +
                         " bytes of scratch memory");
}

namespace {

// One grow-only, 64-byte aligned block of memory.
struct ScratchBlock {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> data;
  int64_t capacity = 0;
};

}  // namespace

void* scratchBytes(int slot, int64_t bytes) {
  thread_local std::array<ScratchBlock, kScratchSlots> blocks;
  ScratchBlock& block = blocks[static_cast<size_t>(slot)];
  bytes = std::max<int64_t>(bytes, 64);  // never an empty block: null means failure
  if (bytes > block.capacity) {
    // Round up to 64 bytes (aligned_alloc needs a multiple of the alignment) and grow by half again,
    // so a slowly growing series of requests does not reallocate every time.
    const int64_t capacity = (std::max(bytes, block.capacity + block.capacity / 2) + 63) / 64 * 64;
    block.data.reset();  // free first: the old contents are not kept
    block.capacity = 0;
    block.data.reset(std::aligned_alloc(64, static_cast<size_t>(capacity)));
    if (!block.data) return nullptr;
    block.capacity = capacity;
  }
  return block.data.get();
}

BroadcastLayout makeBroadcastLayout(const Shape& result, std::initializer_list<const Shape*> operands) {
  const size_t rank = result.size();
  const size_t count = operands.size();
  // 1. Per result dim of size > 1, whether each operand spans it (else it is broadcast, size 1).
  Shape dims;
  std::vector<std::vector<bool>> spans(count);
  for (size_t d = 0; d < rank; ++d) {
    if (result[d] == 1) continue;
    std::vector<bool> here(count);
    size_t k = 0;
    for (const Shape* shape : operands) {
      const size_t offset = rank - shape->size();
      here[k++] = d >= offset && (*shape)[d - offset] != 1;
    }
    // 2. Merge with the previous kept dim when every operand spans both or neither.
    bool merge = !dims.empty();
    for (size_t j = 0; j < count && merge; ++j) merge = spans[j].back() == here[j];
    if (merge) {
      dims.back() *= result[d];
    } else {
      dims.push_back(result[d]);
      for (size_t j = 0; j < count; ++j) spans[j].push_back(here[j]);
    }
  }
  if (dims.empty()) {
    dims.push_back(1);
    for (size_t j = 0; j < count; ++j) spans[j].push_back(false);
  }
  // 3. Row-major strides over the dims each operand spans; 0 elsewhere.
  BroadcastLayout layout{dims, std::vector<std::vector<int64_t>>(count, std::vector<int64_t>(dims.size(), 0))};
  for (size_t j = 0; j < count; ++j) {
    int64_t stride = 1;
    for (size_t d = dims.size(); d-- > 0;) {
      if (!spans[j][d]) continue;
      layout.strides[j][d] = stride;
      stride *= dims[d];
    }
  }
  return layout;
}

int64_t dimsProduct(const Shape& shape, size_t first, size_t last) {
  int64_t product = 1;
  for (size_t d = first; d < last; ++d) product *= shape[d];
  return product;
}

ElementsAddressing::ElementsAddressing(const Shape& data_shape, const Shape& index_shape, int64_t axis)
    : index_shape_(index_shape), index_strides_(index_shape.size()), data_strides_(data_shape.size()), axis_(axis),
      length_(data_shape[static_cast<size_t>(axis)]) {
  int64_t index_stride = 1, data_stride = 1;
  for (size_t d = index_shape.size(); d-- > 0;) {
    index_strides_[d] = index_stride;
    data_strides_[d] = data_stride;
    index_stride *= index_shape[d];
    data_stride *= data_shape[d];
  }
}

int64_t ElementsAddressing::offset(int64_t i, int64_t index) const {
  int64_t offset = 0;
  for (size_t d = 0; d < index_shape_.size(); ++d) {
    const int64_t coordinate = static_cast<int64_t>(d) == axis_ ? index : i / index_strides_[d] % index_shape_[d];
    offset += coordinate * data_strides_[d];
  }
  return offset;
}

NdAddressing::NdAddressing(const Shape& data_shape, const Shape& index_shape, int64_t batch_dims)
    : data_shape_(data_shape), strides_(data_shape.size(), 1), batch_dims_(batch_dims), k_(index_shape.back()) {
  for (size_t d = data_shape.size(); d-- > 1;) strides_[d - 1] = strides_[d] * data_shape[d];
  slice_ = dimsProduct(data_shape, static_cast<size_t>(batch_dims + k_), data_shape.size());
  per_batch_ = dimsProduct(index_shape, static_cast<size_t>(batch_dims), index_shape.size() - 1);
  rows_ = dimsProduct(index_shape, 0, index_shape.size() - 1);
}

AxisView axisView(const Shape& shape, int64_t axis) {
  const size_t a = static_cast<size_t>(axis);
  return {dimsProduct(shape, 0, a), shape[a], dimsProduct(shape, a + 1, shape.size())};
}

Expected<std::vector<SliceDim>> resolveSliceDims(const KernelCall& call, const Shape& input, const Shape& sliced) {
  // The shape rule's resolution (ONNX's clamping), against `input`: operand 0 of slice, the data
  // shape slice_grad scatters into.
  const std::string name(call.op.def.name);
  const std::vector<TensorType> operands = {TensorType{DType::kF32, input}};
  auto resolved = ops::resolveSlice(OpContext{call.op.def, operands, {}, call.op.attrs});
  if (!resolved)
    return Status::internal(name + ": slice attributes the shape rule should have rejected: " +
                            resolved.status().message());
  std::vector<SliceDim> dims(input.size());
  for (size_t d = 0; d < input.size(); ++d) dims[d] = {0, 1, input[d]};
  for (const ops::SliceAxis& along : *resolved) dims[static_cast<size_t>(along.axis)] = {along.start, along.step, along.count};
  for (size_t d = 0; d < input.size(); ++d)
    if (d >= sliced.size() || dims[d].count != sliced[d])
      return Status::internal(name + ": the slice of " + shapeStr(input) + " resolves to a different shape than " +
                              shapeStr(sliced));
  return dims;
}

Window2d readWindow(const OpContext& op, const Shape& input, const Shape& output, int64_t kernel_h, int64_t kernel_w,
                    bool pooling) {
  auto ints = [&](const char* name, std::vector<int64_t> fallback) {
    if (!op.def.findAttr(name)) return fallback;
    const std::vector<int64_t>& values = op.getInts(name);
    return values.empty() ? fallback : values;
  };
  const std::vector<int64_t> strides = ints("strides", pooling ? std::vector<int64_t>{kernel_h, kernel_w}
                                                               : std::vector<int64_t>{1, 1});
  const std::vector<int64_t> pads = ints("pads", {0, 0, 0, 0});
  const std::vector<int64_t> dilations = ints("dilations", {1, 1});
  Window2d w;
  w.batch = input[0];
  w.height = input[2];
  w.width = input[3];
  w.out_height = output[2];
  w.out_width = output[3];
  w.kernel_h = kernel_h;
  w.kernel_w = kernel_w;
  w.stride_h = strides[0];
  w.stride_w = strides[1];
  w.dilation_h = dilations[0];
  w.dilation_w = dilations[1];
  w.pad_top = pads[0];
  w.pad_left = pads[1];
  w.pad_bottom = pads[2];
  w.pad_right = pads[3];
  return w;
}

}  // namespace cleave::runtime::cpu
