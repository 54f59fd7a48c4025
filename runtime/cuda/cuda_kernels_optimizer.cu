// CUDA kernels of the optimizer ops, sgd_update, adamw_update and sgd_matmul_update (its GEMM on
// cuBLAS): the CPU kernels' formulas in the same floating-point operation order, with fused
// multiply-adds exactly where the CPU uses std::fma and explicitly rounded operations (__fmul_rn
// etc., which nvcc never contracts) everywhere else. Results may alias their operands (parameters
// and optimizer state are updated in place). The step counter lives in device memory, so the
// kernels read it there.
#include <climits>
#include <cmath>

#include "ir/lr_schedule.h"
#include "ir/ops/optimizer_ops.h"
#include "runtime/cuda/cuda_kernel_support.cuh"

namespace cleave::runtime::cuda {
namespace {

// Correctly rounded operations that are never fused with a neighbour.
__device__ inline float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float divide(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline double divide(double a, double b) { return __ddiv_rn(a, b); }
__device__ inline float root(float a) { return __fsqrt_rn(a); }
__device__ inline double root(double a) { return __dsqrt_rn(a); }
__device__ inline float fused(float a, float b, float c) { return fmaf(a, b, c); }
__device__ inline double fused(double a, double b, double c) { return fma(a, b, c); }

// The scalars of one sgd_update step, rounded to T on the host as the CPU rounds them.
// The learning rate at `step` (lr times the schedule's factor) is computed on the device, which holds the step.
template <class T>
struct SgdScalars {
  bool has_momentum, has_weight_decay, nesterov;
  T weight_decay, momentum, one_minus_dampening;
  double lr;
  LrSchedule schedule;
};

// One element per thread: g ·= grad_scale (1 without one); d = g + wd·w; buf′ = d on the first step, else momentum·buf +
// (1 − dampening)·d; d = nesterov ? d + momentum·buf′ : buf′; w′ = w − lr·d.
template <class T>
__global__ void sgdElements(const T* w, const T* g, const T* buffer, const int64_t* step, const T* grad_scale, T* w_out,
                            T* buffer_out, int64_t n, SgdScalars<T> s) {
  const bool first_step = *step == 0;
  const T negative_lr = static_cast<T>(-(s.lr * s.schedule.factor(*step)));
  const T scale = grad_scale ? *grad_scale : T{1};
  CLEAVE_GRID_LOOP(i, n) {
    const T wi = w[i];
    T d = mul(g[i], scale);  // the mul of an unfused gradient clipping
    if (s.has_weight_decay) d = fused(wi, s.weight_decay, d);  // d_p.add(param, alpha=wd)
    if (s.has_momentum) {
      T b;
      if (first_step) {
        b = d;  // torch.clone(d_p)
      } else {
        const T decayed = mul(buffer[i], s.momentum);   // buf.mul_(momentum)
        b = fused(d, s.one_minus_dampening, decayed);  // .add_(d_p, alpha=1 - dampening)
      }
      d = s.nesterov ? fused(b, s.momentum, d) : b;  // d_p.add(buf, alpha=momentum)
      buffer_out[i] = b;
    }
    w_out[i] = fused(d, negative_lr, wi);  // param.add_(d_p, alpha=-lr)
  }
}

// The gradient scale operand (in device memory, as the clipping computes it there), or null.
template <class T>
const T* gradientScale(const KernelCall& call) {
  const int k = ops::gradientScaleOperand(call.op);
  return k < 0 ? nullptr : call.in<T>(k);
}

Status sgdUpdateKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) {
    const double momentum = call.op.getFloat("momentum"), weight_decay = call.op.getFloat("weight_decay");
    const int64_t n = call.op.operands[0].numel();
    if (n == 0) return Status::ok();
    SgdScalars<T> s{};
    s.has_momentum = momentum != 0.0;
    s.has_weight_decay = weight_decay != 0.0;
    s.nesterov = call.op.getInt("nesterov") != 0;
    s.weight_decay = static_cast<T>(weight_decay);
    s.momentum = static_cast<T>(momentum);
    s.one_minus_dampening = static_cast<T>(1.0 - call.op.getFloat("dampening"));
    s.lr = call.op.getFloat("lr");
    s.schedule = lrScheduleOf(call.op);
    sgdElements<T><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(
        call.in<T>(0), call.in<T>(1), s.has_momentum ? call.in<T>(3) : nullptr, call.in<int64_t>(2),
        gradientScale<T>(call), call.out<T>(0),
        s.has_momentum ? call.out<T>(1) : nullptr, n, s);
    return launchStatus(call);
  });
}

// The scalars of one adamw_update step known on the host, rounded to T as the CPU rounds them.
template <class T>
struct AdamwScalars {
  double lr, beta1_double, beta2_double;  // for the bias corrections, which need the step
  double weight_decay;
  LrSchedule schedule;                    // lr's factor at the step
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
};

// One element per thread: g ·= grad_scale (1 without one); w ← w·(1 − lr·wd); m′ = β1·m + (1 − β1)·g; v′ = β2·v + (1 − β2)·g²;
// w′ = w + (−step_size·m′) / (√v′ / √(1 − β2ᵗ) + eps), t = step + 1.
template <class T>
__global__ void adamwElements(const T* w, const T* g, const T* m, const T* v, const int64_t* step, const T* grad_scale,
                              T* w_out, T* m_out, T* v_out, int64_t n, AdamwScalars<T> s) {
  // The bias corrections in double, as the CPU computes them (device pow is within 2 ulp of libm's).
  const double t = static_cast<double>(*step + 1);
  const double bias_correction1 = 1.0 - pow(s.beta1_double, t), bias_correction2 = 1.0 - pow(s.beta2_double, t);
  const T bias_correction2_sqrt = static_cast<T>(sqrt(bias_correction2));
  const double lr = s.lr * s.schedule.factor(*step);
  const T negative_step_size = static_cast<T>(-(lr / bias_correction1));
  const T decay = static_cast<T>(1.0 - lr * s.weight_decay);
  const T scale = grad_scale ? *grad_scale : T{1};
  CLEAVE_GRID_LOOP(i, n) {
    const T gi = mul(g[i], scale);
    const T decayed = mul(w[i], decay);                                    // param.mul_(1 - lr * wd)
    const T mi = fused(gi, s.one_minus_beta1, mul(m[i], s.beta1));         // exp_avg.mul_(β1).add_(g, alpha=1-β1)
    const T vi = fused(mul(s.one_minus_beta2, gi), gi, mul(v[i], s.beta2));  // exp_avg_sq.mul_(β2).addcmul_(g, g, 1-β2)
    const T denominator = add(divide(root(vi), bias_correction2_sqrt), s.eps);  // (sqrt / bc2_sqrt).add_(eps)
    m_out[i] = mi;
    v_out[i] = vi;
    w_out[i] = add(decayed, divide(mul(negative_step_size, mi), denominator));  // addcdiv_(m, denom, -step_size)
  }
}

Status adamwUpdateKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) {
    const double lr = call.op.getFloat("lr"), beta1 = call.op.getFloat("beta1"), beta2 = call.op.getFloat("beta2");
    const int64_t n = call.op.operands[0].numel();
    if (n == 0) return Status::ok();
    AdamwScalars<T> s{};
    s.lr = lr;
    s.beta1_double = beta1;
    s.beta2_double = beta2;
    s.weight_decay = call.op.getFloat("weight_decay");
    s.schedule = lrScheduleOf(call.op);
    s.beta1 = static_cast<T>(beta1);
    s.one_minus_beta1 = static_cast<T>(1.0 - beta1);
    s.beta2 = static_cast<T>(beta2);
    s.one_minus_beta2 = static_cast<T>(1.0 - beta2);
    s.eps = static_cast<T>(call.op.getFloat("eps"));
    adamwElements<T><<<blocksFor(n), kBlockThreads, 0, context.compute()>>>(
        call.in<T>(0), call.in<T>(1), call.in<T>(2), call.in<T>(3), call.in<int64_t>(4), gradientScale<T>(call), call.out<T>(0),
        call.out<T>(1), call.out<T>(2), n, s);
    return launchStatus(call);
  });
}

// sgd_matmul_update's GEMM scales, which cuBLAS reads from the device (the step lives there):
// alpha, beta = −lr, 1 without momentum (the GEMM sums into w); with momentum 1, 0 on the first step,
// else 1 − dampening, momentum (it sums into the buffer). scalars[2] is −lr for the update of w.
template <class T>
__global__ void sgdMatmulScalars(const int64_t* step, double lr, LrSchedule schedule, bool has_momentum,
                                 T one_minus_dampening, T momentum, T* scalars) {
  const T negative_lr = static_cast<T>(-(lr * schedule.factor(*step)));
  const bool first_step = *step == 0;
  scalars[0] = !has_momentum ? negative_lr : first_step ? T{1} : one_minus_dampening;
  scalars[1] = !has_momentum ? T{1} : first_step ? T{0} : momentum;
  scalars[2] = negative_lr;
}

// w′ = w − lr·buf′, one element per thread (sgd_update's last step with momentum).
template <class T>
__global__ void sgdStepAlongBuffer(const T* buffer, const T* scalars, T* w, int64_t n) {
  const T negative_lr = scalars[2];
  CLEAVE_GRID_LOOP(i, n) w[i] = fused(buffer[i], negative_lr, w[i]);  // param.add_(buf, alpha=-lr)
}

// target = beta·target (beta = scalars[1]; 0 gives zeros): the GEMM of an empty product (k = 0).
template <class T>
__global__ void scaleByBeta(const T* scalars, T* target, int64_t n) {
  const T beta = scalars[1];
  CLEAVE_GRID_LOOP(i, n) target[i] = beta == T{0} ? T{0} : mul(beta, target[i]);
}

// Row-major target = alpha·op(a)·op(b) + beta·target, alpha and beta read from the device
// (scalars[0], scalars[1]): column-major cuBLAS computes targetᵀ = op(b)ᵀ·op(a)ᵀ. The handle is back in
// host pointer mode on return.
template <class T>
Status cublasGemmInto(cublasHandle_t handle, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                      const T* a, int64_t lda, const T* b, int64_t ldb, const T* scalars, T* target) {
  CLEAVE_TRY(cublasStatus(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_DEVICE), "sgd_matmul_update: cublas"));
  const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  const int ilda = static_cast<int>(lda), ildb = static_cast<int>(ldb);
  cublasStatus_t status;
  if constexpr (std::is_same_v<T, float>)
    status = cublasSgemm(handle, op_b, op_a, in, im, ik, scalars, b, ildb, a, ilda, scalars + 1, target, in);
  else
    status = cublasDgemm(handle, op_b, op_a, in, im, ik, scalars, b, ildb, a, ilda, scalars + 1, target, in);
  const Status restored =
      cublasStatus(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST), "sgd_matmul_update: cublas");
  CLEAVE_TRY(cublasStatus(status, "sgd_matmul_update: cublas gemm"));
  return restored;
}

// sgd_matmul_update(w, a, b, step, [buf]) -> w′, [buf′]: the CPU kernel's steps, the GEMM on cuBLAS
// (cublasGemmInto). Results that do not alias w and buf start as copies of them.
Status sgdMatmulUpdateKernel(const KernelCall& call, CudaContext& context) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const auto [m, n, k, lda, ldb, transpose_a, transpose_b] = ops::sgdMatmulGemm(call.op);
    const bool has_momentum = call.op.getFloat("momentum") != 0.0;
    const size_t bytes = static_cast<size_t>(call.op.operands[0].bytes());
    auto copyIfApart = [&](T* to, const T* from) {
      if (to == from) return Status::ok();
      return cudaStatus(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, context.compute()),
                        "sgd_matmul_update: cudaMemcpyAsync");
    };
    T* w = call.out<T>(0);
    T* target = has_momentum ? call.out<T>(1) : w;
    CLEAVE_TRY(copyIfApart(w, call.in<T>(0)));
    if (has_momentum) CLEAVE_TRY(copyIfApart(target, call.in<T>(4)));
    if (m == 0 || n == 0) return Status::ok();
    for (int64_t dim : {m, n, k, lda, ldb})
      if (dim > INT_MAX)
        return Status::badInput("sgd_matmul_update: a matrix dim exceeds 2^31-1, beyond cuBLAS's 32-bit dims");
    CLEAVE_ASSIGN_OR_RETURN(void* scratch, context.scratch(3 * static_cast<int64_t>(sizeof(T))));
    T* scalars = static_cast<T*>(scratch);
    sgdMatmulScalars<T><<<1, 1, 0, context.compute()>>>(
        call.in<int64_t>(3), call.op.getFloat("lr"), lrScheduleOf(call.op), has_momentum,
        static_cast<T>(1.0 - call.op.getFloat("dampening")), static_cast<T>(call.op.getFloat("momentum")), scalars);
    CLEAVE_TRY(launchStatus(call));
    if (k == 0) {  // a zero gradient: the GEMM's scaling alone (without momentum, beta 1 keeps w)
      if (has_momentum) {
        scaleByBeta<T><<<blocksFor(m * n), kBlockThreads, 0, context.compute()>>>(scalars, target, m * n);
        CLEAVE_TRY(launchStatus(call));
      }
    } else {
      CLEAVE_TRY(cublasGemmInto<T>(context.cublas(), transpose_a, transpose_b, m, n, k, call.in<T>(1), lda,
                                   call.in<T>(2), ldb, scalars, target));
    }
    if (!has_momentum) return Status::ok();
    sgdStepAlongBuffer<T><<<blocksFor(m * n), kBlockThreads, 0, context.compute()>>>(target, scalars, w, m * n);
    return launchStatus(call);
  });
}

}  // namespace

void registerOptimizerKernels(CudaKernelTable& table) {
  table[static_cast<int>(OpId::sgd_update)] = sgdUpdateKernel;
  table[static_cast<int>(OpId::sgd_matmul_update)] = sgdMatmulUpdateKernel;
  table[static_cast<int>(OpId::adamw_update)] = adamwUpdateKernel;
}

}  // namespace cleave::runtime::cuda
