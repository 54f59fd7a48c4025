// CPU kernels of the losses: softmax_cross_entropy (log-sum-exp, ignore_index) and mse, each an f32
// scalar mean as PyTorch computes it, summed in double in a thread-count-independent order, and
// softmax_cross_entropy_and_grad (the loss and its gradient in one pass).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "runtime/cpu/cpu_kernel_support.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_vector_math.h"

namespace cleave::runtime::cpu {
namespace {

// Rows (label positions) per block of the deterministic sum.
constexpr int64_t kRowsPerBlock = 64;

// A row's cross-entropy from its max and the sum of e^(x − max): log(sum) + max − row[label].
template <class T>
double crossEntropyOf(double sum, T max, T logit) {
  return std::log(sum) + static_cast<double>(max) - static_cast<double>(logit);
}

// log Σ exp(row) − row[label]; the exps in T, their sum and the rest in double.
template <class T>
double rowCrossEntropy(const T* row, int64_t classes, int64_t label) {
  const T max = maxOf(row, classes);
  const double sum = sumOf(classes, [row, max](int64_t c) { return vexp(row[c] - max); });
  return crossEntropyOf(sum, max, row[label]);
}

Status softmaxCrossEntropyKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    return visitIndex(call, call.op.operands[1].dtype, [&]<class I>(I) -> Status {
      const int64_t classes = call.op.operands[0].shape.back();
      const int64_t rows = call.op.operands[1].numel();
      const int64_t ignore_index = call.op.getInt("ignore_index");
      const T* logits = call.in<T>(0);
      const I* labels = call.in<I>(1);
      CLEAVE_ASSIGN_OR_RETURN(const int64_t counted, countLabels(call, labels, rows, classes, ignore_index));
      const double sum = blockedSum(rows, threadCount(call), kRowsPerBlock, classes * 16, [&](int64_t begin, int64_t end) {
        double partial = 0;
        withWidestVectors([&] {
          for (int64_t r = begin; r < end; ++r)
            if (labels[r] != ignore_index) partial += rowCrossEntropy(logits + r * classes, classes, labels[r]);
        });
        return partial;
      });
      // As PyTorch: no counted labels gives 0/0 = NaN.
      *call.out<float>(0) = static_cast<float>(counted > 0 ? sum / static_cast<double>(counted)
                                                           : std::numeric_limits<double>::quiet_NaN());
      return Status::ok();
    });
  });
}

// softmax_cross_entropy and its gradient in one pass over the logits: per row e^(x − max) once
// (crossEntropyGradientRow, as softmaxCrossEntropyGradKernel); the loss summed as
// softmaxCrossEntropyKernel sums it (the same blocks, the same row terms).
Status softmaxCrossEntropyAndGradKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    return visitIndex(call, call.op.operands[1].dtype, [&]<class I>(I) -> Status {
      const int64_t classes = call.op.operands[0].shape.back();
      const int64_t rows = call.op.operands[1].numel();
      const int64_t ignore_index = call.op.getInt("ignore_index");
      const T* logits = call.in<T>(0);
      const I* labels = call.in<I>(1);
      const double dloss = static_cast<double>(*call.in<float>(2));
      T* dlogits = call.out<T>(1);
      CLEAVE_ASSIGN_OR_RETURN(const int64_t counted, countLabels(call, labels, rows, classes, ignore_index));
      const T scale = static_cast<T>(counted > 0 ? dloss / static_cast<double>(counted) : 0.0);
      const double sum = blockedSum(rows, threadCount(call), kRowsPerBlock, classes * 16, [&](int64_t begin, int64_t end) {
        double partial = 0;
        withWidestVectors([&] {
          for (int64_t r = begin; r < end; ++r) {
            const T* row = logits + r * classes;
            T* out = dlogits + r * classes;
            if (labels[r] == ignore_index) {
              std::fill_n(out, classes, T{0});
              continue;
            }
            const int64_t label = labels[r];
            const ExpSum<T> exps = crossEntropyGradientRow(row, out, classes, label, scale);
            partial += crossEntropyOf(exps.sum, exps.max, row[label]);
          }
        });
        return partial;
      });
      *call.out<float>(0) = static_cast<float>(counted > 0 ? sum / static_cast<double>(counted)
                                                           : std::numeric_limits<double>::quiet_NaN());
      return Status::ok();
    });
  });
}

Status mseKernel(const KernelCall& call) {
  return visitFloat(call, call.op.operands[0].dtype, [&]<class T>(T) -> Status {
    const int64_t n = call.op.operands[0].numel();
    const T* prediction = call.in<T>(0);
    const T* target = call.in<T>(1);
    constexpr int64_t kBlock = 4096;
    const double sum = blockedSum(n, threadCount(call), kBlock, 3, [&](int64_t begin, int64_t end) {
      const T* p = prediction + begin;
      const T* t = target + begin;
      return sumOf(end - begin, [p, t](int64_t i) {
        const double difference = static_cast<double>(p[i]) - static_cast<double>(t[i]);
        return difference * difference;
      });
    });
    *call.out<float>(0) = static_cast<float>(n > 0 ? sum / static_cast<double>(n)
                                                   : std::numeric_limits<double>::quiet_NaN());
    return Status::ok();
  });
}

}  // namespace

void registerLossKernels(CpuKernelTable& table) {
  table[static_cast<int>(OpId::softmax_cross_entropy)] = softmaxCrossEntropyKernel;
  table[static_cast<int>(OpId::mse)] = mseKernel;
  table[static_cast<int>(OpId::softmax_cross_entropy_and_grad)] = softmaxCrossEntropyAndGradKernel;
}

}  // namespace cleave::runtime::cpu
