// Row-major matrix products for the CPU kernels: OpenBLAS for f32/f64, plain loops for integers.
//
// Threads: the kernels own all parallelism. They split GEMMs over OpenMP threads themselves and
// every OpenBLAS call runs on one thread (the kernel table sets openblas_set_num_threads(1)), so
// OpenMP's and OpenBLAS's thread pools never compete for the same cores (with two pools, each
// pool's idle workers spin while the other pool works). If a caller raises OpenBLAS's thread count
// anyway, gemmThreads() makes the kernels leave GEMM parallelism to OpenBLAS instead.
#pragma once

#include <cblas.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "runtime/cpu/cpu_kernel_support.h"

namespace cleave::runtime::cpu {

// Multiply-adds below which a GEMM is not split across threads (a few microseconds of work).
constexpr int64_t kMinGemmWorkPerThread = int64_t{1} << 18;

// The threads a kernel spreads its GEMM calls over: `threads` when OpenBLAS runs single-threaded,
// else 1, so that a threaded OpenBLAS is called from one thread at a time (OpenMP threads each
// starting OpenBLAS's threads would multiply the two).
inline int gemmThreads(int threads) { return openblas_get_num_threads() > 1 ? 1 : threads; }

// Whether every dim and leading dimension fits OpenBLAS's 32-bit interface.
inline bool fitsBlas(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims)
    if (d > std::numeric_limits<int>::max()) return false;
  return true;
}

// C = alpha·op(A)·op(B) + beta·C on the calling thread, for row-major A, B, C with leading
// dimensions lda, ldb, ldc; op transposes when the flag is set. m, n, k > 0 and every dim fits in
// int (see fitsBlas). Integer types use wrapping arithmetic, alpha and beta truncated to the type.
template <class T>
void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, double beta, T* c, int64_t ldc) {
  const auto ta = transpose_a ? CblasTrans : CblasNoTrans;
  const auto tb = transpose_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                static_cast<float>(alpha), a, static_cast<int>(lda), b, static_cast<int>(ldb), static_cast<float>(beta), c,
                static_cast<int>(ldc));
  } else if constexpr (std::is_same_v<T, double>) {
    cblas_dgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
                static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
  } else {
    using U = std::make_unsigned_t<T>;  // unsigned arithmetic wraps instead of overflowing
    const U alpha_int = static_cast<U>(static_cast<T>(alpha)), beta_int = static_cast<U>(static_cast<T>(beta));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        U sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          const U x = static_cast<U>(transpose_a ? a[p * lda + i] : a[i * lda + p]);
          const U y = static_cast<U>(transpose_b ? b[j * ldb + p] : b[p * ldb + j]);
          sum = static_cast<U>(sum + static_cast<U>(x * y));
        }
        const U previous = beta_int == 0 ? U{0} : static_cast<U>(beta_int * static_cast<U>(c[i * ldc + j]));
        c[i * ldc + j] = static_cast<T>(static_cast<U>(static_cast<U>(alpha_int * sum) + previous));
      }
    }
  }
}

// gemm split across up to `threads` OpenMP threads (one band per thread, fewer for small products):
// the larger of C's dims is cut into bands, multiples of 16 (OpenBLAS's widest register block). A
// given thread count always makes the same OpenBLAS calls, so results repeat from run to run; other
// thread counts may differ in the last bits (OpenBLAS's summation order can depend on a call's shape).
template <class T>
void parallelGemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha, const T* a,
                  int64_t lda, const T* b, int64_t ldb, double beta, T* c, int64_t ldc, int threads) {
  constexpr int64_t kAlign = 16;
  const int64_t parts = std::min<int64_t>(threads, m * n * k / kMinGemmWorkPerThread);
  if (parts <= 1) {
    gemm<T>(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const bool split_columns = n >= m;
  const int64_t dim = split_columns ? n : m;
  const int64_t band = ((dim + parts - 1) / parts + kAlign - 1) / kAlign * kAlign;
  const int64_t bands = (dim + band - 1) / band;
#pragma omp parallel for num_threads(static_cast<int>(bands)) schedule(static, 1)
  for (int64_t i = 0; i < bands; ++i) {
    const int64_t begin = i * band, size = std::min(band, dim - begin);
    if (split_columns) {
      gemm<T>(transpose_a, transpose_b, m, size, k, alpha, a, lda, transpose_b ? b + begin * ldb : b + begin, ldb, beta,
              c + begin, ldc);
    } else {
      gemm<T>(transpose_a, transpose_b, size, n, k, alpha, transpose_a ? a + begin : a + begin * lda, lda, b, ldb, beta,
              c + begin * ldc, ldc);
    }
  }
}

}  // namespace cleave::runtime::cpu
