// CPU kernels of matmul (batched, broadcasting batch dims, transposes), gemm and fused_matmul: f32
// products that are one 2-D GEMM or an unbroadcast batch of them through oneDNN (onednn_matmul.h),
// the rest through OpenBLAS.
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/cpu/cpu_gemm.h"
#include "runtime/cpu/cpu_kernel_support.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/onednn_matmul.h"
#include "runtime/device/fused_matmul_steps.h"

namespace cleave::runtime::cpu {
namespace {

Status tooLargeForBlas(const KernelCall& call) {
  return Status::badInput(std::string(call.op.def.name) +
                          ": a matrix dim exceeds 2^31-1, beyond OpenBLAS's 32-bit interface");
}

template <class T>
Status matmulTyped(const KernelCall& call) {
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
  const int threads = gemmThreads(threadCount(call));
  // 1. Empty products: nothing to write, or zeros when the summed dim k is empty.
  if (m == 0 || n == 0 || batches == 0) return Status::ok();
  if (k == 0) {
    std::memset(out, 0, static_cast<size_t>(call.op.results[0].bytes()));
    return Status::ok();
  }
  if (!fitsBlas({m, n, k, lda, ldb, batches * m})) return tooLargeForBlas(call);
  // 2. One b for every batch and an untransposed a: the batch folds into m, giving one large GEMM.
  if (dimsProduct(b_batch, 0, b_batch.size()) == 1 && !transpose_a) {
    parallelGemm<T>(false, transpose_b, batches * m, n, k, 1.0, a, lda, b, ldb, 0.0, out, n, threads);
    return Status::ok();
  }
  // 3. Each batch's a and b matrix, broadcasting over the batch dims.
  std::vector<int64_t> a_offsets(static_cast<size_t>(batches)), b_offsets(static_cast<size_t>(batches));
  const BroadcastLayout layout = makeBroadcastLayout(out_batch, {&a_batch, &b_batch});
  const int64_t a_step = layout.strides[0].back(), b_step = layout.strides[1].back();
  const int64_t a_matrix = a_shape[ra - 2] * a_shape[ra - 1], b_matrix = b_shape[rb - 2] * b_shape[rb - 1];
  forEachSegment<2>(layout, 0, batches, [&](int64_t at, const std::array<int64_t, 2>& from, int64_t length) {
    for (int64_t i = 0; i < length; ++i) {
      a_offsets[at + i] = (from[0] + i * a_step) * a_matrix;
      b_offsets[at + i] = (from[1] + i * b_step) * b_matrix;
    }
  });
  // 4. With a batch per thread at least, threads take whole batches; otherwise each product is
  //    split across the threads in turn.
  if (batches >= threads) {
    parallelFor(batches, threads, m * n * k * kMinParallelWork / kMinGemmWorkPerThread, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i)
        gemm<T>(transpose_a, transpose_b, m, n, k, 1.0, a + a_offsets[i], lda, b + b_offsets[i], ldb, 0.0,
                out + i * m * n, n);
    });
  } else {
    for (int64_t i = 0; i < batches; ++i)
      parallelGemm<T>(transpose_a, transpose_b, m, n, k, 1.0, a + a_offsets[i], lda, b + b_offsets[i], ldb, 0.0,
                      out + i * m * n, n, threads);
  }
  return Status::ok();
}

Status matmulKernel(const KernelCall& call) {
  if (std::optional<Status> done = runOneDnnMatmul(call)) return *done;
  return visitNumeric(call, call.op.operands[0].dtype, [&]<class T>(T) { return matmulTyped<T>(call); });
}

// gemm: out = alpha·op(a)·op(b) + beta·c, c broadcast to [m, n].
template <class T>
Status gemmTyped(const KernelCall& call) {
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
  // 1. out = c broadcast to [m, n] when it takes part (beta ≠ 0), else zeros.
  const bool adds_c = call.op.operands.size() == 3 && beta != 0.0;
  if (adds_c) {
    const T* c = call.in<T>(2);
    const BroadcastLayout layout = makeBroadcastLayout(out_shape, {&call.op.operands[2].shape});
    const bool c_steps = layout.steps(0);
    forEachSegment<1>(layout, 0, m * n, [&](int64_t at, const std::array<int64_t, 1>& from, int64_t length) {
      if (c_steps)
        std::memcpy(out + at, c + from[0], static_cast<size_t>(length) * sizeof(T));
      else
        std::fill_n(out + at, length, c[from[0]]);
    });
  }
  // 2. out = alpha·op(a)·op(b) + beta·out.
  if (k == 0) {
    if (!adds_c) {
      std::fill_n(out, m * n, T{0});
    } else if constexpr (std::is_floating_point_v<T>) {
      for (int64_t i = 0; i < m * n; ++i) out[i] = static_cast<T>(beta) * out[i];
    } else {
      using U = std::make_unsigned_t<T>;  // wraps, as gemm<T> does for integers
      for (int64_t i = 0; i < m * n; ++i)
        out[i] = static_cast<T>(static_cast<U>(static_cast<U>(static_cast<T>(beta)) * static_cast<U>(out[i])));
    }
    return Status::ok();
  }
  if (!fitsBlas({m, n, k, a_shape[1], b_shape[1]})) return tooLargeForBlas(call);
  parallelGemm<T>(transpose_a, transpose_b, m, n, k, alpha, call.in<T>(0), a_shape[1], call.in<T>(1), b_shape[1],
                  adds_c ? beta : 0.0, out, n, gemmThreads(threadCount(call)));
  return Status::ok();
}

Status gemmKernel(const KernelCall& call) {
  if (std::optional<Status> done = runOneDnnMatmul(call)) return *done;
  return visitNumeric(call, call.op.operands[0].dtype, [&]<class T>(T) { return gemmTyped<T>(call); });
}

// fused_matmul: through oneDNN, which reads the operands and writes the result in place through
// their permutations' strides and adds the bias in its epilogue; else the transposes and the add
// into temporaries around the matmul kernel.
Status fusedMatmulKernel(const KernelCall& call) {
  if (std::optional<Status> done = runOneDnnMatmul(call)) return *done;
  std::vector<std::vector<std::byte>> temporaries;
  return runFusedMatmulStepwise(
      call,
      [&](int64_t bytes) -> Expected<void*> { return temporaries.emplace_back(static_cast<size_t>(bytes)).data(); },
      [](OpId op, const KernelCall& step) { return findCpuKernel(op)(step); });
}

}  // namespace

void registerLinearAlgebraKernels(CpuKernelTable& table) {
  table[static_cast<int>(OpId::fused_matmul)] = fusedMatmulKernel;
  table[static_cast<int>(OpId::matmul)] = matmulKernel;
  table[static_cast<int>(OpId::gemm)] = gemmKernel;
}

}  // namespace cleave::runtime::cpu
