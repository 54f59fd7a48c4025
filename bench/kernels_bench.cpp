// Benchmark of the CPU kernels against the machine's GEMM: matmul 512³ through the kernel versus a
// direct cblas_sgemm call, and the Fashion-MNIST convnet's conv layers (batch 64) forward and both
// backward kernels, in GFLOP/s and as a fraction of cblas_sgemm's 512³ rate; with --elementwise
// also the GPT's elementwise kernels, unfused and fused.
// Usage: kernels_bench [--threads N] [--repeats R] [--elementwise]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ir/op_table.h"
#include "runtime/device/kernel.h"

namespace {

using cleave::AttrMap;
using cleave::DType;
using cleave::OpId;
using cleave::Shape;
using cleave::TensorType;

// An f32 tensor of uniform random values in [-1, 1).
struct Buffer {
  TensorType type;
  std::vector<float> values;
};

Buffer randomBuffer(Shape shape, std::mt19937& rng) {
  Buffer b{TensorType{DType::kF32, std::move(shape)}, {}};
  b.values.resize(static_cast<size_t>(b.type.numel()));
  std::uniform_real_distribution<float> dist(-1, 1);
  for (float& v : b.values) v = dist(rng);
  return b;
}

// Seconds per call of fn: the median of `repeats` timed calls after two warm-up calls.
double secondsPerCall(const std::function<void()>& fn, int repeats) {
  fn();
  fn();
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

// One prepared kernel call: operands, attributes, inferred result types and result memory; with
// `in_place`, result r is written over operand in_place[r] (where >= 0), as a plan's memory planner
// lays out an optimizer's updates.
class PreparedCall {
 public:
  PreparedCall(OpId op, std::vector<const Buffer*> operands, AttrMap attrs, int threads, std::vector<int> in_place = {})
      : op_(op), operands_(std::move(operands)), attrs_(std::move(attrs)), threads_(threads), in_place_(std::move(in_place)) {
    for (const Buffer* b : operands_) {
      operand_types_.push_back(b->type);
      inputs_.push_back(b->values.data());
    }
    auto results = cleave::inferResultTypes(cleave::opDef(op), operand_types_, attrs_);
    if (!results) {
      std::fprintf(stderr, "kernels_bench: %s\n", results.status().message().c_str());
      std::exit(1);
    }
    result_types_ = *results;
    for (const TensorType& t : result_types_) result_memory_.emplace_back(static_cast<size_t>(t.numel()));
    kernel_ = cleave::runtime::findCpuKernel(op);
  }

  void operator()() const {
    std::vector<void*> outputs;  // taken here: copies of a PreparedCall own their own result memory
    for (size_t r = 0; r < result_memory_.size(); ++r)
      outputs.push_back(r < in_place_.size() && in_place_[r] >= 0 ? const_cast<void*>(inputs_[static_cast<size_t>(in_place_[r])])
                                                                  : result_memory_[r].data());
    cleave::runtime::KernelCall call{cleave::OpContext{cleave::opDef(op_), operand_types_, result_types_, attrs_},
                                     inputs_, outputs, threads_};
    cleave::Status status = kernel_(call);
    if (!status) {
      std::fprintf(stderr, "kernels_bench: %s\n", status.message().c_str());
      std::exit(1);
    }
  }

 private:
  OpId op_;
  std::vector<const Buffer*> operands_;
  AttrMap attrs_;
  int threads_;
  std::vector<int> in_place_;
  std::vector<TensorType> operand_types_, result_types_;
  std::vector<const void*> inputs_;
  mutable std::vector<std::vector<float>> result_memory_;
  cleave::runtime::CpuKernel kernel_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, repeats = 20;
  bool elementwise = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--elementwise") == 0) elementwise = true;
    else if (i + 1 < argc && std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[++i]);
    else if (i + 1 < argc && std::strcmp(argv[i], "--repeats") == 0) repeats = std::atoi(argv[++i]);
  }
  threads = std::max(1, threads);
  repeats = std::max(1, repeats);
  std::mt19937 rng(0);
  std::printf("threads %d, median of %d calls\n", threads, repeats);

  // The kernels run OpenBLAS single-threaded and split GEMMs over OpenMP threads themselves (see
  // runtime/cpu/cpu_gemm.h). They are timed first: the peer below wakes OpenBLAS's own threads, whose
  // idle spinning would slow whatever runs next on the same cores.
  openblas_set_num_threads(1);
  // OpenBLAS starts its own threads when loaded and they spin for about 0.1 s before sleeping;
  // until then they take cores from OpenMP's threads.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  struct Row {
    std::string name;
    double seconds, flops;
  };
  std::vector<Row> rows;

  // 1. matmul 512³.
  const int n = 512;
  const Buffer a = randomBuffer({n, n}, rng), b = randomBuffer({n, n}, rng);
  const double gemm_flops = 2.0 * n * n * n;
  rows.push_back({"matmul kernel 512x512x512", secondsPerCall(PreparedCall(OpId::matmul, {&a, &b}, {}, threads), repeats),
                  gemm_flops});

  // 2. The convnet's conv layers at batch 64: forward, grad_input and grad_weight.
  struct Layer {
    const char* name;
    int64_t channels, out_channels, size;
  };
  for (const Layer& layer : {Layer{"conv1 1->32 5x5 pad 2 on 28x28", 1, 32, 28}, Layer{"conv2 32->64 5x5 pad 2 on 14x14", 32, 64, 14}}) {
    const int64_t batch = 64;
    const Buffer x = randomBuffer({batch, layer.channels, layer.size, layer.size}, rng);
    const Buffer w = randomBuffer({layer.out_channels, layer.channels, 5, 5}, rng);
    const Buffer bias = randomBuffer({layer.out_channels}, rng);
    const Buffer dy = randomBuffer({batch, layer.out_channels, layer.size, layer.size}, rng);
    const AttrMap conv_attrs = {{"pads", std::vector<int64_t>{2, 2, 2, 2}}};
    AttrMap input_attrs = conv_attrs, weight_attrs = conv_attrs;
    input_attrs["input_shape"] = x.type.shape;
    weight_attrs["weight_shape"] = w.type.shape;
    // Multiply-adds of each of the three kernels: N·O·Ho·Wo·C·kh·kw.
    const double flops = 2.0 * batch * layer.out_channels * layer.size * layer.size * layer.channels * 25;
    const std::string name = layer.name;
    rows.push_back({name + " forward", secondsPerCall(PreparedCall(OpId::conv2d, {&x, &w, &bias}, conv_attrs, threads), repeats), flops});
    rows.push_back({name + " grad_input",
                    secondsPerCall(PreparedCall(OpId::conv2d_grad_input, {&dy, &w}, input_attrs, threads), repeats), flops});
    rows.push_back({name + " grad_weight",
                    secondsPerCall(PreparedCall(OpId::conv2d_grad_weight, {&dy, &x}, weight_attrs, threads), repeats), flops});
  }

  // 3. --elementwise: the GPT's elementwise work (bench/fusion_speedup.py's: 256 wide, 512 tokens),
  //    the unfused kernels against the fused ones the fusion pass makes of them (fused and fused_matmul
//    nodes), in microseconds.
  if (elementwise) {
    const Buffer h = randomBuffer({512, 1024}, rng), dh = randomBuffer({512, 1024}, rng), b = randomBuffer({1024}, rng);
    const Buffer c = randomBuffer({512, 1024}, rng);  // GELU's slope, computed by the forward for the gradient
    const Buffer r = randomBuffer({512, 256}, rng), dr = randomBuffer({512, 256}, rng), dr2 = randomBuffer({512, 256}, rng);
    const Buffer scale = randomBuffer({256}, rng);
    const Buffer rows = randomBuffer({512, 1}, rng), two{TensorType{DType::kF32, {}}, {2.0f}};
    const Buffer scores = randomBuffer({8, 4, 64, 64}, rng), mask = randomBuffer({1, 1, 64, 64}, rng);
    const Buffer eighth{TensorType{DType::kF32, {}}, {0.125f}};
    const Buffer heads = randomBuffer({8, 64, 4, 64}, rng), heads2 = randomBuffer({8, 64, 4, 64}, rng);
    const AttrMap swap_heads{{"perm", std::vector<int64_t>{0, 2, 1, 3}}};
    const std::vector<int64_t> swap = {0, 2, 1, 3};
    auto micros = [&](OpId op, std::vector<const Buffer*> in, AttrMap attrs, std::vector<int> in_place = {}) {
      return 1e6 * secondsPerCall(PreparedCall(op, std::move(in), std::move(attrs), threads, std::move(in_place)), repeats);
    };
    auto fused = [&](std::vector<const Buffer*> in, const char* body) {
      return micros(OpId::fused, std::move(in), {{"body", std::string(body)}});
    };
    const AttrMap columns{{"axes", std::vector<int64_t>{0}}, {"keepdims", int64_t{0}}};
    // Gradient clipping of a [512,1024] gradient h, for weight c: its momentum buffer, the step
    // counter (a later step: the buffer is read) and the clipping coefficient.
    const Buffer buffer = randomBuffer({512, 1024}, rng);
    Buffer step{TensorType{DType::kI64, {}}, std::vector<float>(2)};
    const int64_t later_step = 3;
    std::memcpy(step.values.data(), &later_step, sizeof later_step);
    const Buffer coefficient{TensorType{DType::kF32, {}}, {0.5f}};
    const AttrMap sgd{{"lr", 0.01}, {"momentum", 0.9}};
    const Buffer w = randomBuffer({1024, 256}, rng), g = randomBuffer({1024, 256}, rng), w_buffer = randomBuffer({1024, 256}, rng);
    struct Pair {
      const char* name;
      double unfused, fused;
    };
    const Pair pairs[] = {
        // As the fusion pass makes them in a training graph: the forward computes GELU's slope (c)
        // for the gradient, which is then a multiply (passes/fusion/gelu_slope.h).
        {"bias + gelu [512,1024]", micros(OpId::add, {&h, &b}, {}) + micros(OpId::gelu, {&h}, {}),
         fused({&h, &b}, "t0 = add(x0, x1); t1 = mul(t0, 0.70710677); t2 = erf(t1); t3 = add(1, t2); "
                         "t4 = mul(t0, 0.5); t5 = mul(0.5, t3); t6 = mul(t4, t3); t7 = mul(-0.5, t0); "
                         "t8 = mul(t7, t0); t9 = exp(t8); t10 = mul(t9, 0.39894229); t11 = mul(t0, t10); "
                         "t12 = add(t5, t11); return t12, t6")},
        {"gelu_grad [512,1024] + its column sum", micros(OpId::gelu_grad, {&dh, &h}, {}) + micros(OpId::reduce_sum, {&h}, columns),
         fused({&dh, &c}, "t0 = mul(x0, x1); t1 = reduce_sum(t0)[axes=[0], keepdims=0]; return t0, t1")},
        {"residual add [512,256] + its column sum", micros(OpId::add, {&r, &dr}, {}) + micros(OpId::reduce_sum, {&r}, columns),
         fused({&r, &dr}, "t0 = add(x0, x1); t1 = reduce_sum(t0)[axes=[0], keepdims=0]; return t0, t1")},
        {"q/k/v bias gradient: a lone column sum [512,256]", micros(OpId::reduce_sum, {&r}, columns),
         fused({&r}, "t0 = reduce_sum(x0)[axes=[0], keepdims=0]; return t0")},
        {"clipping: sum of squares [512,1024]",
         micros(OpId::mul, {&h, &h}, {}) + micros(OpId::reduce_sum, {&h}, {{"keepdims", int64_t{0}}}),
         fused({&h}, "t0 = mul(x0, x0); t1 = reduce_sum(t0)[keepdims=0]; return t1")},
        {"clipping: scaled gradient + sgd_update [512,1024]",
         micros(OpId::mul, {&h, &coefficient}, {}) + micros(OpId::sgd_update, {&c, &h, &step, &buffer}, sgd),
         micros(OpId::sgd_update, {&c, &h, &step, &buffer, &coefficient}, sgd)},
        // An MLP weight's gradient (fc1's, [1024,256] from 512 rows) and its SGD step with momentum,
        // in place: matmul + sgd_update, against the GEMM summed into the momentum buffer and one pass
        // over the weight (sgd_matmul_update).
        {"fc1 weight gradient + sgd_update [1024,256]",
         micros(OpId::matmul, {&h, &r}, {{"transpose_a", int64_t{1}}}) +
             micros(OpId::sgd_update, {&w, &g, &step, &w_buffer}, sgd, {0, 3}),
         micros(OpId::sgd_matmul_update, {&w, &h, &r, &step, &w_buffer}, {{"lr", 0.01}, {"momentum", 0.9}, {"transpose_a", int64_t{1}}},
                {0, 4})},
        {"attention scale, mask, softmax [8,4,64,64]",
         micros(OpId::mul, {&scores, &eighth}, {}) + micros(OpId::add, {&scores, &mask}, {}) +
             micros(OpId::softmax, {&scores}, {}),
         fused({&scores, &mask}, "t0 = mul(x0, 0.125); t1 = add(t0, x1); t2 = softmax(t1); return t2")},
        // Llama's RMSNorm as PyTorch exports it (pow, reduce_mean, add, sqrt, div, mul, mul; the
        // scalar chain on [512,1] rows), against the rms_norm op the rms-norm pass makes of it.
        {"rms norm, exported form -> rms_norm [512,256]",
         micros(OpId::pow, {&r, &two}, {}) + micros(OpId::reduce_mean, {&r}, {{"axes", std::vector<int64_t>{-1}}}) +
             micros(OpId::add, {&rows, &eighth}, {}) + micros(OpId::sqrt, {&rows}, {}) +
             micros(OpId::div, {&eighth, &rows}, {}) + micros(OpId::mul, {&r, &rows}, {}) +
             micros(OpId::mul, {&scale, &r}, {}),
         micros(OpId::rms_norm, {&r, &scale}, {})},
        {"rms_norm_grad [512,256]", micros(OpId::rms_norm_grad, {&dr, &r, &scale}, {}),
         fused({&dr, &r, &scale}, "t0, t1 = rms_norm_grad(x0, x1, x2); return t0, t1")},
        {"layer_norm_grad [512,256]", micros(OpId::layer_norm_grad, {&dr, &r, &scale}, {}),
         fused({&dr, &r, &scale}, "t0, t1, t2 = layer_norm_grad(x0, x1, x2); return t0, t1, t2")},
        {"3 gradients summed + layer_norm_grad [512,256]",
         2 * micros(OpId::add, {&dr, &dr2}, {}) + micros(OpId::layer_norm_grad, {&dr, &r, &scale}, {}),
         fused({&dr, &dr2, &r, &r, &scale},
               "t0 = add(x0, x1); t1 = add(t0, x2); t2, t3, t4 = layer_norm_grad(t1, x3, x4); return t2, t3, t4")},
        {"attention q k^T + 2 head transposes",
         2 * micros(OpId::transpose, {&heads}, swap_heads) +
             micros(OpId::matmul, {&scores, &scores}, {{"transpose_b", int64_t{1}}}),
         micros(OpId::fused_matmul, {&heads, &heads2},
                {{"perm_a", swap}, {"perm_b", swap}, {"transpose_b", int64_t{1}}})},
        {"attention probs v + 2 head transposes",
         2 * micros(OpId::transpose, {&heads}, swap_heads) + micros(OpId::matmul, {&scores, &scores}, {}),
         micros(OpId::fused_matmul, {&scores, &heads}, {{"perm_b", swap}, {"perm_result", swap}})},
    };
    std::printf("%-44s %12s %12s\n", "GPT elementwise work", "unfused", "fused");
    for (const Pair& pair : pairs)
      std::printf("%-44s %9.1f us %9.1f us  %.2fx\n", pair.name, pair.unfused, pair.fused, pair.unfused / pair.fused);
  }

  // 4. The peer: a direct cblas_sgemm 512³ on OpenBLAS's own `threads` threads.
  std::vector<float> c(static_cast<size_t>(n) * n);
  openblas_set_num_threads(threads);
  const double sgemm_rate = gemm_flops / secondsPerCall([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.values.data(), n, b.values.data(), n, 0.0f,
                c.data(), n);
  }, repeats) / 1e9;
  openblas_set_num_threads(1);

  std::printf("%-44s %10s %8.1f GFLOP/s\n", "cblas_sgemm 512x512x512 (peer)", "", sgemm_rate);
  for (const Row& row : rows) {
    const double rate = row.flops / row.seconds / 1e9;
    std::printf("%-44s %7.3f ms %8.1f GFLOP/s  %.2fx cblas_sgemm\n", row.name.c_str(), row.seconds * 1e3, rate,
                rate / sgemm_rate);
  }
  return 0;
}
