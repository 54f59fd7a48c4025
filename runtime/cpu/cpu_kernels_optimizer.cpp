// CPU kernels of the optimizer ops, sgd_update and adamw_update: PyTorch's single-tensor
// (foreach=False) update rules, with the learning rate of the step's schedule (ir/lr_schedule.h), in its floating-point operation order, so that f32 results equal
// torch.optim's bit for bit (checked against PyTorch 1.13 on AVX2 hardware). Results may alias
// their operands (parameters and optimizer state are updated in place).
//
// PyTorch's `a.add_(b, alpha=s)` and `addcmul_` are fused multiply-adds in its vectorised CPU
// kernels, so the same steps use std::fma here and nothing else is fused (this file is compiled
// with -ffp-contract=off). The loops run built for AVX2 and FMA where the CPU has them
// (withWidestVectors); elsewhere std::fma is a slower library call with the same result.
#include <cmath>

#include "ir/lr_schedule.h"
#include "ir/ops/optimizer_ops.h"
#include "runtime/cpu/cpu_gemm.h"
#include "runtime/cpu/cpu_kernel_support.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_vector_math.h"
#include "runtime/cpu/onednn_matmul.h"

namespace cleave::runtime::cpu {
namespace {

// Work per element (for parallelFor).
constexpr int64_t kSgdWork = 4;
constexpr int64_t kAdamwWork = 16;

// The scalars of one sgd_update step, already rounded to T as PyTorch rounds its Python floats.
// Each element's operands are read before its results are written, so results may alias operands.
template <class T>
struct SgdStep {
  const T* w;
  const T* g;
  const T* buffer;  // null without momentum
  T* w_out;
  T* buffer_out;  // null without momentum
  bool first_step, has_momentum, has_weight_decay, nesterov;
  T weight_decay, momentum, one_minus_dampening, negative_lr;
  T grad_scale;  // 1 without a gradient scale operand (a product by 1 changes nothing)
};

// One element: g ·= grad_scale; d = g + wd·w; buf′ = d on the first step, else momentum·buf + (1 − dampening)·d;
// d = nesterov ? d + momentum·buf′ : buf′; returns w′ = w − lr·d (buffer becomes buf′).
template <class T>
CLEAVE_INLINE T sgdElement(const SgdStep<T>& s, T w, T g, T& buffer) {
  T d = g * s.grad_scale;  // the mul of an unfused gradient clipping
  if (s.has_weight_decay) d = std::fma(w, s.weight_decay, d);  // d_p.add(param, alpha=wd)
  if (s.has_momentum) {
    if (s.first_step) {
      buffer = d;  // torch.clone(d_p)
    } else {
      const T decayed = buffer * s.momentum;                 // buf.mul_(momentum)
      buffer = std::fma(d, s.one_minus_dampening, decayed);  // .add_(d_p, alpha=1 - dampening)
    }
    d = s.nesterov ? std::fma(buffer, s.momentum, d) : buffer;  // d_p.add(buf, alpha=momentum)
  }
  return std::fma(d, s.negative_lr, w);  // param.add_(d_p, alpha=-lr)
}

template <class T>
inline void sgdRange(const SgdStep<T>& step, int64_t begin, int64_t end) {
  const SgdStep<T> s = step;  // a local copy: stores to the results cannot change its scalars
  T unused = 0;
  if (s.w_out == s.w && s.buffer_out == s.buffer) {
    // In place (the usual case): one pointer per tensor, and a loop with and one without the
    // momentum buffer (a store to `buffer ? buffer[i] : unused` does not vectorise).
    T* w = s.w_out;
    T* buffer = s.buffer_out;
    const T* g = s.g;
    if (buffer)
      for (int64_t i = begin; i < end; ++i) w[i] = sgdElement(s, w[i], g[i], buffer[i]);
    else
      for (int64_t i = begin; i < end; ++i) w[i] = sgdElement(s, w[i], g[i], unused);
    return;
  }
  for (int64_t i = begin; i < end; ++i) {
    T b = s.buffer ? s.buffer[i] : T{0};
    s.w_out[i] = sgdElement(s, s.w[i], s.g[i], b);
    if (s.buffer_out) s.buffer_out[i] = b;
  }
}

// The scalars of one adamw_update step, rounded to T as PyTorch rounds its Python floats.
// Results may alias operands, as in SgdStep.
template <class T>
struct AdamwStep {
  const T* w;
  const T* g;
  const T* m;
  const T* v;
  T* w_out;
  T* m_out;
  T* v_out;
  T decay;                // 1 − lr·wd
  T beta1, one_minus_beta1, beta2, one_minus_beta2;
  T bias_correction2_sqrt;  // √(1 − β2ᵗ)
  T eps;
  T negative_step_size;  // −lr / (1 − β1ᵗ)
  T grad_scale;          // as SgdStep's
};

// One element: g ·= grad_scale; w ← w·(1 − lr·wd); m′ = β1·m + (1 − β1)·g; v′ = β2·v + (1 − β2)·g²;
// returns w′ = w + (−step_size·m′) / (√v′ / √(1 − β2ᵗ) + eps) (m and v become m′ and v′).
template <class T>
CLEAVE_INLINE T adamwElement(const AdamwStep<T>& s, T w, T g_unscaled, T& m, T& v) {
  const T g = g_unscaled * s.grad_scale;
  const T decayed = w * s.decay;                           // param.mul_(1 - lr * wd)
  m = std::fma(g, s.one_minus_beta1, m * s.beta1);         // exp_avg.mul_(β1).add_(g, alpha=1-β1)
  v = std::fma(s.one_minus_beta2 * g, g, v * s.beta2);     // exp_avg_sq.mul_(β2).addcmul_(g, g, 1-β2)
  const T denominator = std::sqrt(v) / s.bias_correction2_sqrt + s.eps;  // (sqrt / bc2_sqrt).add_(eps)
  return decayed + s.negative_step_size * m / denominator;  // param.addcdiv_(m, denom, value=-step_size)
}

template <class T>
inline void adamwRange(const AdamwStep<T>& step, int64_t begin, int64_t end) {
  const AdamwStep<T> s = step;  // a local copy: stores to the results cannot change its scalars
  if (s.w_out == s.w && s.m_out == s.m && s.v_out == s.v) {
    // In place (the usual case): one pointer per tensor keeps the loop vectorisable.
    T* w = s.w_out;
    T* m = s.m_out;
    T* v = s.v_out;
    const T* g = s.g;
    for (int64_t i = begin; i < end; ++i) w[i] = adamwElement(s, w[i], g[i], m[i], v[i]);
    return;
  }
  for (int64_t i = begin; i < end; ++i) {
    T m = s.m[i], v = s.v[i];
    const T w = adamwElement(s, s.w[i], s.g[i], m, v);
    s.m_out[i] = m;
    s.v_out[i] = v;
    s.w_out[i] = w;
  }
}

// Runs range(step, begin, end) over all elements.
template <class Step, class Range>
void runUpdate(const KernelCall& call, const Step& step, int64_t work_per_element, Range range) {
  parallelFor(call.op.operands[0].numel(), threadCount(call), work_per_element, [&](int64_t begin, int64_t end) {
    withWidestVectors([&] { range(step, begin, end); });
  });
}

// The gradient scale operand's value, or 1 (ir/ops/optimizer_ops.h).
template <class T>
T gradientScale(const KernelCall& call) {
  const int k = ops::gradientScaleOperand(call.op);
  return k < 0 ? T{1} : *call.in<T>(k);
}

// sgd_update(w, g, step, [buf], [grad_scale]) -> w′, [buf′].
Status sgdUpdateKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const double momentum = call.op.getFloat("momentum"), weight_decay = call.op.getFloat("weight_decay");
    const bool has_momentum = momentum != 0.0;
    SgdStep<T> s{};
    s.w = call.in<T>(0);
    s.g = call.in<T>(1);
    s.buffer = has_momentum ? call.in<T>(3) : nullptr;
    s.w_out = call.out<T>(0);
    s.buffer_out = has_momentum ? call.out<T>(1) : nullptr;
    const int64_t step = *call.in<int64_t>(2);
    s.first_step = step == 0;
    s.has_momentum = has_momentum;
    s.has_weight_decay = weight_decay != 0.0;
    s.nesterov = call.op.getInt("nesterov") != 0;
    s.weight_decay = static_cast<T>(weight_decay);
    s.momentum = static_cast<T>(momentum);
    s.one_minus_dampening = static_cast<T>(1.0 - call.op.getFloat("dampening"));
    s.negative_lr = static_cast<T>(-(call.op.getFloat("lr") * lrScheduleOf(call.op).factor(step)));
    s.grad_scale = gradientScale<T>(call);
    runUpdate(call, s, kSgdWork, [](const SgdStep<T>& step, int64_t begin, int64_t end) { sgdRange(step, begin, end); });
    return Status::ok();
  });
}

// adamw_update(w, g, m, v, step, [grad_scale]) -> w′, m′, v′; `step` counts the steps already taken.
Status adamwUpdateKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const int64_t step = *call.in<int64_t>(4);
    const double lr = call.op.getFloat("lr") * lrScheduleOf(call.op).factor(step);
    const double beta1 = call.op.getFloat("beta1"), beta2 = call.op.getFloat("beta2");
    const double t = static_cast<double>(step + 1);
    const double bias_correction1 = 1.0 - std::pow(beta1, t), bias_correction2 = 1.0 - std::pow(beta2, t);
    AdamwStep<T> s{};
    s.w = call.in<T>(0);
    s.g = call.in<T>(1);
    s.m = call.in<T>(2);
    s.v = call.in<T>(3);
    s.w_out = call.out<T>(0);
    s.m_out = call.out<T>(1);
    s.v_out = call.out<T>(2);
    s.decay = static_cast<T>(1.0 - lr * call.op.getFloat("weight_decay"));
    s.beta1 = static_cast<T>(beta1);
    s.one_minus_beta1 = static_cast<T>(1.0 - beta1);
    s.beta2 = static_cast<T>(beta2);
    s.one_minus_beta2 = static_cast<T>(1.0 - beta2);
    s.bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
    s.eps = static_cast<T>(call.op.getFloat("eps"));
    s.negative_step_size = static_cast<T>(-(lr / bias_correction1));
    s.grad_scale = gradientScale<T>(call);
    runUpdate(call, s, kAdamwWork,
              [](const AdamwStep<T>& step, int64_t begin, int64_t end) { adamwRange(step, begin, end); });
    return Status::ok();
  });
}

// sgd_matmul_update(w, a, b, step, [buf]) -> w′, [buf′]: sgd_update of the gradient g = op(a)·op(b),
// which is never written. Without momentum, one GEMM w′ = −lr·g + w. With momentum, the GEMM sums g
// into the buffer, buf′ = (1 − dampening)·g + momentum·buf (on the first step buf′ = g), and one pass
// makes w′ = w − lr·buf′ while buf′ is still in cache. f32 runs oneDNN's matmul with the scale and the
// sum as post-ops (what the unfused weight gradient runs), f64 OpenBLAS (which scales the buffer by
// beta first, as sgd_update's buf·momentum). Results may alias w and buf; otherwise they start as copies.
Status sgdMatmulUpdateKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const auto [m, n, k, lda, ldb, transpose_a, transpose_b] = ops::sgdMatmulGemm(call.op);
    if (!fitsBlas({m, n, k, lda, ldb}))
      return Status::badInput("sgd_matmul_update: a matrix dim exceeds 2^31-1, beyond OpenBLAS's 32-bit interface");
    const int threads = threadCount(call);
    const int64_t bytes = call.op.operands[0].bytes();
    const int64_t step = *call.in<int64_t>(3);
    const T negative_lr = static_cast<T>(-(call.op.getFloat("lr") * lrScheduleOf(call.op).factor(step)));
    const bool has_momentum = call.op.getFloat("momentum") != 0.0;
    T* w = call.out<T>(0);
    if (w != call.in<T>(0)) parallelCopy(w, call.in<T>(0), bytes, threads);
    // The GEMM's target and scales: w itself, or the momentum buffer.
    T* target = w;
    double alpha = negative_lr, beta = 1.0;
    if (has_momentum) {
      target = call.out<T>(1);
      const bool first_step = step == 0;
      if (target != call.in<T>(4) && !first_step) parallelCopy(target, call.in<T>(4), bytes, threads);
      alpha = first_step ? 1.0 : static_cast<double>(static_cast<T>(1.0 - call.op.getFloat("dampening")));
      beta = first_step ? 0.0 : static_cast<double>(static_cast<T>(call.op.getFloat("momentum")));
    }
    if (m == 0 || n == 0) return Status::ok();
    if (k == 0) {  // a zero gradient: the GEMM's scaling alone
      if (has_momentum) parallelFor(m * n, threads, kSgdWork, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) target[i] = beta == 0.0 ? T{0} : static_cast<T>(beta) * target[i];
      });
    } else {
      std::optional<Status> done;
      if constexpr (std::is_same_v<T, float>)
        done = runOneDnnProductInto(call, target, alpha == 1.0 ? std::nullopt : std::optional<float>(alpha),
                                    static_cast<float>(beta));
      if (done) {
        CLEAVE_TRY(*done);
      } else {
        parallelGemm<T>(transpose_a, transpose_b, m, n, k, alpha, call.in<T>(1), lda, call.in<T>(2), ldb, beta, target, n,
                        gemmThreads(threads));
      }
    }
    if (!has_momentum) return Status::ok();
    parallelFor(m * n, threads, kSgdWork, [&](int64_t begin, int64_t end) {
      withWidestVectors([&] {
        // param.add_(buf, alpha=-lr)
        for (int64_t i = begin; i < end; ++i) w[i] = std::fma(target[i], negative_lr, w[i]);
      });
    });
    return Status::ok();
  });
}

}  // namespace

void registerOptimizerKernels(CpuKernelTable& table) {
  table[static_cast<int>(OpId::sgd_update)] = sgdUpdateKernel;
  table[static_cast<int>(OpId::adamw_update)] = adamwUpdateKernel;
  table[static_cast<int>(OpId::sgd_matmul_update)] = sgdMatmulUpdateKernel;
}

}  // namespace cleave::runtime::cpu
