// CPU kernels of the pools over NCHW images and their gradients: max_pool2d, avg_pool2d,
// global_avg_pool, max_pool2d_grad, avg_pool2d_grad (PyTorch's window and divisor rules).
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/cpu_kernel_support.h"
#include "runtime/cpu_kernels.h"

namespace cleave::runtime::cpu {
namespace {

// One pooling window clipped to the input: rows [h_first, h_last), columns [w_first, w_last), and
// the divisor avg_pool2d uses.
struct PoolWindow {
  int64_t h_first, h_last, w_first, w_last;
  int64_t divisor;
};

// The window of output (oh, ow). As PyTorch, a window may reach into the padding on either side
// and, with ceil_mode, past the end padding; count_include_pad counts the part inside the padded
// image, else only the part inside the image.
PoolWindow poolWindow(const Window2d& w, int64_t oh, int64_t ow, bool count_include_pad) {
  int64_t h_first = oh * w.stride_h - w.pad_top, w_first = ow * w.stride_w - w.pad_left;
  int64_t h_last = std::min(h_first + w.kernel_h, w.height + w.pad_bottom);
  int64_t w_last = std::min(w_first + w.kernel_w, w.width + w.pad_right);
  const int64_t padded_size = (h_last - h_first) * (w_last - w_first);
  h_first = std::max<int64_t>(h_first, 0);
  w_first = std::max<int64_t>(w_first, 0);
  h_last = std::min(h_last, w.height);
  w_last = std::min(w_last, w.width);
  const int64_t inside = std::max<int64_t>(0, h_last - h_first) * std::max<int64_t>(0, w_last - w_first);
  return {h_first, h_last, w_first, w_last, count_include_pad ? padded_size : inside};
}

Window2d poolGeometry(const KernelCall& call, const Shape& input, const Shape& output) {
  const std::vector<int64_t>& kernel = call.op.getInts("kernel");
  return readWindow(call.op, input, output, kernel[0], kernel[1], true);
}

// The offset in its plane of the window's first maximum; a NaN counts as a maximum (so the last
// NaN wins), as in PyTorch. Empty windows (impossible for valid pads) give the window's start.
template <class T>
int64_t windowArgmax(const T* plane, int64_t width, const PoolWindow& pw) {
  int64_t best = pw.h_first * width + pw.w_first;
  T max = -std::numeric_limits<T>::infinity();
  for (int64_t ih = pw.h_first; ih < pw.h_last; ++ih)
    for (int64_t iw = pw.w_first; iw < pw.w_last; ++iw) {
      const T v = plane[ih * width + iw];
      if (v > max || std::isnan(v)) {
        max = v;
        best = ih * width + iw;
      }
    }
  return best;
}

Status maxPoolKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const Window2d w = poolGeometry(call, call.op.operands[0].shape, call.op.results[0].shape);
    const int64_t planes = w.batch * call.op.operands[0].shape[1];
    const int64_t in_plane = w.height * w.width, out_plane = w.out_height * w.out_width;
    const T* x = call.in<T>(0);
    T* y = call.out<T>(0);
    parallelFor(planes, threadCount(call), out_plane * w.kernel_h * w.kernel_w, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* in = x + plane * in_plane;
        T* out = y + plane * out_plane;
        for (int64_t oh = 0; oh < w.out_height; ++oh)
          for (int64_t ow = 0; ow < w.out_width; ++ow) {
            const PoolWindow pw = poolWindow(w, oh, ow, false);
            T max = -std::numeric_limits<T>::infinity();
            for (int64_t ih = pw.h_first; ih < pw.h_last; ++ih)
              for (int64_t iw = pw.w_first; iw < pw.w_last; ++iw) {
                const T v = in[ih * w.width + iw];
                if (v > max || std::isnan(v)) max = v;
              }
            out[oh * w.out_width + ow] = max;
          }
      }
    });
    return Status::ok();
  });
}

Status avgPoolKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const Window2d w = poolGeometry(call, call.op.operands[0].shape, call.op.results[0].shape);
    const bool count_include_pad = call.op.getInt("count_include_pad") != 0;
    const int64_t planes = w.batch * call.op.operands[0].shape[1];
    const int64_t in_plane = w.height * w.width, out_plane = w.out_height * w.out_width;
    const T* x = call.in<T>(0);
    T* y = call.out<T>(0);
    parallelFor(planes, threadCount(call), out_plane * w.kernel_h * w.kernel_w, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* in = x + plane * in_plane;
        T* out = y + plane * out_plane;
        for (int64_t oh = 0; oh < w.out_height; ++oh)
          for (int64_t ow = 0; ow < w.out_width; ++ow) {
            const PoolWindow pw = poolWindow(w, oh, ow, count_include_pad);
            double sum = 0;
            for (int64_t ih = pw.h_first; ih < pw.h_last; ++ih)
              for (int64_t iw = pw.w_first; iw < pw.w_last; ++iw) sum += static_cast<double>(in[ih * w.width + iw]);
            out[oh * w.out_width + ow] = pw.divisor > 0 ? static_cast<T>(sum / static_cast<double>(pw.divisor)) : T{0};
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
        double sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < plane_size; ++i) sum += static_cast<double>(in[i]);
        y[plane] = static_cast<T>(sum / static_cast<double>(plane_size));
      }
    });
    return Status::ok();
  });
}

// dx: each window's dy goes to the window's first maximum (recomputed from x).
Status maxPoolGradKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const Window2d w = poolGeometry(call, call.op.operands[1].shape, call.op.operands[0].shape);
    const int64_t planes = w.batch * call.op.operands[1].shape[1];
    const int64_t in_plane = w.height * w.width, out_plane = w.out_height * w.out_width;
    const T* dy = call.in<T>(0);
    const T* x = call.in<T>(1);
    T* dx = call.out<T>(0);
    parallelFor(planes, threadCount(call), out_plane * w.kernel_h * w.kernel_w, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* in = x + plane * in_plane;
        const T* grad = dy + plane * out_plane;
        T* out = dx + plane * in_plane;
        std::fill_n(out, in_plane, T{0});
        for (int64_t oh = 0; oh < w.out_height; ++oh)
          for (int64_t ow = 0; ow < w.out_width; ++ow) {
            const PoolWindow pw = poolWindow(w, oh, ow, false);
            if (pw.h_first >= pw.h_last || pw.w_first >= pw.w_last) continue;
            out[windowArgmax(in, w.width, pw)] += grad[oh * w.out_width + ow];
          }
      }
    });
    return Status::ok();
  });
}

// dx: each window's dy / divisor is added to every input element of the window.
Status avgPoolGradKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const Window2d w = poolGeometry(call, call.op.results[0].shape, call.op.operands[0].shape);
    const bool count_include_pad = call.op.getInt("count_include_pad") != 0;
    const int64_t planes = w.batch * call.op.results[0].shape[1];
    const int64_t in_plane = w.height * w.width, out_plane = w.out_height * w.out_width;
    const T* dy = call.in<T>(0);
    T* dx = call.out<T>(0);
    parallelFor(planes, threadCount(call), out_plane * w.kernel_h * w.kernel_w, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* grad = dy + plane * out_plane;
        T* out = dx + plane * in_plane;
        std::fill_n(out, in_plane, T{0});
        for (int64_t oh = 0; oh < w.out_height; ++oh)
          for (int64_t ow = 0; ow < w.out_width; ++ow) {
            const PoolWindow pw = poolWindow(w, oh, ow, count_include_pad);
            if (pw.divisor <= 0) continue;
            const T share = grad[oh * w.out_width + ow] / static_cast<T>(pw.divisor);
            for (int64_t ih = pw.h_first; ih < pw.h_last; ++ih)
              for (int64_t iw = pw.w_first; iw < pw.w_last; ++iw) out[ih * w.width + iw] += share;
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
