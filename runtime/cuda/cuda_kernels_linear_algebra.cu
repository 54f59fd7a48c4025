// CUDA kernels of matmul (batched, broadcasting batch dims, transposes) and gemm: f32 and f64
// through cuBLAS (the handle's math mode keeps f32 in f32, without TF32), i64 and i32 through a
// plain kernel that wraps around as the CPU's integer GEMM does.
#include <cuda_bf16.h>

#include <climits>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_kernel_support.cuh"

namespace cleave::runtime::cuda {
namespace {

bool fitsInt(std::initializer_list<int64_t> values) {
  for (int64_t v : values)
    if (v > INT_MAX) return false;
  return true;
}

Status tooLargeForCublas(const KernelCall& call) {
  return Status::badInput(std::string(call.op.def.name) + ": a matrix dim exceeds 2^31-1, beyond cuBLAS's 32-bit dims");
}

// Integer products (cuBLAS has none), one thread per result element, wrapping as the CPU does:
// out = alpha·op(a)·op(b) + beta·out per batch, alpha and beta already truncated to T. Batch b
// reads matrix mapOffset(batches, 0/1, b) of a / b.
template <class T>
__global__ void integerGemm(const T* a, const T* b, T* out, int64_t total, int64_t m, int64_t n, int64_t k, int64_t lda,
                            int64_t ldb, bool transpose_a, bool transpose_b, IndexMap batches, int64_t a_matrix,
                            int64_t b_matrix, T alpha, T beta) {
  using U = std::make_unsigned_t<T>;
  CLEAVE_GRID_LOOP(i, total) {
    const int64_t column = i % n, row = i / n % m, batch = i / (m * n);
    const T* am = a + mapOffset(batches, 0, batch) * a_matrix;
    const T* bm = b + mapOffset(batches, 1, batch) * b_matrix;
    U sum = 0;
    for (int64_t p = 0; p < k; ++p) {
      const U x = static_cast<U>(transpose_a ? am[p * lda + row] : am[row * lda + p]);
      const U y = static_cast<U>(transpose_b ? bm[column * ldb + p] : bm[p * ldb + column]);
      sum = static_cast<U>(sum + static_cast<U>(x * y));
    }
    const U previous = beta == T{0} ? U{0} : static_cast<U>(static_cast<U>(beta) * static_cast<U>(out[i]));
    out[i] = static_cast<T>(static_cast<U>(static_cast<U>(static_cast<U>(alpha) * sum) + previous));
  }
}

// Row-major c[i] = alpha·op(a[i])·op(b[i]) + beta·c[i] for `batch` matrices `stride_*` elements
// apart: column-major cuBLAS computes cᵀ = op(b)ᵀ·op(a)ᵀ, row-major b being column-major bᵀ.
template <class T>
cublasStatus_t gemmStridedBatched(cublasHandle_t handle, bool transpose_a, bool transpose_b, int m, int n, int k, T alpha,
                                  const T* a, int lda, long long stride_a, const T* b, int ldb, long long stride_b,
                                  T beta, T* c, int ldc, long long stride_c, int batch) {
  const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    // bf16 operands and results, f32 accumulation (mixed precision's GEMMs).
    const float alpha32 = __bfloat162float(alpha), beta32 = __bfloat162float(beta);
    return cublasGemmStridedBatchedEx(handle, op_b, op_a, n, m, k, &alpha32, b, CUDA_R_16BF, ldb, stride_b, a, CUDA_R_16BF,
                                      lda, stride_a, &beta32, c, CUDA_R_16BF, ldc, stride_c, batch, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT);
  } else if constexpr (std::is_same_v<T, float>)
    return cublasSgemmStridedBatched(handle, op_b, op_a, n, m, k, &alpha, b, ldb, stride_b, a, lda, stride_a, &beta, c,
                                     ldc, stride_c, batch);
  else
    return cublasDgemmStridedBatched(handle, op_b, op_a, n, m, k, &alpha, b, ldb, stride_b, a, lda, stride_a, &beta, c,
                                     ldc, stride_c, batch);
}

template <class T>
Status matmulTyped(const KernelCall& call, CudaContext& context) {
  const Shape& a_shape = call.op.operands[0].shape;
  const Shape& b_shape = call.op.operands[1].shape;
  const Shape& out_shape = call.op.results[0].shape;
  const bool transpose_a = call.op.getInt("transpose_a") != 0;
  const bool transpose_b = call.op.getInt("transpose_b") != 0;
  const size_t ra = a_shape.size(), rb = b_shape.size(), ro = out_shape.size();
  const int64_t m = out_shape[ro - 2], n = out_shape[ro - 1];
  const int64_t k = transpose_a ? a_shape[ra - 2] : a_shape[ra - 1];
  const int64_t lda = a_shape[ra - 1], ldb = b_shape[rb - 1];
  const Shape a_batch(a_shape.begin(), a_shape.end() - 2), b_batch(b_shape.begin(), b_shape.end() - 2);
  const Shape out_batch(out_shape.begin(), out_shape.end() - 2);
  const int64_t batches = dimsProduct(out_batch, 0, out_batch.size());
  const T* a = call.in<T>(0);
  const T* b = call.in<T>(1);
  T* out = call.out<T>(0);
  // 1. Empty products: nothing to write, or zeros when the summed dim k is empty.
  if (m == 0 || n == 0 || batches == 0) return Status::ok();
  if (k == 0) return zeroBytes(call, context, out, call.op.results[0].bytes());
  if constexpr (std::is_integral_v<T>) {  // 2. Integers: one thread per result element.
    CLEAVE_ASSIGN_OR_RETURN(const IndexMap map, broadcastMap(call, out_batch, {&a_batch, &b_batch}));
    const int64_t total = batches * m * n;
    integerGemm<T><<<blocksFor(total), kBlockThreads, 0, context.compute()>>>(
        a, b, out, total, m, n, k, lda, ldb, transpose_a, transpose_b, map, a_shape[ra - 2] * a_shape[ra - 1],
        b_shape[rb - 2] * b_shape[rb - 1], T(1), T(0));
    return launchStatus(call);
  } else {
    const std::string what = std::string(call.op.def.name) + ": cublas gemm";
    // 2. One b for every batch and an untransposed a: the batch folds into m, giving one GEMM.
    if (dimsProduct(b_batch, 0, b_batch.size()) == 1 && !transpose_a) {
      if (!fitsInt({batches * m, n, k, lda, ldb})) return tooLargeForCublas(call);
      return cublasStatus(gemmStridedBatched<T>(context.cublas(), false, transpose_b, static_cast<int>(batches * m),
                                                static_cast<int>(n), static_cast<int>(k), static_cast<T>(1.0f), a, static_cast<int>(lda),
                                                0, b, static_cast<int>(ldb), 0, static_cast<T>(0.0f), out, static_cast<int>(n), 0, 1),
                          what);
    }
    if (!fitsInt({m, n, k, lda, ldb})) return tooLargeForCublas(call);
    // 3. The batch dims (merged as for broadcasting): each run along the innermost merged dim is one
    //    strided batched GEMM, a stride being 0 where that operand is broadcast.
    CLEAVE_ASSIGN_OR_RETURN(const IndexMap map, broadcastMap(call, out_batch, {&a_batch, &b_batch}));
    const int64_t a_matrix = a_shape[ra - 2] * a_shape[ra - 1], b_matrix = b_shape[rb - 2] * b_shape[rb - 1];
    const int64_t run = map.dims[map.rank - 1];
    if (!fitsInt({run})) return tooLargeForCublas(call);
    for (int64_t first = 0; first < batches; first += run) {
      // The operands' matrix offsets at batch `first` (the start of a run).
      int64_t a_offset = 0, b_offset = 0, rest = first;
      for (int d = map.rank - 1; d >= 0; --d) {
        const int64_t index = rest % map.dims[d];
        rest /= map.dims[d];
        a_offset += index * map.strides[0][d];
        b_offset += index * map.strides[1][d];
      }
      CLEAVE_TRY(cublasStatus(
          gemmStridedBatched<T>(context.cublas(), transpose_a, transpose_b, static_cast<int>(m), static_cast<int>(n),
                                static_cast<int>(k), static_cast<T>(1.0f), a + a_offset * a_matrix, static_cast<int>(lda),
                                map.strides[0][map.rank - 1] * a_matrix, b + b_offset * b_matrix, static_cast<int>(ldb),
                                map.strides[1][map.rank - 1] * b_matrix, static_cast<T>(0.0f), out + first * m * n, static_cast<int>(n),
                                m * n, static_cast<int>(run)),
          what));
    }
    return Status::ok();
  }
}

Status matmulKernel(const KernelCall& call, CudaContext& context) {
  if (call.op.operands[0].dtype == DType::kBF16) return matmulTyped<__nv_bfloat16>(call, context);
  return visitNumeric(call, call.op.operands[0].dtype, [&]<class T>(T) { return matmulTyped<T>(call, context); });
}

// out[i] = c broadcast (by `map`) to out's shape, times `scale`.
template <class T>
__global__ void broadcastScaled(const T* c, T* out, int64_t n, IndexMap map, T scale) {
  CLEAVE_GRID_LOOP(i, n) out[i] = scale * c[mapOffset(map, 0, i)];
}

// gemm: out = alpha·op(a)·op(b) + beta·c, c broadcast to [m, n].
template <class T>
Status gemmTyped(const KernelCall& call, CudaContext& context) {
  const Shape& a_shape = call.op.operands[0].shape;
  const Shape& b_shape = call.op.operands[1].shape;
  const Shape& out_shape = call.op.results[0].shape;
  const bool transpose_a = call.op.getInt("transpose_a") != 0;
  const bool transpose_b = call.op.getInt("transpose_b") != 0;
  const double alpha = call.op.getFloat("alpha");
  const double beta = call.op.getFloat("beta");
  const int64_t m = out_shape[0], n = out_shape[1], k = transpose_a ? a_shape[0] : a_shape[1];
  T* out = call.out<T>(0);
  if (m == 0 || n == 0) return Status::ok();
  // 1. out = c broadcast to [m, n] when it takes part (beta ≠ 0); with k = 0 that times beta is all.
  const bool adds_c = call.op.operands.size() == 3 && beta != 0.0;
  if (adds_c) {
    CLEAVE_ASSIGN_OR_RETURN(const IndexMap map, broadcastMap(call, out_shape, {&call.op.operands[2].shape}));
    broadcastScaled<T><<<blocksFor(m * n), kBlockThreads, 0, context.compute()>>>(call.in<T>(2), out, m * n, map,
                                                                                  k == 0 ? static_cast<T>(beta) : T(1));
    CLEAVE_TRY(launchStatus(call));
  }
  if (k == 0) return adds_c ? Status::ok() : zeroBytes(call, context, out, call.op.results[0].bytes());
  // 2. out = alpha·op(a)·op(b) + beta·out (integers: one thread per element, alpha and beta truncated).
  if constexpr (std::is_integral_v<T>) {
    integerGemm<T><<<blocksFor(m * n), kBlockThreads, 0, context.compute()>>>(
        call.in<T>(0), call.in<T>(1), out, m * n, m, n, k, a_shape[1], b_shape[1], transpose_a, transpose_b,
        IndexMap{}, 0, 0, static_cast<T>(alpha), adds_c ? static_cast<T>(beta) : T(0));
    return launchStatus(call);
  } else {
    if (!fitsInt({m, n, k, a_shape[1], b_shape[1]})) return tooLargeForCublas(call);
    return cublasStatus(gemmStridedBatched<T>(context.cublas(), transpose_a, transpose_b, static_cast<int>(m),
                                              static_cast<int>(n), static_cast<int>(k), static_cast<T>(alpha),
                                              call.in<T>(0), static_cast<int>(a_shape[1]), 0, call.in<T>(1),
                                              static_cast<int>(b_shape[1]), 0, adds_c ? static_cast<T>(beta) : T(0), out,
                                              static_cast<int>(n), 0, 1),
                        std::string(call.op.def.name) + ": cublas gemm");
  }
}

Status gemmKernel(const KernelCall& call, CudaContext& context) {
  return visitNumeric(call, call.op.operands[0].dtype, [&]<class T>(T) { return gemmTyped<T>(call, context); });
}

}  // namespace

void registerLinearAlgebraKernels(CudaKernelTable& table) {
  table[static_cast<int>(OpId::matmul)] = matmulKernel;
  table[static_cast<int>(OpId::gemm)] = gemmKernel;
  table[static_cast<int>(OpId::fused_matmul)] = fusedMatmulKernel;
}

}  // namespace cleave::runtime::cuda
