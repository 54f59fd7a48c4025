// CPU kernels of conv2d, fused_conv2d and conv2d's gradients (conv2d_grad_input, conv2d_grad_weight): f32 through
// oneDNN (onednn_convolution.h); otherwise im2col + GEMM through OpenBLAS, one (image, group) per
// work item so that each thread's column matrix stays in its cache, and direct loops for depthwise
// convolutions.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "ir/ops/image_layout.h"
#include "ir/ops/resize_coordinates.h"
#include "runtime/cpu/cpu_gemm.h"
#include "runtime/cpu/cpu_kernel_support.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/onednn_convolution.h"
#include "runtime/device/channels_first_call.h"

namespace cleave::runtime::cpu {
namespace {

// conv2d_grad_weight sums over images in this many fixed groups of images (fewer for small
// batches), one partial sum each, added in order, so threads can share the work.
constexpr int64_t kWeightGradientParts = 16;

// A convolution's shapes: x [N,C,H,W], w [O,C/groups,kh,kw], y [N,O,Ho,Wo].
struct ConvProblem {
  Window2d window;
  int64_t channels = 0, out_channels = 0, groups = 1;
  int64_t group_channels = 0;      // C / groups: input channels each output channel reads
  int64_t group_out_channels = 0;  // O / groups
  int64_t patch = 0;               // C/groups · kh · kw: one column of the column matrix
  int64_t in_plane = 0;            // H · W
  int64_t out_plane = 0;           // Ho · Wo

  // im2col is the identity for 1x1 kernels with stride 1 and no padding: x's planes are the columns.
  bool isPointwise() const {
    const Window2d& w = window;
    return w.kernel_h == 1 && w.kernel_w == 1 && w.stride_h == 1 && w.stride_w == 1 && w.pad_top == 0 &&
           w.pad_left == 0 && w.pad_bottom == 0 && w.pad_right == 0;
  }
  // Stride 1 and an output as wide as the input ("same" padding): a column-matrix row is the input
  // plane shifted, so im2col and col2im move whole planes instead of one output row at a time.
  bool keepsWidth() const {
    return window.stride_h == 1 && window.stride_w == 1 && window.out_width == window.width;
  }
  // Each output channel reads one input channel and each group has few output channels (depthwise
  // convolutions): direct loops beat GEMMs with m < 8 and k = kh·kw. (A single-channel input with
  // many output channels, as a first layer, is faster as a GEMM.)
  bool isChannelwise() const { return group_channels == 1 && group_out_channels < 8; }
};

ConvProblem makeProblem(const OpContext& op, const Shape& x, const Shape& w, const Shape& y) {
  ConvProblem p;
  p.window = readWindow(op, x, y, w[2], w[3], false);
  p.channels = x[1];
  p.out_channels = w[0];
  p.groups = op.getInt("groups");
  p.group_channels = w[1];
  p.group_out_channels = w[0] / p.groups;
  p.patch = w[1] * w[2] * w[3];
  p.in_plane = x[2] * x[3];
  p.out_plane = y[2] * y[3];
  return p;
}

// The outputs [first, last) of a window dim whose input index out·stride + offset is in [0, size).
std::pair<int64_t, int64_t> validOutputs(int64_t offset, int64_t stride, int64_t size, int64_t out_size) {
  const int64_t first = std::min(out_size, offset >= 0 ? int64_t{0} : (-offset + stride - 1) / stride);
  const int64_t last = size - 1 - offset < 0 ? int64_t{0} : (size - 1 - offset) / stride + 1;
  return {first, std::clamp(last, first, out_size)};
}

// ---- im2col and col2im for one image and group ----

// For keepsWidth() problems, element e of a column-matrix row reads element e + shift of the input
// plane. Output rows [rows_first, rows_last) read rows inside the image, and their elements
// [first, last) move as one block without reading outside the plane; in that block the |w_offset|
// elements at one end of each row read across a row boundary instead of from the padding, and
// must be zeroed (zeroRowEnds).
struct ShiftedRows {
  int64_t rows_first, rows_last, first, last, shift;
};

ShiftedRows shiftedRows(const ConvProblem& p, int64_t h_offset, int64_t w_offset) {
  const Window2d& w = p.window;
  const auto [rows_first, rows_last] = validOutputs(h_offset, 1, w.height, w.out_height);
  const int64_t shift = h_offset * w.width + w_offset;
  // Stay inside the plane: skip the leading (or trailing) |w_offset| elements, which are zeroed anyway.
  // When no row reads the image (a 1x1 image under a padded 3x3 kernel), first stops at the plane's end.
  const int64_t out_plane = w.out_height * w.out_width;
  const int64_t first = std::min(out_plane, rows_first * w.width + std::max<int64_t>(0, -w_offset));
  const int64_t last = rows_last * w.width - std::max<int64_t>(0, w_offset);
  return {rows_first, rows_last, first, std::max(first, last), shift};
}

// Zeroes, in output rows [rows_first, rows_last) of a column-matrix row, the elements that read
// outside the image: the first −w_offset or the last w_offset of each row.
template <class T>
void zeroRowEnds(const ConvProblem& p, const ShiftedRows& rows, int64_t w_offset, T* out) {
  const int64_t width = p.window.width;
  const int64_t left = std::min(width, std::max<int64_t>(0, -w_offset));
  const int64_t right = std::min(width, std::max<int64_t>(0, w_offset));
  for (int64_t oh = rows.rows_first; oh < rows.rows_last; ++oh) {
    T* row = out + oh * width;
    for (int64_t ow = 0; ow < left; ++ow) row[ow] = T{0};
    for (int64_t ow = width - right; ow < width; ++ow) row[ow] = T{0};
  }
}

// col[(c·kh + i)·kw + j][oh·Wo + ow] = image[g·Cg + c, oh·sh − pt + i·dh, ow·sw − pl + j·dw], zero
// outside the image; `image` points at one image [C,H,W].
template <class T>
void im2col(const ConvProblem& p, const T* image, int64_t group, T* col, int threads) {
  const Window2d& w = p.window;
  parallelFor(p.patch, threads, p.out_plane, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t c = row / (w.kernel_h * w.kernel_w);
      const int64_t i = row / w.kernel_w % w.kernel_h, j = row % w.kernel_w;
      const T* plane = image + (group * p.group_channels + c) * p.in_plane;
      T* out = col + row * p.out_plane;
      const int64_t h_offset = i * w.dilation_h - w.pad_top, w_offset = j * w.dilation_w - w.pad_left;
      if (p.keepsWidth()) {
        const ShiftedRows rows = shiftedRows(p, h_offset, w_offset);
        std::fill(out, out + rows.first, T{0});
        std::copy(plane + rows.first + rows.shift, plane + rows.last + rows.shift, out + rows.first);
        std::fill(out + rows.last, out + p.out_plane, T{0});
        zeroRowEnds(p, rows, w_offset, out);
        continue;
      }
      const auto [ow_first, ow_last] = validOutputs(w_offset, w.stride_w, w.width, w.out_width);
      for (int64_t oh = 0; oh < w.out_height; ++oh, out += w.out_width) {
        const int64_t ih = oh * w.stride_h + h_offset;
        if (ih < 0 || ih >= w.height) {
          for (int64_t ow = 0; ow < w.out_width; ++ow) out[ow] = T{0};
          continue;
        }
        const T* in = plane + ih * w.width + w_offset;
        for (int64_t ow = 0; ow < ow_first; ++ow) out[ow] = T{0};
        if (w.stride_w == 1) {
          for (int64_t ow = ow_first; ow < ow_last; ++ow) out[ow] = in[ow];
        } else {
          for (int64_t ow = ow_first; ow < ow_last; ++ow) out[ow] = in[ow * w.stride_w];
        }
        for (int64_t ow = ow_last; ow < w.out_width; ++ow) out[ow] = T{0};
      }
    }
  });
}

// The adjoint of im2col: adds each column-matrix entry to the image element it was read from
// (`col` is scratch: the keepsWidth() path zeroes its entries that read outside the image). Threads
// own whole channel planes, so the additions never race.
template <class T>
void col2im(const ConvProblem& p, T* col, int64_t group, T* image_grad, int threads) {
  const Window2d& w = p.window;
  const int64_t taps = w.kernel_h * w.kernel_w;
  parallelFor(p.group_channels, threads, taps * p.out_plane, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      T* plane = image_grad + (group * p.group_channels + c) * p.in_plane;
      for (int64_t tap = 0; tap < taps; ++tap) {
        const int64_t i = tap / w.kernel_w, j = tap % w.kernel_w;
        T* in = col + (c * taps + tap) * p.out_plane;
        const int64_t h_offset = i * w.dilation_h - w.pad_top, w_offset = j * w.dilation_w - w.pad_left;
        if (p.keepsWidth()) {
          const ShiftedRows rows = shiftedRows(p, h_offset, w_offset);
          zeroRowEnds(p, rows, w_offset, in);  // then the shifted addition adds nothing for them
          T* to = plane + rows.shift;
          for (int64_t e = rows.first; e < rows.last; ++e) to[e] += in[e];
          continue;
        }
        const auto [ow_first, ow_last] = validOutputs(w_offset, w.stride_w, w.width, w.out_width);
        for (int64_t oh = 0; oh < w.out_height; ++oh, in += w.out_width) {
          const int64_t ih = oh * w.stride_h + h_offset;
          if (ih < 0 || ih >= w.height) continue;
          T* out = plane + ih * w.width + w_offset;
          if (w.stride_w == 1) {
            for (int64_t ow = ow_first; ow < ow_last; ++ow) out[ow] += in[ow];
          } else {
            for (int64_t ow = ow_first; ow < ow_last; ++ow) out[ow * w.stride_w] += in[ow];
          }
        }
      }
    }
  });
}

// Runs item(index, col, threads) for index in [0, items): with an item per thread at least, threads
// take whole items (and each item runs single-threaded); otherwise the items run one after another,
// each using every thread. `col` is a column matrix of the running thread's scratch memory (null
// when the problem is pointwise). False when scratch memory could not be allocated.
template <class T, class Item>
bool forEachItem(const ConvProblem& p, int64_t items, int64_t multiply_adds_per_item, int threads, Item&& item) {
  std::atomic<bool> allocated{true};
  auto run = [&](int64_t first, int64_t last, int item_threads) {
    T* col = p.isPointwise() ? nullptr : scratch<T>(0, p.patch * p.out_plane);
    if (!p.isPointwise() && !col) {
      allocated = false;
      return;
    }
    for (int64_t i = first; i < last; ++i) item(i, col, item_threads);
  };
  if (items >= threads)
    parallelFor(items, threads, multiply_adds_per_item * kMinParallelWork / kMinGemmWorkPerThread,
                [&](int64_t first, int64_t last) { run(first, last, 1); });
  else
    run(0, items, threads);
  return allocated.load();
}

// c = op(a)·op(b) + beta·c for one item, on `threads` threads.
template <class T>
void itemGemm(int threads, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const T* a,
              int64_t lda, const T* b, int64_t ldb, double beta, T* c, int64_t ldc) {
  parallelGemm<T>(transpose_a, transpose_b, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc, threads);
}

Status scratchFailure(const KernelCall& call, const ConvProblem& p, int64_t element_size) {
  return scratchAllocationFailure(call, p.patch * p.out_plane * element_size);
}

// ---- Direct loops for channel-wise convolutions (one input channel per output channel) ----

// y[n, oc] (+)= Σ_{i,j} w[oc, 0, i, j] · x[n, oc / (O/groups)] shifted: one output plane.
template <class T>
void channelwisePlane(const ConvProblem& p, const T* in_plane, const T* weights, T* out_plane) {
  const Window2d& w = p.window;
  for (int64_t i = 0; i < w.kernel_h; ++i) {
    const int64_t h_offset = i * w.dilation_h - w.pad_top;
    const auto [oh_first, oh_last] = validOutputs(h_offset, w.stride_h, w.height, w.out_height);
    for (int64_t j = 0; j < w.kernel_w; ++j) {
      const T weight = weights[i * w.kernel_w + j];
      const int64_t w_offset = j * w.dilation_w - w.pad_left;
      const auto [ow_first, ow_last] = validOutputs(w_offset, w.stride_w, w.width, w.out_width);
      for (int64_t oh = oh_first; oh < oh_last; ++oh) {
        const T* in = in_plane + (oh * w.stride_h + h_offset) * w.width + w_offset;
        T* out = out_plane + oh * w.out_width;
        if (w.stride_w == 1) {
          for (int64_t ow = ow_first; ow < ow_last; ++ow) out[ow] += weight * in[ow];
        } else {
          for (int64_t ow = ow_first; ow < ow_last; ++ow) out[ow] += weight * in[ow * w.stride_w];
        }
      }
    }
  }
}

template <class T>
void channelwiseForward(const ConvProblem& p, const T* x, const T* weights, const T* bias, T* y, int threads) {
  const int64_t taps = p.window.kernel_h * p.window.kernel_w;
  parallelFor(p.window.batch * p.out_channels, threads, taps * p.out_plane, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t n = item / p.out_channels, oc = item % p.out_channels;
      const int64_t ic = oc / p.group_out_channels * p.group_channels;
      T* out = y + item * p.out_plane;
      std::fill_n(out, p.out_plane, bias ? bias[oc] : T{0});
      channelwisePlane(p, x + (n * p.channels + ic) * p.in_plane, weights + oc * taps, out);
    }
  });
}

// dx[n, ic] = Σ over the output channels reading ic of the transposed window sums; one plane per item.
template <class T>
void channelwiseGradInput(const ConvProblem& p, const T* dy, const T* weights, T* dx, int threads) {
  const Window2d& w = p.window;
  const int64_t taps = w.kernel_h * w.kernel_w;
  parallelFor(w.batch * p.channels, threads, p.group_out_channels * taps * p.out_plane, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t n = item / p.channels, ic = item % p.channels;
      T* plane = dx + item * p.in_plane;
      std::fill_n(plane, p.in_plane, T{0});
      for (int64_t o = 0; o < p.group_out_channels; ++o) {
        const int64_t oc = ic / p.group_channels * p.group_out_channels + o;
        const T* grad = dy + (n * p.out_channels + oc) * p.out_plane;
        for (int64_t tap = 0; tap < taps; ++tap) {
          const int64_t i = tap / w.kernel_w, j = tap % w.kernel_w;
          const T weight = weights[oc * taps + tap];
          const int64_t h_offset = i * w.dilation_h - w.pad_top, w_offset = j * w.dilation_w - w.pad_left;
          const auto [oh_first, oh_last] = validOutputs(h_offset, w.stride_h, w.height, w.out_height);
          const auto [ow_first, ow_last] = validOutputs(w_offset, w.stride_w, w.width, w.out_width);
          for (int64_t oh = oh_first; oh < oh_last; ++oh) {
            T* out = plane + (oh * w.stride_h + h_offset) * w.width + w_offset;
            const T* g = grad + oh * w.out_width;
            if (w.stride_w == 1) {
              for (int64_t ow = ow_first; ow < ow_last; ++ow) out[ow] += weight * g[ow];
            } else {
              for (int64_t ow = ow_first; ow < ow_last; ++ow) out[ow * w.stride_w] += weight * g[ow];
            }
          }
        }
      }
    }
  });
}

// dw[oc, 0, i, j] = Σ_n Σ_{oh,ow} dy[n, oc, oh, ow] · x[n, ic, ih, iw]; one output channel per item.
template <class T>
void channelwiseGradWeight(const ConvProblem& p, const T* dy, const T* x, T* dw, int threads) {
  const Window2d& w = p.window;
  const int64_t taps = w.kernel_h * w.kernel_w;
  parallelFor(p.out_channels, threads, w.batch * taps * p.out_plane, [&](int64_t begin, int64_t end) {
    for (int64_t oc = begin; oc < end; ++oc) {
      const int64_t ic = oc / p.group_out_channels * p.group_channels;
      for (int64_t tap = 0; tap < taps; ++tap) {
        const int64_t i = tap / w.kernel_w, j = tap % w.kernel_w;
        const int64_t h_offset = i * w.dilation_h - w.pad_top, w_offset = j * w.dilation_w - w.pad_left;
        const auto [oh_first, oh_last] = validOutputs(h_offset, w.stride_h, w.height, w.out_height);
        const auto [ow_first, ow_last] = validOutputs(w_offset, w.stride_w, w.width, w.out_width);
        double sum = 0;
        for (int64_t n = 0; n < w.batch; ++n) {
          const T* grad = dy + (n * p.out_channels + oc) * p.out_plane;
          const T* in_plane = x + (n * p.channels + ic) * p.in_plane;
          for (int64_t oh = oh_first; oh < oh_last; ++oh) {
            const T* in = in_plane + (oh * w.stride_h + h_offset) * w.width + w_offset;
            const T* g = grad + oh * w.out_width + ow_first;
            const T* row = in + ow_first * w.stride_w;
            const int64_t stride = w.stride_w;
            sum += sumOf(ow_last - ow_first, [g, row, stride](int64_t i) {
              return static_cast<double>(g[i]) * static_cast<double>(row[i * stride]);
            });
          }
        }
        dw[oc * taps + tap] = static_cast<T>(sum);
      }
    }
  });
}

// ---- conv2d ----

template <class T>
Status conv2dTyped(const KernelCall& call) {
  const ConvProblem p = makeProblem(call.op, call.op.operands[0].shape, call.op.operands[1].shape,
                                    call.op.results[0].shape);
  const T* x = call.in<T>(0);
  const T* weights = call.in<T>(1);
  const T* bias = call.op.operands.size() == 3 ? call.in<T>(2) : nullptr;
  T* y = call.out<T>(0);
  const int threads = threadCount(call);
  const int64_t og = p.group_out_channels;
  if (call.op.results[0].numel() == 0) return Status::ok();
  if (p.isChannelwise()) {
    channelwiseForward(p, x, weights, bias, y, threads);
    return Status::ok();
  }
  if (p.patch == 0) {  // no input channels: y is the bias alone
    parallelFor(p.window.batch * p.out_channels, threads, p.out_plane, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane)
        std::fill_n(y + plane * p.out_plane, p.out_plane, bias ? bias[plane % p.out_channels] : T{0});
    });
    return Status::ok();
  }
  if (!fitsBlas({p.patch, p.out_channels, p.out_plane, p.in_plane}))
    return Status::badInput("conv2d: a dim exceeds 2^31-1, beyond OpenBLAS's 32-bit interface");
  // Per (image n, group g): y[n, g's channels] = w_g [O/g, patch] · columns [patch, Ho·Wo] (+ bias),
  // the columns being x[n, g's channels] itself for a pointwise convolution.
  const bool ok = forEachItem<T>(p, p.window.batch * p.groups, og * p.patch * p.out_plane, gemmThreads(threads),
                                 [&](int64_t item, T* col, int item_threads) {
    const int64_t n = item / p.groups, g = item % p.groups;
    const T* image = x + n * p.channels * p.in_plane;
    const T* columns = image + g * p.group_channels * p.in_plane;
    if (col) {
      im2col(p, image, g, col, item_threads);
      columns = col;
    }
    T* out = y + (n * p.out_channels + g * og) * p.out_plane;
    itemGemm<T>(item_threads, false, false, og, p.out_plane, p.patch, weights + g * og * p.patch, p.patch, columns,
                p.out_plane, 0.0, out, p.out_plane);
    if (bias)
      for (int64_t o = 0; o < og; ++o) {
        const T b = bias[g * og + o];
        T* row = out + o * p.out_plane;
        for (int64_t i = 0; i < p.out_plane; ++i) row[i] += b;
      }
  });
  return ok ? Status::ok() : scratchFailure(call, p, sizeof(T));
}

// ---- conv2d_grad_input ----

template <class T>
Status conv2dGradInputTyped(const KernelCall& call) {
  const ConvProblem p = makeProblem(call.op, call.op.results[0].shape, call.op.operands[1].shape,
                                    call.op.operands[0].shape);
  const T* dy = call.in<T>(0);
  const T* weights = call.in<T>(1);
  T* dx = call.out<T>(0);
  const int threads = threadCount(call);
  const int64_t og = p.group_out_channels;
  if (call.op.results[0].numel() == 0) return Status::ok();
  if (call.op.operands[0].numel() == 0) {
    std::memset(dx, 0, static_cast<size_t>(call.op.results[0].bytes()));
    return Status::ok();
  }
  if (p.isChannelwise()) {
    channelwiseGradInput(p, dy, weights, dx, threads);
    return Status::ok();
  }
  if (!fitsBlas({p.patch, p.out_channels, p.out_plane, p.in_plane}))
    return Status::badInput("conv2d_grad_input: a dim exceeds 2^31-1, beyond OpenBLAS's 32-bit interface");
  // Per (image n, group g): columns = w_gᵀ [patch, O/g] · dy[n, g's channels] [O/g, Ho·Wo], then col2im
  // adds the columns into dx[n, g's channels] (a pointwise convolution's columns are dx itself).
  const bool ok = forEachItem<T>(p, p.window.batch * p.groups, og * p.patch * p.out_plane, gemmThreads(threads),
                                 [&](int64_t item, T* col, int item_threads) {
    const int64_t n = item / p.groups, g = item % p.groups;
    T* image_grad = dx + n * p.channels * p.in_plane;
    T* group_grad = image_grad + g * p.group_channels * p.in_plane;
    const T* grad = dy + (n * p.out_channels + g * og) * p.out_plane;
    if (!col) {
      itemGemm<T>(item_threads, true, false, p.patch, p.out_plane, og, weights + g * og * p.patch, p.patch, grad,
                  p.out_plane, 0.0, group_grad, p.in_plane);
      return;
    }
    itemGemm<T>(item_threads, true, false, p.patch, p.out_plane, og, weights + g * og * p.patch, p.patch, grad,
                p.out_plane, 0.0, col, p.out_plane);
    std::fill_n(group_grad, p.group_channels * p.in_plane, T{0});
    col2im(p, col, g, image_grad, item_threads);
  });
  return ok ? Status::ok() : scratchFailure(call, p, sizeof(T));
}

// ---- conv2d_grad_weight ----

template <class T>
Status conv2dGradWeightTyped(const KernelCall& call) {
  const ConvProblem p = makeProblem(call.op, call.op.operands[1].shape, call.op.results[0].shape,
                                    call.op.operands[0].shape);
  const T* dy = call.in<T>(0);
  const T* x = call.in<T>(1);
  T* dw = call.out<T>(0);
  const int threads = threadCount(call);
  const int64_t batch = p.window.batch, og = p.group_out_channels;
  const int64_t weights = call.op.results[0].numel();
  if (weights == 0) return Status::ok();
  if (batch == 0 || p.out_plane == 0) {
    std::memset(dw, 0, static_cast<size_t>(call.op.results[0].bytes()));
    return Status::ok();
  }
  if (p.isChannelwise()) {
    channelwiseGradWeight(p, dy, x, dw, threads);
    return Status::ok();
  }
  if (!fitsBlas({p.patch, p.out_channels, p.out_plane, p.in_plane}))
    return Status::badInput("conv2d_grad_weight: a dim exceeds 2^31-1, beyond OpenBLAS's 32-bit interface");
  // 1. Per part (a fixed range of images), partial dw_g = Σ_n dy[n, g's channels] [O/g, Ho·Wo] ·
  //    columns[n, g]ᵀ [Ho·Wo, patch]; part 0 accumulates in dw itself.
  const int64_t parts = std::min(batch, kWeightGradientParts);
  T* partials = parts > 1 ? scratch<T>(1, (parts - 1) * weights) : nullptr;
  if (parts > 1 && !partials) return scratchAllocationFailure(call, (parts - 1) * weights * static_cast<int64_t>(sizeof(T)));
  const int64_t images_per_part_work = (batch / parts) * p.groups * og * p.patch * p.out_plane;
  const bool ok = forEachItem<T>(p, parts, images_per_part_work, gemmThreads(threads),
                                 [&](int64_t part, T* col, int item_threads) {
    T* sum = part == 0 ? dw : partials + (part - 1) * weights;
    for (int64_t n = batch * part / parts; n < batch * (part + 1) / parts; ++n) {
      const bool first = n == batch * part / parts;
      for (int64_t g = 0; g < p.groups; ++g) {
        const T* image = x + n * p.channels * p.in_plane;
        const T* columns = image + g * p.group_channels * p.in_plane;
        if (col) {
          im2col(p, image, g, col, item_threads);
          columns = col;
        }
        itemGemm<T>(item_threads, false, true, og, p.patch, p.out_plane, dy + (n * p.out_channels + g * og) * p.out_plane,
                    p.out_plane, columns, p.out_plane, first ? 0.0 : 1.0, sum + g * og * p.patch, p.patch);
      }
    }
  });
  if (!ok) return scratchFailure(call, p, sizeof(T));
  // 2. dw += the other parts, in part order.
  parallelFor(weights, threads, parts, [&](int64_t begin, int64_t end) {
    for (int64_t part = 1; part < parts; ++part) {
      const T* partial = partials + (part - 1) * weights;
      for (int64_t i = begin; i < end; ++i) dw[i] += partial[i];
    }
  });
  return Status::ok();
}

// A conv2d with layout NHWC on the NCHW kernel `own`: x transposed into scratch, y out of it. The
// path of f64 and of shapes oneDNN has no implementation for (oneDNN reads NHWC itself).
Status channelsLastThroughNchw(const KernelCall& call, Status (*own)(const KernelCall&)) {
  const CpuKernel transpose = findCpuKernel(OpId::transpose);
  std::vector<std::byte> x(static_cast<size_t>(call.op.operands[0].bytes())), y(static_cast<size_t>(call.op.results[0].bytes()));
  const ChannelsFirstCall nchw(call, x.data(), y.data());
  CLEAVE_TRY(transpose(LayoutTransposeCall(call.op.operands[0], call.inputs[0], x.data(), false, call.threads).call()));
  CLEAVE_TRY(own(nchw.call()));
  return transpose(LayoutTransposeCall(nchw.result(), y.data(), call.outputs[0], true, call.threads).call());
}

// f32 convolutions run on oneDNN unless CLEAVE_CPU_CONVOLUTION=im2col or oneDNN has no
// implementation for the shapes; f64 and the rest on im2col + GEMM (and the depthwise loops).
template <Status (*kOwn)(const KernelCall&)>
Status convolutionKernel(const KernelCall& call) {
  if (call.op.operands[0].dtype == DType::kF32) {
    CLEAVE_ASSIGN_OR_RETURN(ConvolutionImplementation chosen, chosenConvolutionImplementation());
    if (chosen == ConvolutionImplementation::kOneDnn)
      if (std::optional<Status> done = runOneDnnConvolution(call)) return *done;
  }
  if (isChannelsLast(call.op)) return channelsLastThroughNchw(call, kOwn);
  return kOwn(call);
}

Status ownConv2d(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) { return conv2dTyped<T>(call); });
}
Status ownConv2dGradInput(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) { return conv2dGradInputTyped<T>(call); });
}
Status ownConv2dGradWeight(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) { return conv2dGradWeightTyped<T>(call); });
}
Status conv2dKernel(const KernelCall& call) { return convolutionKernel<ownConv2d>(call); }

// fused_conv2d: on oneDNN with post-ops where it has them; otherwise the conv2d (any of its paths),
// then y = relu(y + residual) in one more pass.
Status fusedConv2dKernel(const KernelCall& call) {
  if (call.op.operands[0].dtype == DType::kF32) {
    CLEAVE_ASSIGN_OR_RETURN(ConvolutionImplementation chosen, chosenConvolutionImplementation());
    if (chosen == ConvolutionImplementation::kOneDnn)
      if (std::optional<Status> done = runOneDnnConvolution(call)) return *done;
  }
  const KernelCall conv{OpContext{opDef(OpId::conv2d), call.op.operands.first(3), call.op.results, call.op.attrs},
                        call.inputs.first(3), call.outputs, call.threads, call.constant_operands & 7u,
                        call.constants_generation};
  CLEAVE_TRY(conv2dKernel(conv));
  const bool relu = call.op.getString("activation") == "relu";
  const bool residual = call.op.operands.size() == 4;
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    T* y = call.out<T>(0);
    const T* r = residual ? call.in<T>(3) : nullptr;
    parallelFor(call.op.results[0].numel(), threadCount(call), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        T v = r ? y[i] + r[i] : y[i];
        y[i] = relu && v < T{0} ? T{0} : v;
      }
    });
    return Status::ok();
  });
}
Status conv2dGradInputKernel(const KernelCall& call) { return convolutionKernel<ownConv2dGradInput>(call); }
Status conv2dGradWeightKernel(const KernelCall& call) { return convolutionKernel<ownConv2dGradWeight>(call); }

// ---- resize, resize_grad ----

// Each output element: the weighted sum of the inputs it reads (ir/ops/resize_coordinates.h).
Status resizeKernel(const KernelCall& call) {
  const ResizeGeometry g = resizeGeometry(call.op, call.op.operands[0].shape, call.op.results[0].shape);
  const int64_t n = call.op.results[0].numel();
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const T* x = call.in<T>(0);
    T* y = call.out<T>(0);
    parallelFor(n, threadCount(call), g.sampling.mode == ResizeMode::kCubic ? 64 : g.sampling.mode == ResizeMode::kLinear ? 16 : 4, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        double sum = 0;
        forEachResizeSource(g, i, [&](int64_t offset, double weight) { sum += weight * static_cast<double>(x[offset]); });
        y[i] = static_cast<T>(sum);
      }
    });
    return Status::ok();
  });
}

// dx = zeros; each dy element adds into the inputs resize read, with their weights (one thread:
// neighbouring outputs share inputs).
Status resizeGradKernel(const KernelCall& call) {
  const ResizeGeometry g = resizeGeometry(call.op, call.op.results[0].shape, call.op.operands[0].shape);
  const int64_t n = call.op.operands[0].numel();
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const T* dy = call.in<T>(0);
    T* dx = call.out<T>(0);
    std::memset(dx, 0, static_cast<size_t>(call.op.results[0].bytes()));
    for (int64_t i = 0; i < n; ++i)
      forEachResizeSource(g, i, [&](int64_t offset, double weight) { dx[offset] += static_cast<T>(weight) * dy[i]; });
    return Status::ok();
  });
}

}  // namespace

void registerConvolutionKernels(CpuKernelTable& table) {
  table[static_cast<int>(OpId::resize)] = resizeKernel;
  table[static_cast<int>(OpId::resize_grad)] = resizeGradKernel;
  table[static_cast<int>(OpId::conv2d)] = conv2dKernel;
  table[static_cast<int>(OpId::fused_conv2d)] = fusedConv2dKernel;
  table[static_cast<int>(OpId::conv2d_grad_input)] = conv2dGradInputKernel;
  table[static_cast<int>(OpId::conv2d_grad_weight)] = conv2dGradWeightKernel;
}

}  // namespace cleave::runtime::cpu
