// CPU kernels of the pools over NCHW images (max_pool2d also NHWC) and their gradients: max_pool2d, avg_pool2d,
// global_avg_pool, max_pool2d_grad, avg_pool2d_grad (PyTorch's window and divisor rules).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ir/ops/image_layout.h"
#include "runtime/cpu/cpu_kernel_support.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_vector_math.h"

namespace cleave::runtime::cpu {
namespace {

// The windows of one spatial dim, per output index: input range [first, last) clipped to the
// image, and the window's length inside the padded image. As PyTorch, a window may reach into the
// padding on either side and, with ceil_mode, past the end padding (where it is cut off).
struct DimWindows {
  std::vector<int64_t> first, last, padded_length;
};

DimWindows dimWindows(int64_t outputs, int64_t stride, int64_t pad_begin, int64_t pad_end, int64_t kernel,
                      int64_t size) {
  DimWindows d;
  for (int64_t o = 0; o < outputs; ++o) {
    const int64_t start = o * stride - pad_begin;
    const int64_t end = std::min(start + kernel, size + pad_end);
    d.first.push_back(std::max<int64_t>(start, 0));
    d.last.push_back(std::max(std::min(end, size), d.first.back()));
    d.padded_length.push_back(end - start);
  }
  return d;
}

// Both dims' windows of a pool.
struct PoolWindows {
  Window2d window;
  DimWindows rows, columns;
  int64_t planes = 0;  // N·C
};

PoolWindows poolWindows(const KernelCall& call, const Shape& input, const Shape& output) {
  const std::vector<int64_t>& kernel = call.op.getInts("kernel");
  PoolWindows p;
  p.window = readWindow(call.op, input, output, kernel[0], kernel[1], true);
  const Window2d& w = p.window;
  p.rows = dimWindows(w.out_height, w.stride_h, w.pad_top, w.pad_bottom, w.kernel_h, w.height);
  p.columns = dimWindows(w.out_width, w.stride_w, w.pad_left, w.pad_right, w.kernel_w, w.width);
  p.planes = input[0] * input[1];
  return p;
}

// avg_pool2d's divisor for output (oh, ow): the window's size inside the padded image with
// count_include_pad, else inside the image.
int64_t avgDivisor(const PoolWindows& p, int64_t oh, int64_t ow, bool count_include_pad) {
  if (count_include_pad) return p.rows.padded_length[oh] * p.columns.padded_length[ow];
  return (p.rows.last[oh] - p.rows.first[oh]) * (p.columns.last[ow] - p.columns.first[ow]);
}

// Calls visit(oh, ow, argmax, max) for every output of one plane, argmax being the plane offset of
// the window's first maximum. A NaN counts as a maximum, so the last NaN wins (PyTorch's rule). An
// empty window (impossible for valid pads) reports its start and −inf.
template <class T, class Visit>
void forEachWindowMax(const PoolWindows& p, const T* plane, Visit&& visit) {
  const int64_t width = p.window.width;
  for (int64_t oh = 0; oh < p.window.out_height; ++oh) {
    const int64_t h_first = p.rows.first[oh], h_last = p.rows.last[oh];
    for (int64_t ow = 0; ow < p.window.out_width; ++ow) {
      const int64_t w_first = p.columns.first[ow], w_last = p.columns.last[ow];
      // Selects rather than branches (which element is largest is unpredictable): the first
      // strict maximum and the last NaN are tracked apart and combined at the end.
      int64_t best = h_first * width + w_first, last_nan = -1;
      T max = -std::numeric_limits<T>::infinity();
      for (int64_t ih = h_first; ih < h_last; ++ih) {
        const T* row = plane + ih * width;
        for (int64_t iw = w_first; iw < w_last; ++iw) {
          const T v = row[iw];
          best = v > max ? ih * width + iw : best;
          max = v > max ? v : max;
          last_nan = v != v ? ih * width + iw : last_nan;
        }
      }
      if (last_nan >= 0) visit(oh, ow, last_nan, plane[last_nan]);
      else visit(oh, ow, best, max);
    }
  }
}

// Windows of 2x2 with stride 2 inside the image (no padding, no dilation, none cut off): the
// common pool of CNNs, whose windows tile the image without overlapping. Its kernels below work on
// two input rows at a time with selects over the four elements (vectorised).
bool isTiledTwoByTwo(const PoolWindows& p) {
  const Window2d& w = p.window;
  return w.kernel_h == 2 && w.kernel_w == 2 && w.stride_h == 2 && w.stride_w == 2 && w.dilation_h == 1 &&
         w.dilation_w == 1 && w.pad_top == 0 && w.pad_left == 0 && w.pad_bottom == 0 && w.pad_right == 0 &&
         2 * w.out_height <= w.height && 2 * w.out_width <= w.width;
}

// The larger of m and v, or v when v is NaN: a NaN anywhere in a window makes its maximum NaN.
template <class T>
CLEAVE_INLINE T maxKeepingNaN(T m, T v) {
  return (v > m) | (v != v) ? v : m;
}

// max_pool2d over NHWC images: per output pixel, the maximum of the window's pixels, each a row of
// C channels (a loop over whole rows, vectorised).
template <class T>
void maxPoolChannelsLast(const KernelCall& call, const PoolWindows& p) {
  const Window2d& w = p.window;
  const int64_t channels = call.op.operands[0].shape[3];
  const T* x = call.in<T>(0);
  T* y = call.out<T>(0);
  parallelFor(w.batch * w.out_height, threadCount(call), w.out_width * channels * w.kernel_h * w.kernel_w,
              [&](int64_t begin, int64_t end) {
    withWidestVectors([&] {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t n = row / w.out_height, oh = row % w.out_height;
        for (int64_t ow = 0; ow < w.out_width; ++ow) {
          T* out = y + (row * w.out_width + ow) * channels;
          std::fill_n(out, channels, -std::numeric_limits<T>::infinity());
          for (int64_t ih = p.rows.first[oh]; ih < p.rows.last[oh]; ++ih)
            for (int64_t iw = p.columns.first[ow]; iw < p.columns.last[ow]; ++iw) {
              const T* in = x + ((n * w.height + ih) * w.width + iw) * channels;
              for (int64_t c = 0; c < channels; ++c) out[c] = maxKeepingNaN(out[c], in[c]);
            }
        }
      }
    });
  });
}

Status maxPoolKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const bool channels_last = isChannelsLast(call.op);
    const PoolWindows p = poolWindows(call, asNchw(call.op.operands[0].shape, channels_last),
                                      asNchw(call.op.results[0].shape, channels_last));
    if (channels_last) {
      maxPoolChannelsLast<T>(call, p);
      return Status::ok();
    }
    const Window2d& w = p.window;
    const int64_t in_plane = w.height * w.width, out_plane = w.out_height * w.out_width;
    const T* x = call.in<T>(0);
    T* y = call.out<T>(0);
    if (isTiledTwoByTwo(p)) {
      parallelFor(p.planes, threadCount(call), out_plane * 4, [&](int64_t begin, int64_t end) {
        const int64_t width = w.width, out_width = w.out_width;
        for (int64_t plane = begin; plane < end; ++plane)
          for (int64_t oh = 0; oh < w.out_height; ++oh) {
            const T* top = x + plane * in_plane + 2 * oh * width;
            const T* bottom = top + width;
            T* out = y + plane * out_plane + oh * out_width;
            for (int64_t ow = 0; ow < out_width; ++ow)
              out[ow] = maxKeepingNaN(maxKeepingNaN(maxKeepingNaN(top[2 * ow], top[2 * ow + 1]), bottom[2 * ow]),
                                      bottom[2 * ow + 1]);
          }
      });
      return Status::ok();
    }
    // Per output row: the maximum over the window's rows for every input column (a loop over whole
    // rows, vectorised), then over each window's columns, from a row padded with -inf on both sides
    // so that every window is kernel_w columns from ow · stride_w (no per-window bounds: vectorised
    // too). Only the value is wanted here (the gradient finds the argmax itself), so a NaN anywhere
    // in a window makes its maximum NaN.
    const int64_t padded_width = std::max((w.out_width - 1) * w.stride_w + w.kernel_w, w.pad_left + w.width);
    parallelFor(p.planes, threadCount(call), out_plane * w.kernel_h * w.kernel_w, [&](int64_t begin, int64_t end) {
      thread_local std::vector<T> column_max;
      column_max.assign(static_cast<size_t>(padded_width), -std::numeric_limits<T>::infinity());
      withWidestVectors([&] {
        T* padded = column_max.data();
        T* columns = padded + w.pad_left;
        const int64_t width = w.width, out_width = w.out_width, stride = w.stride_w, kernel = w.kernel_w;
        for (int64_t plane = begin; plane < end; ++plane) {
          const T* in = x + plane * in_plane;
          T* out = y + plane * out_plane;
          for (int64_t oh = 0; oh < w.out_height; ++oh) {
            std::fill_n(columns, width, -std::numeric_limits<T>::infinity());
            for (int64_t ih = p.rows.first[oh]; ih < p.rows.last[oh]; ++ih) {
              const T* row = in + ih * width;
              for (int64_t iw = 0; iw < width; ++iw) columns[iw] = maxKeepingNaN(columns[iw], row[iw]);
            }
            T* out_row = out + oh * out_width;
            for (int64_t ow = 0; ow < out_width; ++ow) out_row[ow] = padded[ow * stride];
            for (int64_t j = 1; j < kernel; ++j)
              for (int64_t ow = 0; ow < out_width; ++ow)
                out_row[ow] = maxKeepingNaN(out_row[ow], padded[ow * stride + j]);
          }
        }
      });
    });
    return Status::ok();
  });
}

Status avgPoolKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const PoolWindows p = poolWindows(call, call.op.operands[0].shape, call.op.results[0].shape);
    const Window2d& w = p.window;
    const bool count_include_pad = call.op.getInt("count_include_pad") != 0;
    const int64_t in_plane = w.height * w.width, out_plane = w.out_height * w.out_width;
    const T* x = call.in<T>(0);
    T* y = call.out<T>(0);
    parallelFor(p.planes, threadCount(call), out_plane * w.kernel_h * w.kernel_w, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* in = x + plane * in_plane;
        T* out = y + plane * out_plane;
        for (int64_t oh = 0; oh < w.out_height; ++oh)
          for (int64_t ow = 0; ow < w.out_width; ++ow) {
            double sum = 0;
            for (int64_t ih = p.rows.first[oh]; ih < p.rows.last[oh]; ++ih)
              for (int64_t iw = p.columns.first[ow]; iw < p.columns.last[ow]; ++iw)
                sum += static_cast<double>(in[ih * w.width + iw]);
            const int64_t divisor = avgDivisor(p, oh, ow, count_include_pad);
            out[oh * w.out_width + ow] = divisor > 0 ? static_cast<T>(sum / static_cast<double>(divisor)) : T{0};
          }
      }
    });
    return Status::ok();
  });
}

Status globalAvgPoolKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const Shape& shape = call.op.operands[0].shape;
    const int64_t planes = shape[0] * shape[1], plane_size = shape[2] * shape[3];
    const T* x = call.in<T>(0);
    T* y = call.out<T>(0);
    parallelFor(planes, threadCount(call), plane_size, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* in = x + plane * plane_size;
        y[plane] = static_cast<T>(sumOf(plane_size, [in](int64_t i) { return in[i]; }) / static_cast<double>(plane_size));
      }
    });
    return Status::ok();
  });
}

// dx: each window's dy goes to the window's first maximum (recomputed from x).
Status maxPoolGradKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const PoolWindows p = poolWindows(call, call.op.operands[1].shape, call.op.operands[0].shape);
    const Window2d& w = p.window;
    const int64_t in_plane = w.height * w.width, out_plane = w.out_height * w.out_width;
    const T* dy = call.in<T>(0);
    const T* x = call.in<T>(1);
    T* dx = call.out<T>(0);
    if (isTiledTwoByTwo(p)) {
      // Each input element is in one window at most: written once, with dy where it is the window's
      // first maximum (the last NaN when there is one, as forEachWindowMax), else 0.
      parallelFor(p.planes, threadCount(call), out_plane * 8, [&](int64_t begin, int64_t end) {
        const int64_t width = w.width, out_width = w.out_width;
        for (int64_t plane = begin; plane < end; ++plane) {
          T* out = dx + plane * in_plane;
          if (2 * w.out_height < w.height || 2 * out_width < width) std::fill_n(out, in_plane, T{0});
          for (int64_t oh = 0; oh < w.out_height; ++oh) {
            const T* top = x + plane * in_plane + 2 * oh * width;
            const T* bottom = top + width;
            const T* grad = dy + plane * out_plane + oh * out_width;
            T* top_out = out + 2 * oh * width;
            T* bottom_out = top_out + width;
            for (int64_t ow = 0; ow < out_width; ++ow) {
              const T a = top[2 * ow], b = top[2 * ow + 1], c = bottom[2 * ow], d = bottom[2 * ow + 1];
              // The winner as masks, without branches: with a NaN the last NaN, else the first
              // element equal to the window's maximum (row-major window order).
              const bool nan_a = a != a, nan_b = b != b, nan_c = c != c, nan_d = d != d;
              const bool any_nan = nan_a | nan_b | nan_c | nan_d;
              const T ab = a > b ? a : b, cd = c > d ? c : d, m = ab > cd ? ab : cd;
              const bool is_a = a == m, is_b = b == m, is_c = c == m;
              const bool wins_a = any_nan ? nan_a & !nan_b & !nan_c & !nan_d : is_a;
              const bool wins_b = any_nan ? nan_b & !nan_c & !nan_d : is_b & !is_a;
              const bool wins_c = any_nan ? nan_c & !nan_d : is_c & !is_a & !is_b;
              const bool wins_d = any_nan ? nan_d : !is_a & !is_b & !is_c;
              const T g = grad[ow];
              top_out[2 * ow] = wins_a ? g : T{0};
              top_out[2 * ow + 1] = wins_b ? g : T{0};
              bottom_out[2 * ow] = wins_c ? g : T{0};
              bottom_out[2 * ow + 1] = wins_d ? g : T{0};
            }
          }
        }
      });
      return Status::ok();
    }
    parallelFor(p.planes, threadCount(call), out_plane * w.kernel_h * w.kernel_w, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* grad = dy + plane * out_plane;
        T* out = dx + plane * in_plane;
        std::fill_n(out, in_plane, T{0});
        forEachWindowMax<T>(p, x + plane * in_plane, [&](int64_t oh, int64_t ow, int64_t argmax, T) {
          if (p.rows.first[oh] < p.rows.last[oh] && p.columns.first[ow] < p.columns.last[ow])
            out[argmax] += grad[oh * w.out_width + ow];
        });
      }
    });
    return Status::ok();
  });
}

// dx: each window's dy / divisor is added to every input element of the window.
Status avgPoolGradKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const PoolWindows p = poolWindows(call, call.op.results[0].shape, call.op.operands[0].shape);
    const Window2d& w = p.window;
    const bool count_include_pad = call.op.getInt("count_include_pad") != 0;
    const int64_t in_plane = w.height * w.width, out_plane = w.out_height * w.out_width;
    const T* dy = call.in<T>(0);
    T* dx = call.out<T>(0);
    parallelFor(p.planes, threadCount(call), out_plane * w.kernel_h * w.kernel_w, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* grad = dy + plane * out_plane;
        T* out = dx + plane * in_plane;
        std::fill_n(out, in_plane, T{0});
        for (int64_t oh = 0; oh < w.out_height; ++oh)
          for (int64_t ow = 0; ow < w.out_width; ++ow) {
            const int64_t divisor = avgDivisor(p, oh, ow, count_include_pad);
            if (divisor <= 0) continue;
            const T share = grad[oh * w.out_width + ow] / static_cast<T>(divisor);
            for (int64_t ih = p.rows.first[oh]; ih < p.rows.last[oh]; ++ih)
              for (int64_t iw = p.columns.first[ow]; iw < p.columns.last[ow]; ++iw) out[ih * w.width + iw] += share;
          }
      }
    });
    return Status::ok();
  });
}

}  // namespace

void registerPoolingKernels(CpuKernelTable& table) {
  table[static_cast<int>(OpId::max_pool2d)] = maxPoolKernel;
  table[static_cast<int>(OpId::avg_pool2d)] = avgPoolKernel;
  table[static_cast<int>(OpId::global_avg_pool)] = globalAvgPoolKernel;
  table[static_cast<int>(OpId::max_pool2d_grad)] = maxPoolGradKernel;
  table[static_cast<int>(OpId::avg_pool2d_grad)] = avgPoolGradKernel;
}

}  // namespace cleave::runtime::cpu
