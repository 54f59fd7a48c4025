// Host-side building blocks of the CUDA kernel files (index maps from the CPU kernels' geometry).
#include "runtime/cuda/cuda_kernel_support.h"

#include <string>
#include <vector>

#include "runtime/cpu/cpu_kernel_support.h"

namespace cleave::runtime::cuda {
namespace {

Status tooManyDims(const KernelCall& call, size_t rank) {
  return Status::badInput(std::string(call.op.def.name) + ": " + std::to_string(rank) +
                          " dims remain after merging; the cuda kernels handle at most " + std::to_string(kMaxDims));
}

}  // namespace

Status unsupportedOnCuda(const KernelCall& call, DType dtype) {
  return Status::badInput(std::string(call.op.def.name) + ": " + std::string(dtypeName(dtype)) +
                          " not supported on cuda yet");
}

Status launchStatus(const KernelCall& call) {
  return cudaStatus(cudaGetLastError(), std::string(call.op.def.name) + ": kernel launch");
}

Expected<IndexMap> broadcastMap(const KernelCall& call, const Shape& result,
                                std::initializer_list<const Shape*> operands) {
  const cpu::BroadcastLayout layout = cpu::makeBroadcastLayout(result, operands);
  if (layout.dims.size() > static_cast<size_t>(kMaxDims)) return tooManyDims(call, layout.dims.size());
  IndexMap map;
  map.rank = static_cast<int>(layout.dims.size());
  for (int d = 0; d < map.rank; ++d) {
    map.dims[d] = layout.dims[d];
    for (size_t k = 0; k < layout.strides.size(); ++k) map.strides[k][d] = layout.strides[k][d];
  }
  return map;
}

Expected<IndexMap> sliceMap(const KernelCall& call, const Shape& input, const Shape& sliced) {
  CLEAVE_ASSIGN_OR_RETURN(const std::vector<cpu::SliceDim> dims, cpu::resolveSliceDims(call, input, sliced));
  if (input.size() > static_cast<size_t>(kMaxDims)) return tooManyDims(call, input.size());
  IndexMap map;
  map.rank = input.empty() ? 1 : static_cast<int>(input.size());
  int64_t stride = 1;
  for (size_t d = input.size(); d-- > 0;) {
    map.dims[d] = dims[d].count;
    map.strides[0][d] = dims[d].step * stride;
    map.base[0] += dims[d].start * stride;
    stride *= input[d];
  }
  return map;
}

Expected<ElementsMap> elementsMap(const KernelCall& call, const Shape& data, const Shape& indices, int64_t axis) {
  if (indices.size() > static_cast<size_t>(kMaxDims))
    return Status::badInput(std::string(call.op.def.name) + ": rank " + std::to_string(indices.size()) +
                            " is more than the " + std::to_string(kMaxDims) + " dims cuda kernels index");
  ElementsMap result;
  result.map.rank = std::max<int>(1, static_cast<int>(indices.size()));
  int64_t stride = 1;
  for (size_t d = indices.size(); d-- > 0;) {
    result.map.dims[d] = indices[d];
    result.map.strides[0][d] = static_cast<int64_t>(d) == axis ? 0 : stride;
    if (static_cast<int64_t>(d) == axis) result.axis_stride = stride;
    stride *= data[d];
  }
  result.length = data[static_cast<size_t>(axis)];
  return result;
}

Expected<NdMap> ndMap(const KernelCall& call, const Shape& data, const Shape& indices, int64_t batch_dims) {
  if (data.size() > static_cast<size_t>(kMaxDims))
    return Status::badInput(std::string(call.op.def.name) + ": rank " + std::to_string(data.size()) +
                            " is more than the " + std::to_string(kMaxDims) + " dims cuda kernels index");
  NdMap map;
  map.batch_dims = batch_dims;
  map.k = indices.back();
  int64_t stride = 1;
  for (size_t d = data.size(); d-- > 0;) {
    map.dims[d] = data[d];
    map.strides[d] = stride;
    stride *= data[d];
  }
  map.slice = dimsProduct(data, static_cast<size_t>(batch_dims + map.k), data.size());
  map.per_batch = dimsProduct(indices, static_cast<size_t>(batch_dims), indices.size() - 1);
  map.rows = dimsProduct(indices, 0, indices.size() - 1);
  return map;
}

Expected<IndexMap> transposeMap(const KernelCall& call) {
  const Shape& in = call.op.operands[0].shape;
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<int64_t> perm = call.op.getInts("perm");
  if (perm.empty())
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  for (int64_t& p : perm) p = normalizeAxis(p, rank);
  // Result dims of size 1 are dropped; the rest read input dim perm[k] with its row-major stride.
  std::vector<int64_t> in_strides(in.size(), 1);
  for (size_t d = in.size(); d-- > 1;) in_strides[d - 1] = in_strides[d] * in[d];
  std::vector<int64_t> dims, strides;
  for (int64_t p : perm) {
    if (in[p] == 1) continue;
    // Merge with the previous result dim when it reads the input dim just outside this one.
    if (!dims.empty() && strides.back() == in_strides[p] * in[p]) {
      dims.back() *= in[p];
      strides.back() = in_strides[p];
      continue;
    }
    dims.push_back(in[p]);
    strides.push_back(in_strides[p]);
  }
  if (dims.empty()) {
    dims.push_back(1);
    strides.push_back(0);
  }
  if (dims.size() > static_cast<size_t>(kMaxDims)) return tooManyDims(call, dims.size());
  IndexMap map;
  map.rank = static_cast<int>(dims.size());
  for (int d = 0; d < map.rank; ++d) {
    map.dims[d] = dims[d];
    map.strides[0][d] = strides[d];
  }
  return map;
}

Window readWindow(const OpContext& op, const Shape& input, const Shape& output, int64_t kernel_h, int64_t kernel_w,
                  bool pooling) {
  const cpu::Window2d w = cpu::readWindow(op, input, output, kernel_h, kernel_w, pooling);
  Window window;
  window.batch = w.batch;
  window.channels = input[1];
  window.height = w.height;
  window.width = w.width;
  window.out_height = w.out_height;
  window.out_width = w.out_width;
  window.kernel_h = w.kernel_h;
  window.kernel_w = w.kernel_w;
  window.stride_h = w.stride_h;
  window.stride_w = w.stride_w;
  window.dilation_h = w.dilation_h;
  window.dilation_w = w.dilation_w;
  window.pad_top = w.pad_top;
  window.pad_left = w.pad_left;
  window.pad_bottom = w.pad_bottom;
  window.pad_right = w.pad_right;
  return window;
}

int64_t dimsProduct(const Shape& shape, size_t first, size_t last) { return cpu::dimsProduct(shape, first, last); }

}  // namespace cleave::runtime::cuda
