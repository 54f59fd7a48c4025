// CUDA kernels of conv2d and its gradients (conv2d_grad_input, conv2d_grad_weight) through cuDNN's
// convolution API, in FMA math (no TF32: f32 stays f32). cuDNN pads symmetrically; asymmetric pads
// (top ≠ bottom or left ≠ right) go through an explicitly zero-padded copy of the image instead.
#include <memory>
#include <string>
#include <vector>

#include "ir/ops/image_layout.h"
#include "ir/ops/resize_coordinates.h"
#include "runtime/cuda/cuda_kernel_support.cuh"

namespace cleave::runtime::cuda {
namespace {

// The most workspace a convolution algorithm may ask for.
constexpr size_t kMaxWorkspaceBytes = size_t{1} << 30;

// The cuDNN descriptors of one convolution: image x [N,C,H,W] (H, W padded when padding
// explicitly), filter w [O,C/groups,kh,kw], output y [N,O,Ho,Wo].
struct ConvDescriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  ConvDescriptors() = default;
  ConvDescriptors(const ConvDescriptors&) = delete;
  ConvDescriptors& operator=(const ConvDescriptors&) = delete;
  ~ConvDescriptors() {
    if (conv) (void)cudnnDestroyConvolutionDescriptor(conv);
    if (w) (void)cudnnDestroyFilterDescriptor(w);
    if (y) (void)cudnnDestroyTensorDescriptor(y);
    if (x) (void)cudnnDestroyTensorDescriptor(x);
  }
};

// A convolution's geometry and how it runs.
struct ConvProblem {
  Window window;  // x [N,C,H,W] → y [N,O,Ho,Wo]
  int64_t out_channels = 0, groups = 1, group_channels = 0;
  bool explicit_padding = false;  // the image goes through a padded copy (asymmetric pads)
  int64_t padded_height = 0, padded_width = 0;

  int64_t paddedElements() const { return window.batch * window.channels * padded_height * padded_width; }
};

ConvProblem makeProblem(const OpContext& op, const Shape& x, const Shape& w, const Shape& y) {
  ConvProblem p;
  p.window = readWindow(op, x, y, w[2], w[3], false);
  p.out_channels = w[0];
  p.groups = op.getInt("groups");
  p.group_channels = w[1];
  const Window& v = p.window;
  p.explicit_padding = v.pad_top != v.pad_bottom || v.pad_left != v.pad_right;
  p.padded_height = v.height + v.pad_top + v.pad_bottom;
  p.padded_width = v.width + v.pad_left + v.pad_right;
  return p;
}

// Bytes of scratch for the padded image (a multiple of 256, so the workspace after it stays
// aligned); 0 without explicit padding.
template <class T>
int64_t paddedBytes(const ConvProblem& p) {
  if (!p.explicit_padding) return 0;
  return (p.paddedElements() * static_cast<int64_t>(sizeof(T)) + 255) / 256 * 256;
}

template <class T>
cudnnDataType_t cudnnType() {
  return std::is_same_v<T, float> ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
}

bool fitsInt(std::initializer_list<int64_t> values) {
  for (int64_t v : values)
    if (v > INT32_MAX) return false;
  return true;
}

// Fills `d` for problem `p` in dtype T.
template <class T>
Status describe(const KernelCall& call, const ConvProblem& p, ConvDescriptors& d) {
  const Window& w = p.window;
  const std::string what = std::string(call.op.def.name) + ": cudnn descriptors";
  const int64_t height = p.explicit_padding ? p.padded_height : w.height;
  const int64_t width = p.explicit_padding ? p.padded_width : w.width;
  if (!fitsInt({w.batch, w.channels, height, width, p.out_channels, w.out_height, w.out_width, w.kernel_h, w.kernel_w,
                w.stride_h, w.stride_w, w.dilation_h, w.dilation_w, w.pad_top, w.pad_left, p.groups}))
    return Status::badInput(std::string(call.op.def.name) + ": a dim exceeds 2^31-1, beyond cuDNN's 32-bit dims");
  const cudnnDataType_t type = cudnnType<T>();
  auto i = [](int64_t v) { return static_cast<int>(v); };
  CLEAVE_TRY(cudnnStatus(cudnnCreateTensorDescriptor(&d.x), what));
  CLEAVE_TRY(cudnnStatus(cudnnCreateTensorDescriptor(&d.y), what));
  CLEAVE_TRY(cudnnStatus(cudnnCreateFilterDescriptor(&d.w), what));
  CLEAVE_TRY(cudnnStatus(cudnnCreateConvolutionDescriptor(&d.conv), what));
  CLEAVE_TRY(cudnnStatus(
      cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, type, i(w.batch), i(w.channels), i(height), i(width)), what));
  CLEAVE_TRY(cudnnStatus(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NCHW, type, i(w.batch), i(p.out_channels),
                                                    i(w.out_height), i(w.out_width)),
                         what));
  CLEAVE_TRY(cudnnStatus(cudnnSetFilter4dDescriptor(d.w, type, CUDNN_TENSOR_NCHW, i(p.out_channels),
                                                    i(p.group_channels), i(w.kernel_h), i(w.kernel_w)),
                         what));
  const int pad_h = p.explicit_padding ? 0 : i(w.pad_top), pad_w = p.explicit_padding ? 0 : i(w.pad_left);
  CLEAVE_TRY(cudnnStatus(cudnnSetConvolution2dDescriptor(d.conv, pad_h, pad_w, i(w.stride_h), i(w.stride_w),
                                                         i(w.dilation_h), i(w.dilation_w), CUDNN_CROSS_CORRELATION,
                                                         type),
                         what));
  CLEAVE_TRY(cudnnStatus(cudnnSetConvolutionGroupCount(d.conv, i(p.groups)), what));
  CLEAVE_TRY(cudnnStatus(cudnnSetConvolutionMathType(d.conv, CUDNN_FMA_MATH), what));
  return Status::ok();
}

// The first algorithm of cuDNN's heuristic ranking that succeeds in FMA math (for f64 also the
// default math, which has no TF32 there) within kMaxWorkspaceBytes; else algorithm 0 (implicit
// GEMM, which supports every configuration without workspace). Sets the descriptor's math type.
template <class T, class Perf, class Algo>
Status pickAlgorithm(const KernelCall& call, const ConvDescriptors& d, const std::vector<Perf>& ranked, int returned,
                     Algo& algorithm) {
  algorithm = static_cast<Algo>(0);
  cudnnMathType_t math = CUDNN_FMA_MATH;
  for (int r = 0; r < returned; ++r) {
    const Perf& perf = ranked[r];
    const bool exact_math =
        perf.mathType == CUDNN_FMA_MATH || (std::is_same_v<T, double> && perf.mathType == CUDNN_DEFAULT_MATH);
    if (perf.status == CUDNN_STATUS_SUCCESS && exact_math && perf.memory <= kMaxWorkspaceBytes) {
      algorithm = perf.algo;
      math = perf.mathType;
      break;
    }
  }
  return cudnnStatus(cudnnSetConvolutionMathType(d.conv, math), std::string(call.op.def.name) + ": cudnn math type");
}

// xp = x zero-padded by (top, left) and to padded_height × padded_width.
template <class T>
__global__ void padImages(const T* x, T* xp, int64_t n, int64_t height, int64_t width, int64_t padded_height,
                          int64_t padded_width, int64_t top, int64_t left) {
  CLEAVE_GRID_LOOP(i, n) {
    const int64_t w = i % padded_width - left, h = i / padded_width % padded_height - top;
    const int64_t plane = i / (padded_width * padded_height);
    xp[i] = (h >= 0 && h < height && w >= 0 && w < width) ? x[(plane * height + h) * width + w] : T{0};
  }
}

// x = the (top, left)-offset window of the padded xp.
template <class T>
__global__ void cropImages(const T* xp, T* x, int64_t n, int64_t height, int64_t width, int64_t padded_height,
                           int64_t padded_width, int64_t top, int64_t left) {
  CLEAVE_GRID_LOOP(i, n) {
    const int64_t w = i % width, h = i / width % height, plane = i / (width * height);
    x[i] = xp[(plane * padded_height + h + top) * padded_width + w + left];
  }
}

template <class T>
Status padImage(const KernelCall& call, CudaContext& context, const ConvProblem& p, const T* x, T* xp) {
  const Window& w = p.window;
  const int64_t n = p.paddedElements();
  padImages<T><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(x, xp, n, w.height, w.width, p.padded_height,
                                                                      p.padded_width, w.pad_top, w.pad_left);
  return launchStatus(call);
}

// y[n, o, ...] += bias[o] (or y = bias when `assign`).
template <class T>
__global__ void addBias(const T* bias, T* y, int64_t n, int64_t channels, int64_t plane, bool assign) {
  CLEAVE_GRID_LOOP(i, n) {
    const T b = bias ? bias[i / plane % channels] : T{0};
    y[i] = assign ? b : y[i] + b;
  }
}

// ---- conv2d ----

template <class T>
Status conv2dTyped(const KernelCall& call, CudaContext& context) {
  const ConvProblem p = makeProblem(call.op, call.op.operands[0].shape, call.op.operands[1].shape,
                                    call.op.results[0].shape);
  const T* x = call.in<T>(0);
  const T* bias = call.op.operands.size() == 3 ? call.in<T>(2) : nullptr;
  T* y = call.out<T>(0);
  const int64_t n = call.op.results[0].numel(), plane = p.window.out_height * p.window.out_width;
  if (n == 0) return Status::ok();
  if (p.group_channels == 0) {  // no input channels: y is the bias alone
    addBias<T><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(bias, y, n, p.out_channels, plane, true);
    return launchStatus(call);
  }
  // 1. Descriptors, algorithm and workspace (after the padded image, when there is one).
  ConvDescriptors d;
  CLEAVE_TRY(describe<T>(call, p, d));
  const std::string what = std::string(call.op.def.name) + ": cudnn";
  std::vector<cudnnConvolutionFwdAlgoPerf_t> ranked(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  int returned = 0;
  CLEAVE_TRY(cudnnStatus(cudnnGetConvolutionForwardAlgorithm_v7(context.cudnn(), d.x, d.w, d.conv, d.y,
                                                                static_cast<int>(ranked.size()), &returned,
                                                                ranked.data()),
                         what));
  cudnnConvolutionFwdAlgo_t algorithm;
  CLEAVE_TRY(pickAlgorithm<T>(call, d, ranked, returned, algorithm));
  size_t workspace_bytes = 0;
  CLEAVE_TRY(cudnnStatus(
      cudnnGetConvolutionForwardWorkspaceSize(context.cudnn(), d.x, d.w, d.conv, d.y, algorithm, &workspace_bytes),
      what));
  const int64_t padded_bytes = paddedBytes<T>(p);
  CLEAVE_ASSIGN_OR_RETURN(void* scratch, context.scratch(padded_bytes + static_cast<int64_t>(workspace_bytes) + 256));
  T* padded = static_cast<T*>(scratch);
  void* workspace = static_cast<uint8_t*>(scratch) + padded_bytes;
  if (p.explicit_padding) {
    CLEAVE_TRY(padImage(call, context, p, x, padded));
    x = padded;
  }
  // 2. y = conv(x, w), then + bias.
  const T one = 1, zero = 0;
  CLEAVE_TRY(cudnnStatus(cudnnConvolutionForward(context.cudnn(), &one, d.x, x, d.w, call.in<T>(1), d.conv, algorithm,
                                                 workspace, workspace_bytes, &zero, d.y, y),
                         what + " convolution forward"));
  if (!bias) return Status::ok();
  addBias<T><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(bias, y, n, p.out_channels, plane, false);
  return launchStatus(call);
}

// ---- conv2d_grad_input ----

template <class T>
Status conv2dGradInputTyped(const KernelCall& call, CudaContext& context) {
  const ConvProblem p = makeProblem(call.op, call.op.results[0].shape, call.op.operands[1].shape,
                                    call.op.operands[0].shape);
  T* dx = call.out<T>(0);
  if (call.op.results[0].numel() == 0) return Status::ok();
  if (call.op.operands[0].numel() == 0) return zeroBytes(call, context, dx, call.op.results[0].bytes());
  ConvDescriptors d;
  CLEAVE_TRY(describe<T>(call, p, d));
  const std::string what = std::string(call.op.def.name) + ": cudnn";
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> ranked(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
  int returned = 0;
  CLEAVE_TRY(cudnnStatus(cudnnGetConvolutionBackwardDataAlgorithm_v7(context.cudnn(), d.w, d.y, d.conv, d.x,
                                                                     static_cast<int>(ranked.size()), &returned,
                                                                     ranked.data()),
                         what));
  cudnnConvolutionBwdDataAlgo_t algorithm;
  CLEAVE_TRY(pickAlgorithm<T>(call, d, ranked, returned, algorithm));
  size_t workspace_bytes = 0;
  CLEAVE_TRY(cudnnStatus(cudnnGetConvolutionBackwardDataWorkspaceSize(context.cudnn(), d.w, d.y, d.conv, d.x, algorithm,
                                                                      &workspace_bytes),
                         what));
  const int64_t padded_bytes = paddedBytes<T>(p);
  CLEAVE_ASSIGN_OR_RETURN(void* scratch, context.scratch(padded_bytes + static_cast<int64_t>(workspace_bytes) + 256));
  T* padded = static_cast<T*>(scratch);
  void* workspace = static_cast<uint8_t*>(scratch) + padded_bytes;
  // dx (or the padded image's gradient, then cropped to dx).
  const T one = 1, zero = 0;
  CLEAVE_TRY(cudnnStatus(cudnnConvolutionBackwardData(context.cudnn(), &one, d.w, call.in<T>(1), d.y, call.in<T>(0),
                                                      d.conv, algorithm, workspace, workspace_bytes, &zero, d.x,
                                                      p.explicit_padding ? padded : dx),
                         what + " convolution backward data"));
  if (!p.explicit_padding) return Status::ok();
  const Window& w = p.window;
  const int64_t n = call.op.results[0].numel();
  cropImages<T><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(padded, dx, n, w.height, w.width,
                                                                       p.padded_height, p.padded_width, w.pad_top,
                                                                       w.pad_left);
  return launchStatus(call);
}

// ---- conv2d_grad_weight ----

template <class T>
Status conv2dGradWeightTyped(const KernelCall& call, CudaContext& context) {
  const ConvProblem p = makeProblem(call.op, call.op.operands[1].shape, call.op.results[0].shape,
                                    call.op.operands[0].shape);
  T* dw = call.out<T>(0);
  const Window& w = p.window;
  if (call.op.results[0].numel() == 0) return Status::ok();
  if (w.batch == 0 || w.out_height * w.out_width == 0) return zeroBytes(call, context, dw, call.op.results[0].bytes());
  ConvDescriptors d;
  CLEAVE_TRY(describe<T>(call, p, d));
  const std::string what = std::string(call.op.def.name) + ": cudnn";
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> ranked(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
  int returned = 0;
  CLEAVE_TRY(cudnnStatus(cudnnGetConvolutionBackwardFilterAlgorithm_v7(context.cudnn(), d.x, d.y, d.conv, d.w,
                                                                       static_cast<int>(ranked.size()), &returned,
                                                                       ranked.data()),
                         what));
  cudnnConvolutionBwdFilterAlgo_t algorithm;
  CLEAVE_TRY(pickAlgorithm<T>(call, d, ranked, returned, algorithm));
  size_t workspace_bytes = 0;
  CLEAVE_TRY(cudnnStatus(cudnnGetConvolutionBackwardFilterWorkspaceSize(context.cudnn(), d.x, d.y, d.conv, d.w,
                                                                        algorithm, &workspace_bytes),
                         what));
  const int64_t padded_bytes = paddedBytes<T>(p);
  CLEAVE_ASSIGN_OR_RETURN(void* scratch, context.scratch(padded_bytes + static_cast<int64_t>(workspace_bytes) + 256));
  T* padded = static_cast<T*>(scratch);
  void* workspace = static_cast<uint8_t*>(scratch) + padded_bytes;
  const T* x = call.in<T>(1);
  if (p.explicit_padding) {
    CLEAVE_TRY(padImage(call, context, p, x, padded));
    x = padded;
  }
  const T one = 1, zero = 0;
  return cudnnStatus(cudnnConvolutionBackwardFilter(context.cudnn(), &one, d.x, x, d.y, call.in<T>(0), d.conv, algorithm,
                                                    workspace, workspace_bytes, &zero, d.w, dw),
                     what + " convolution backward filter");
}

Status conv2dKernel(const KernelCall& call, CudaContext& context) {
  if (isChannelsLast(call.op)) return runChannelsLastThroughNchw(call, context, conv2dKernel);
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) { return conv2dTyped<T>(call, context); });
}
// fused_conv2d's epilogue after the conv2d: y = relu(y + residual) (either part optional).
template <class T>
__global__ void convEpilogue(const T* residual, T* y, int64_t n, bool relu) {
  CLEAVE_GRID_LOOP(i, n) {
    const T v = residual ? y[i] + residual[i] : y[i];
    y[i] = relu && v < T{0} ? T{0} : v;
  }
}

// fused_conv2d: the conv2d (cuDNN), then its epilogue as one more kernel.
Status fusedConv2dKernel(const KernelCall& call, CudaContext& context) {
  const KernelCall conv{OpContext{opDef(OpId::conv2d), call.op.operands.first(3), call.op.results, call.op.attrs},
                        call.inputs.first(3), call.outputs, call.threads};
  CLEAVE_TRY(conv2dKernel(conv, context));
  const bool relu = call.op.getString("activation") == "relu";
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) {
    const int64_t n = call.op.results[0].numel();
    if (n == 0) return Status::ok();
    const T* residual = call.op.operands.size() == 4 ? call.in<T>(3) : nullptr;
    convEpilogue<T><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(residual, call.out<T>(0), n, relu);
    return launchStatus(call);
  });
}

Status conv2dGradInputKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) { return conv2dGradInputTyped<T>(call, context); });
}
Status conv2dGradWeightKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype,
                    [&]<class T>(T) { return conv2dGradWeightTyped<T>(call, context); });
}

// ---- resize, resize_grad ----

// One thread per output element: the weighted sum of the inputs it reads (ir/ops/resize_coordinates.h).
template <class T>
__global__ void resizeElements(const T* x, T* y, int64_t n, ResizeGeometry g) {
  CLEAVE_GRID_LOOP(i, n) {
    double sum = 0;
    forEachResizeSource(g, i, [&](int64_t offset, double weight) { sum += weight * static_cast<double>(x[offset]); });
    y[i] = static_cast<T>(sum);
  }
}

// One thread per dy element, adding into the inputs it came from (atomic: they overlap).
template <class T>
__global__ void resizeGradElements(const T* dy, T* dx, int64_t n, ResizeGeometry g) {
  CLEAVE_GRID_LOOP(i, n) {
    forEachResizeSource(g, i, [&](int64_t offset, double weight) { atomicAdd(dx + offset, static_cast<T>(weight) * dy[i]); });
  }
}

Status resizeKernel(const KernelCall& call, CudaContext& context) {
  const ResizeGeometry g = resizeGeometry(call.op, call.op.operands[0].shape, call.op.results[0].shape);
  const int64_t n = call.op.results[0].numel();
  if (n == 0) return Status::ok();
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) {
    resizeElements<T><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(call.in<T>(0), call.out<T>(0), n, g);
    return launchStatus(call);
  });
}

Status resizeGradKernel(const KernelCall& call, CudaContext& context) {
  const ResizeGeometry g = resizeGeometry(call.op, call.op.results[0].shape, call.op.operands[0].shape);
  const int64_t n = call.op.operands[0].numel();
  CLEAVE_TRY(zeroBytes(call, context, call.outputs[0], call.op.results[0].bytes()));
  if (n == 0) return Status::ok();
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) {
    resizeGradElements<T><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(call.in<T>(0), call.out<T>(0), n, g);
    return launchStatus(call);
  });
}

}  // namespace

void registerConvolutionKernels(CudaKernelTable& table) {
  table[static_cast<int>(OpId::resize)] = resizeKernel;
  table[static_cast<int>(OpId::resize_grad)] = resizeGradKernel;
  table[static_cast<int>(OpId::conv2d)] = conv2dKernel;
  table[static_cast<int>(OpId::fused_conv2d)] = fusedConv2dKernel;
  table[static_cast<int>(OpId::conv2d_grad_input)] = conv2dGradInputKernel;
  table[static_cast<int>(OpId::conv2d_grad_weight)] = conv2dGradWeightKernel;
}

}  // namespace cleave::runtime::cuda
