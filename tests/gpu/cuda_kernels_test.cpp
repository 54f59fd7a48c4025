// GPU tests of the CUDA kernel table: every op's CUDA kernel against its CPU kernel on random inputs
// (broadcasting, odd sizes, every attribute path), and the table's op set against the CPU's.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_kernels.h"
#include "tests/unit/cpu_kernel_test_support.h"

namespace cleave::runtime {
namespace {

using kernel_test::HostTensor;
using kernel_test::randomIntTensor;
using kernel_test::randomTensor;
using Ints = std::vector<int64_t>;

#define SKIP_WITHOUT_GPU() \
  if (cudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount found none or no driver)"

// The CUDA context of GPU 0, created once for the whole test binary.
CudaContext& context() {
  static std::unique_ptr<CudaContext> shared = [] {
    auto created = CudaContext::create(0);
    EXPECT_TRUE(created.hasValue()) << created.status().message();
    return created.hasValue() ? std::move(*created) : nullptr;
  }();
  return *shared;
}

// Device memory freed at scope exit.
struct DeviceBuffer {
  void* data = nullptr;
  explicit DeviceBuffer(int64_t bytes) { EXPECT_EQ(cudaMalloc(&data, static_cast<size_t>(std::max<int64_t>(bytes, 8))), cudaSuccess); }
  ~DeviceBuffer() { (void)cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Runs op's CUDA kernel on copies of `operands`; results come back to host tensors.
std::vector<HostTensor> runOnGpu(OpId op, const std::vector<const HostTensor*>& operands, const AttrMap& attrs) {
  std::vector<TensorType> operand_types;
  for (const HostTensor* t : operands) operand_types.push_back(t->type);
  auto result_types = inferResultTypes(opDef(op), operand_types, attrs);
  if (!result_types) {
    ADD_FAILURE() << opName(op) << ": " << result_types.status().message();
    return {};
  }
  CudaKernel kernel = findCudaKernel(op);
  if (!kernel) {
    ADD_FAILURE() << "no cuda kernel for " << opName(op);
    return {};
  }
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<const void*> inputs;
  for (const HostTensor* t : operands) {
    buffers.push_back(std::make_unique<DeviceBuffer>(t->type.bytes()));
    EXPECT_EQ(cudaMemcpy(buffers.back()->data, t->bytes(), static_cast<size_t>(t->type.bytes()), cudaMemcpyHostToDevice),
              cudaSuccess);
    inputs.push_back(buffers.back()->data);
  }
  std::vector<void*> outputs;
  for (const TensorType& type : *result_types) {
    buffers.push_back(std::make_unique<DeviceBuffer>(type.bytes()));
    // Garbage (NaN bytes for floats) where a kernel forgets to write.
    EXPECT_EQ(cudaMemset(buffers.back()->data, 0xFF, static_cast<size_t>(std::max<int64_t>(type.bytes(), 8))), cudaSuccess);
    outputs.push_back(buffers.back()->data);
  }
  KernelCall call{OpContext{opDef(op), operand_types, *result_types, attrs}, inputs, outputs};
  const Status status = kernel(call, context());
  EXPECT_TRUE(status.isOk()) << opName(op) << ": " << status.message();
  EXPECT_EQ(cudaStreamSynchronize(context().compute()), cudaSuccess) << opName(op);
  std::vector<HostTensor> results;
  for (size_t i = 0; i < result_types->size(); ++i) {
    results.emplace_back((*result_types)[i]);
    EXPECT_EQ(cudaMemcpy(results.back().bytes(), outputs[i], static_cast<size_t>((*result_types)[i].bytes()),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  return results;
}

// Expects op's CUDA results to equal its CPU results within rtol/atol (exactly for integers).
void expectMatchesCpu(OpId op, const std::vector<const HostTensor*>& operands, const AttrMap& attrs = {},
                      double rtol = 1e-4, double atol = 1e-5) {
  std::string what = std::string(opName(op));
  for (const HostTensor* t : operands) what.append(" ").append(t->type.str());
  const std::vector<HostTensor> expected = kernel_test::run(op, operands, attrs);
  const std::vector<HostTensor> actual = runOnGpu(op, operands, attrs);
  ASSERT_EQ(expected.size(), actual.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(expected[i].type, actual[i].type) << what;
    const bool exact = !isFloat(expected[i].type.dtype);
    kernel_test::expectClose(actual[i], expected[i].values(), exact ? 0 : rtol, exact ? 0 : atol,
                             what + " result " + std::to_string(i));
  }
}

HostTensor boolTensor(Shape shape, std::mt19937& rng) { return randomIntTensor(DType::kBool, std::move(shape), rng, 0, 1); }

// The first result of op's CPU kernel (an empty f32 scalar after a failure, which the run reports).
HostTensor cpuResult(OpId op, const std::vector<const HostTensor*>& operands, const AttrMap& attrs) {
  std::vector<HostTensor> results = kernel_test::run(op, operands, attrs);
  return results.empty() ? HostTensor(TensorType{DType::kF32, {}}) : std::move(results[0]);
}

TEST(CudaKernels, TableHasTheCpuTablesOps) {
  SKIP_WITHOUT_GPU();
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    EXPECT_EQ(findCpuKernel(op) != nullptr, findCudaKernel(op) != nullptr) << opName(op);
  }
}

TEST(CudaKernels, ArithmeticAndComparisons) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(1);
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 5}, {3, 5}}, {{2, 3, 4}, {3, 1}}, {{4, 1, 5}, {1, 7, 1}}, {{}, {6}}, {{1037}, {1}}};
  for (const auto& [sa, sb] : shapes) {
    for (OpId op : {OpId::add, OpId::sub, OpId::mul, OpId::div}) {
      const HostTensor a = randomTensor(DType::kF32, sa, rng), b = randomTensor(DType::kF32, sb, rng, 0.5, 2.0);
      expectMatchesCpu(op, {&a, &b});
      const HostTensor ia = randomIntTensor(DType::kI64, sa, rng, -50, 50);
      const HostTensor ib = randomIntTensor(DType::kI64, sb, rng, 1, 9);
      expectMatchesCpu(op, {&ia, &ib});
      const HostTensor ja = randomIntTensor(DType::kI32, sa, rng, -50, 50);
      const HostTensor jb = randomIntTensor(DType::kI32, sb, rng, -9, -1);
      expectMatchesCpu(op, {&ja, &jb});
    }
    const HostTensor base = randomTensor(DType::kF32, sa, rng, 0.5, 2.0), exponent = randomTensor(DType::kF32, sb, rng);
    expectMatchesCpu(OpId::pow, {&base, &exponent});
    const HostTensor ibase = randomIntTensor(DType::kI64, sa, rng, -3, 3);
    const HostTensor iexponent = randomIntTensor(DType::kI64, sb, rng, 0, 5);
    expectMatchesCpu(OpId::pow, {&ibase, &iexponent});
    const HostTensor da = randomTensor(DType::kF64, sa, rng), db = randomTensor(DType::kF64, sb, rng);
    expectMatchesCpu(OpId::add, {&da, &db}, {}, 1e-12, 1e-12);
    for (OpId op : {OpId::equal, OpId::less, OpId::less_equal, OpId::greater, OpId::greater_equal}) {
      const HostTensor a = randomIntTensor(DType::kI64, sa, rng, 0, 3), b = randomIntTensor(DType::kI64, sb, rng, 0, 3);
      expectMatchesCpu(op, {&a, &b});
      const HostTensor fa = randomTensor(DType::kF32, sa, rng), fb = randomTensor(DType::kF32, sb, rng);
      expectMatchesCpu(op, {&fa, &fb});
    }
    const HostTensor ba = boolTensor(sa, rng), bb = boolTensor(sb, rng);
    expectMatchesCpu(OpId::equal, {&ba, &bb});
  }
}

TEST(CudaKernels, UnaryMathClipCastWhereCopies) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(2);
  for (const Shape& shape : {Shape{}, Shape{7}, Shape{3, 129}}) {
    const HostTensor x = randomTensor(DType::kF32, shape, rng, -3, 3);
    const HostTensor positive = randomTensor(DType::kF32, shape, rng, 0.1, 4);
    for (OpId op : {OpId::exp, OpId::neg, OpId::erf, OpId::tanh, OpId::sigmoid, OpId::relu, OpId::gelu, OpId::identity,
                    OpId::dropout})
      expectMatchesCpu(op, {&x});
    expectMatchesCpu(OpId::gelu, {&x}, {{"approximate", std::string("tanh")}});
    expectMatchesCpu(OpId::sqrt, {&positive});
    expectMatchesCpu(OpId::log, {&positive});
    const HostTensor d = randomTensor(DType::kF64, shape, rng, -3, 3);
    expectMatchesCpu(OpId::tanh, {&d}, {}, 1e-12, 1e-12);
    const HostTensor i = randomIntTensor(DType::kI64, shape, rng, -100, 100);
    const HostTensor j = randomIntTensor(DType::kI32, shape, rng, -100, 100);
    expectMatchesCpu(OpId::neg, {&i});
    expectMatchesCpu(OpId::relu, {&j});
    expectMatchesCpu(OpId::clip, {&x}, {{"min", -0.5}, {"max", 1.25}});
    expectMatchesCpu(OpId::clip, {&i}, {{"min", -7.5}, {"max", 30.2}});
    expectMatchesCpu(OpId::cast, {&x}, {{"to", std::string("i32")}});
    expectMatchesCpu(OpId::cast, {&x}, {{"to", std::string("bool")}});
    expectMatchesCpu(OpId::cast, {&x}, {{"to", std::string("f16")}});
    expectMatchesCpu(OpId::cast, {&x}, {{"to", std::string("bf16")}});
    expectMatchesCpu(OpId::cast, {&x}, {{"to", std::string("f64")}});
    expectMatchesCpu(OpId::cast, {&i}, {{"to", std::string("f32")}});
    expectMatchesCpu(OpId::cast, {&j}, {{"to", std::string("i64")}});
    const HostTensor cond = boolTensor(shape, rng);
    const HostTensor b = randomTensor(DType::kF32, {1}, rng);
    expectMatchesCpu(OpId::where, {&cond, &x, &b});
    expectMatchesCpu(OpId::where, {&cond, &i, &i});
  }
}

TEST(CudaKernels, ReductionsAndNormalisations) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  const std::vector<std::pair<Shape, Ints>> cases = {
      {{4, 5, 6}, {1}}, {{4, 5, 6}, {0, 2}}, {{4, 5, 6}, {}}, {{1000, 3}, {0}}, {{2, 3000}, {1}}, {{3, 1, 70}, {-1}}};
  for (const auto& [shape, axes] : cases)
    for (int64_t keepdims : {0, 1})
      for (OpId op : {OpId::reduce_sum, OpId::reduce_mean, OpId::reduce_max}) {
        const AttrMap attrs = {{"axes", axes}, {"keepdims", keepdims}};
        const HostTensor x = randomTensor(DType::kF32, shape, rng);
        expectMatchesCpu(op, {&x}, attrs);
        const HostTensor i = randomIntTensor(DType::kI64, shape, rng, -1000, 1000);
        expectMatchesCpu(op, {&i}, attrs);
      }
  for (const auto& [shape, axis] : std::vector<std::pair<Shape, int64_t>>{{{4, 37}, -1}, {{3, 5, 7}, 1}, {{2, 1500}, 1}})
    for (OpId op : {OpId::softmax, OpId::log_softmax}) {
      const HostTensor x = randomTensor(DType::kF32, shape, rng, -5, 5);
      expectMatchesCpu(op, {&x}, {{"axis", axis}});
    }
  const HostTensor x = randomTensor(DType::kF32, {6, 33}, rng), scale = randomTensor(DType::kF32, {33}, rng);
  const HostTensor bias = randomTensor(DType::kF32, {33}, rng);
  expectMatchesCpu(OpId::layer_norm, {&x, &scale, &bias});
  const HostTensor x3 = randomTensor(DType::kF32, {2, 3, 8}, rng), scale3 = randomTensor(DType::kF32, {3, 8}, rng);
  expectMatchesCpu(OpId::layer_norm, {&x3, &scale3}, {{"axis", int64_t{1}}, {"epsilon", 1e-3}});
  const HostTensor images = randomTensor(DType::kF32, {2, 3, 4, 5}, rng);
  const HostTensor c1 = randomTensor(DType::kF32, {3}, rng), c2 = randomTensor(DType::kF32, {3}, rng);
  const HostTensor mean = randomTensor(DType::kF32, {3}, rng), var = randomTensor(DType::kF32, {3}, rng, 0.5, 2);
  expectMatchesCpu(OpId::batch_norm, {&images, &c1, &c2, &mean, &var});
}

TEST(CudaKernels, MatmulAndGemm) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(4);
  struct Case {
    Shape a, b;
    int64_t transpose_a, transpose_b;
  };
  const std::vector<Case> cases = {{{5, 7}, {7, 3}, 0, 0},       {{2, 5, 7}, {7, 3}, 0, 0},
                                   {{2, 1, 5, 7}, {3, 7, 4}, 0, 0}, {{4, 7, 5}, {4, 7, 3}, 1, 0},
                                   {{4, 5, 7}, {1, 3, 7}, 0, 1},    {{7, 5}, {2, 3, 7}, 1, 1},
                                   {{3, 65, 33}, {33, 17}, 0, 0}};
  for (const Case& c : cases) {
    const AttrMap attrs = {{"transpose_a", c.transpose_a}, {"transpose_b", c.transpose_b}};
    const HostTensor a = randomTensor(DType::kF32, c.a, rng), b = randomTensor(DType::kF32, c.b, rng);
    expectMatchesCpu(OpId::matmul, {&a, &b}, attrs);
    const HostTensor da = randomTensor(DType::kF64, c.a, rng), db = randomTensor(DType::kF64, c.b, rng);
    expectMatchesCpu(OpId::matmul, {&da, &db}, attrs, 1e-10, 1e-12);
    const HostTensor ia = randomIntTensor(DType::kI64, c.a, rng, -9, 9), ib = randomIntTensor(DType::kI64, c.b, rng, -9, 9);
    expectMatchesCpu(OpId::matmul, {&ia, &ib}, attrs);
  }
  const HostTensor a = randomTensor(DType::kF32, {6, 9}, rng), b = randomTensor(DType::kF32, {9, 4}, rng);
  const HostTensor at = randomTensor(DType::kF32, {9, 6}, rng), bt = randomTensor(DType::kF32, {4, 9}, rng);
  const HostTensor row = randomTensor(DType::kF32, {4}, rng), full = randomTensor(DType::kF32, {6, 4}, rng);
  expectMatchesCpu(OpId::gemm, {&a, &b});
  expectMatchesCpu(OpId::gemm, {&a, &b, &row}, {{"alpha", 0.5}, {"beta", 2.0}});
  expectMatchesCpu(OpId::gemm, {&at, &bt, &full}, {{"transpose_a", int64_t{1}}, {"transpose_b", int64_t{1}}});
  expectMatchesCpu(OpId::gemm, {&a, &b, &full}, {{"beta", 0.0}});
  const HostTensor ia = randomIntTensor(DType::kI32, {6, 9}, rng, -9, 9), ib = randomIntTensor(DType::kI32, {9, 4}, rng, -9, 9);
  const HostTensor irow = randomIntTensor(DType::kI32, {4}, rng, -9, 9);
  expectMatchesCpu(OpId::gemm, {&ia, &ib, &irow}, {{"alpha", 3.0}, {"beta", -2.0}});
}

// conv2d attribute sets with the shapes they fit: x [2,4,7,8], w [6,4/groups,3,3].
std::vector<AttrMap> convAttributeCases() {
  return {{},
          {{"pads", Ints{1, 1, 1, 1}}},
          {{"strides", Ints{2, 2}}, {"dilations", Ints{2, 1}}, {"pads", Ints{2, 1, 2, 1}}},
          {{"groups", int64_t{2}}, {"pads", Ints{1, 1, 1, 1}}},
          {{"pads", Ints{0, 1, 2, 0}}, {"strides", Ints{1, 2}}}};
}

TEST(CudaKernels, ConvolutionAndItsGradients) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(5);
  for (const AttrMap& attrs : convAttributeCases()) {
    const int64_t groups = attrs.count("groups") ? std::get<int64_t>(attrs.at("groups")) : 1;
    const HostTensor x = randomTensor(DType::kF32, {2, 4, 7, 8}, rng);
    const HostTensor w = randomTensor(DType::kF32, {6, 4 / groups, 3, 3}, rng);
    const HostTensor bias = randomTensor(DType::kF32, {6}, rng);
    expectMatchesCpu(OpId::conv2d, {&x, &w}, attrs);
    expectMatchesCpu(OpId::conv2d, {&x, &w, &bias}, attrs);
    const HostTensor dy = randomTensor(DType::kF32, cpuResult(OpId::conv2d, {&x, &w}, attrs).type.shape, rng);
    AttrMap input_attrs = attrs, weight_attrs = attrs;
    input_attrs["input_shape"] = Ints{2, 4, 7, 8};
    weight_attrs["weight_shape"] = w.type.shape;
    expectMatchesCpu(OpId::conv2d_grad_input, {&dy, &w}, input_attrs);
    expectMatchesCpu(OpId::conv2d_grad_weight, {&dy, &x}, weight_attrs, 1e-4, 1e-4);
    const HostTensor dx = randomTensor(DType::kF64, {2, 4, 7, 8}, rng), dw = randomTensor(DType::kF64, w.type.shape, rng);
    expectMatchesCpu(OpId::conv2d, {&dx, &dw}, attrs, 1e-10, 1e-12);
  }
}

TEST(CudaKernels, PoolsAndTheirGradients) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(6);
  const std::vector<AttrMap> cases = {
      {{"kernel", Ints{2, 2}}},
      {{"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}},
      {{"kernel", Ints{3, 2}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 0, 0, 1}}, {"ceil_mode", int64_t{1}}},
      {{"kernel", Ints{3, 3}}, {"strides", Ints{2, 1}}, {"pads", Ints{1, 1, 1, 1}}, {"count_include_pad", int64_t{1}},
       {"ceil_mode", int64_t{1}}}};
  for (const AttrMap& attrs : cases) {
    HostTensor x = randomTensor(DType::kF32, {2, 3, 9, 8}, rng);
    x.set(5, x.at(6));  // a tie: the first maximum takes the gradient
    for (OpId op : {OpId::max_pool2d, OpId::avg_pool2d}) {
      expectMatchesCpu(op, {&x}, attrs);
      const HostTensor dy = randomTensor(DType::kF32, cpuResult(op, {&x}, attrs).type.shape, rng);
      if (op == OpId::max_pool2d) {
        expectMatchesCpu(OpId::max_pool2d_grad, {&dy, &x}, attrs);
      } else {
        AttrMap grad_attrs = attrs;
        grad_attrs["input_shape"] = x.type.shape;
        expectMatchesCpu(OpId::avg_pool2d_grad, {&dy}, grad_attrs);
      }
    }
  }
  const HostTensor x = randomTensor(DType::kF32, {3, 5, 17, 13}, rng);
  expectMatchesCpu(OpId::global_avg_pool, {&x});
}

TEST(CudaKernels, ShapeAndDataMovement) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  const HostTensor x = randomTensor(DType::kF32, {2, 3, 4, 5}, rng);
  const HostTensor i = randomIntTensor(DType::kI64, {2, 3, 4, 5}, rng, -9, 9);
  expectMatchesCpu(OpId::reshape, {&x}, {{"shape", Ints{6, -1}}});
  expectMatchesCpu(OpId::flatten, {&x}, {{"axis", int64_t{2}}});
  const HostTensor with_ones = randomTensor(DType::kF32, {3, 1, 4}, rng);
  expectMatchesCpu(OpId::squeeze, {&with_ones});
  expectMatchesCpu(OpId::unsqueeze, {&x}, {{"axes", Ints{0, 5}}});
  for (const Ints& perm : {Ints{0, 2, 3, 1}, Ints{3, 2, 1, 0}, Ints{}, Ints{1, 0, 2, 3}, Ints{0, 1, 2, 3}}) {
    expectMatchesCpu(OpId::transpose, {&x}, {{"perm", perm}});
    expectMatchesCpu(OpId::transpose, {&i}, {{"perm", perm}});
  }
  const HostTensor a = randomTensor(DType::kF32, {2, 1, 5}, rng), b = randomTensor(DType::kF32, {2, 4, 5}, rng);
  expectMatchesCpu(OpId::concat, {&a, &b, &a}, {{"axis", int64_t{1}}});
  expectMatchesCpu(OpId::concat, {&b, &b}, {{"axis", int64_t{0}}});
  expectMatchesCpu(OpId::split, {&x}, {{"axis", int64_t{2}}, {"sizes", Ints{1, 0, 3}}});
  expectMatchesCpu(OpId::split, {&x}, {{"axis", int64_t{0}}, {"sizes", Ints{1, 1}}});
  expectMatchesCpu(OpId::slice, {&x}, {{"starts", Ints{1, -1}}, {"ends", Ints{3, 0}}, {"axes", Ints{1, 3}},
                                      {"steps", Ints{1, -2}}});
  expectMatchesCpu(OpId::slice, {&i}, {{"starts", Ints{0}}, {"ends", Ints{100}}, {"axes", Ints{2}}, {"steps", Ints{3}}});
  const HostTensor table = randomTensor(DType::kF32, {7, 6}, rng);
  const HostTensor indices = randomIntTensor(DType::kI64, {3, 4}, rng, -7, 6);
  const HostTensor indices32 = randomIntTensor(DType::kI32, {5}, rng, -6, 5);
  expectMatchesCpu(OpId::gather, {&table, &indices});
  expectMatchesCpu(OpId::gather, {&table, &indices32}, {{"axis", int64_t{1}}});
  const HostTensor last_axis_indices = randomIntTensor(DType::kI32, {2, 2}, rng, -5, 4);
  expectMatchesCpu(OpId::gather, {&i, &last_axis_indices}, {{"axis", int64_t{3}}});
  const HostTensor column = randomTensor(DType::kF32, {3, 1}, rng);
  expectMatchesCpu(OpId::expand, {&column}, {{"shape", Ints{2, 3, 4}}});
  const HostTensor square = randomTensor(DType::kF32, {2, 5, 6}, rng);
  for (int64_t upper : {0, 1})
    for (int64_t k : {-2, 0, 3, 100}) expectMatchesCpu(OpId::trilu, {&square}, {{"upper", upper}, {"k", k}});
  HostTensor value = randomTensor(DType::kF32, {3, 2}, rng);
  auto data = std::make_shared<TensorData>(TensorData{value.type, std::vector<uint8_t>(static_cast<size_t>(value.type.bytes()))});
  std::memcpy(data->bytes.data(), value.bytes(), data->bytes.size());
  expectMatchesCpu(OpId::constant, {}, {{"value", std::shared_ptr<const TensorData>(data)}});
}

TEST(CudaKernels, Losses) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(8);
  const HostTensor logits = randomTensor(DType::kF32, {4, 6, 11}, rng, -4, 4);
  HostTensor labels = randomIntTensor(DType::kI64, {4, 6}, rng, 0, 10);
  labels.set(3, -100);
  labels.set(7, -100);
  expectMatchesCpu(OpId::softmax_cross_entropy, {&logits, &labels});
  const HostTensor labels32 = randomIntTensor(DType::kI32, {4, 6}, rng, 0, 10);
  expectMatchesCpu(OpId::softmax_cross_entropy, {&logits, &labels32});
  const HostTensor wide = randomTensor(DType::kF32, {3, 1000}, rng, -4, 4);
  const HostTensor wide_labels = randomIntTensor(DType::kI64, {3}, rng, 0, 999);
  expectMatchesCpu(OpId::softmax_cross_entropy, {&wide, &wide_labels});
  const HostTensor dloss = randomTensor(DType::kF32, {}, rng, 0.5, 2);
  expectMatchesCpu(OpId::softmax_cross_entropy_grad, {&dloss, &logits, &labels});
  expectMatchesCpu(OpId::softmax_cross_entropy_grad, {&dloss, &wide, &wide_labels});
  for (const Shape& shape : {Shape{5}, Shape{3, 1001}, Shape{300, 700}}) {
    const HostTensor p = randomTensor(DType::kF32, shape, rng), t = randomTensor(DType::kF32, shape, rng);
    expectMatchesCpu(OpId::mse, {&p, &t});
  }
}

TEST(CudaKernels, GradientOps) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(9);
  for (const Shape& shape : {Shape{7}, Shape{4, 37}, Shape{3, 5, 7}}) {
    const HostTensor dy = randomTensor(DType::kF32, shape, rng), x = randomTensor(DType::kF32, shape, rng, -3, 3);
    for (OpId op : {OpId::relu_grad, OpId::gelu_grad, OpId::tanh_grad, OpId::sigmoid_grad})
      expectMatchesCpu(op, {&dy, &x});
    expectMatchesCpu(OpId::gelu_grad, {&dy, &x}, {{"approximate", std::string("tanh")}});
    for (int64_t axis : {int64_t{0}, int64_t{-1}}) {
      const HostTensor y = cpuResult(OpId::softmax, {&x}, {{"axis", axis}});
      expectMatchesCpu(OpId::softmax_grad, {&dy, &y}, {{"axis", axis}});
      const HostTensor log_y = cpuResult(OpId::log_softmax, {&x}, {{"axis", axis}});
      expectMatchesCpu(OpId::log_softmax_grad, {&dy, &log_y}, {{"axis", axis}});
    }
  }
  const HostTensor dy = randomTensor(DType::kF32, {6, 4, 33}, rng), x = randomTensor(DType::kF32, {6, 4, 33}, rng);
  const HostTensor scale = randomTensor(DType::kF32, {33}, rng), scale2 = randomTensor(DType::kF32, {4, 33}, rng);
  expectMatchesCpu(OpId::layer_norm_grad, {&dy, &x, &scale}, {}, 1e-4, 1e-4);
  expectMatchesCpu(OpId::layer_norm_grad, {&dy, &x, &scale2}, {{"axis", int64_t{1}}}, 1e-4, 1e-4);
  const HostTensor indices = randomIntTensor(DType::kI64, {3, 4}, rng, -7, 6);
  const HostTensor gathered_dy = randomTensor(DType::kF32, {3, 4, 6}, rng);
  expectMatchesCpu(OpId::gather_grad, {&gathered_dy, &indices}, {{"data_shape", Ints{7, 6}}});
  const HostTensor indices32 = randomIntTensor(DType::kI32, {5}, rng, -6, 5);
  const HostTensor column_dy = randomTensor(DType::kF32, {7, 5}, rng);
  expectMatchesCpu(OpId::gather_grad, {&column_dy, &indices32}, {{"data_shape", Ints{7, 6}}, {"axis", int64_t{1}}});
  const AttrMap slice_attrs = {{"starts", Ints{1, -1}}, {"ends", Ints{3, 0}}, {"axes", Ints{1, 3}}, {"steps", Ints{1, -2}}};
  const HostTensor whole = randomTensor(DType::kF32, {2, 3, 4, 5}, rng);
  const HostTensor sliced = cpuResult(OpId::slice, {&whole}, slice_attrs);
  AttrMap slice_grad_attrs = slice_attrs;
  slice_grad_attrs["input_shape"] = whole.type.shape;
  expectMatchesCpu(OpId::slice_grad, {&sliced}, slice_grad_attrs);
}

TEST(CudaKernels, OptimizerUpdates) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(10);
  const Shape shape = {1031};
  const HostTensor w = randomTensor(DType::kF32, shape, rng), g = randomTensor(DType::kF32, shape, rng);
  const HostTensor buffer = randomTensor(DType::kF32, shape, rng);
  const HostTensor m = randomTensor(DType::kF32, shape, rng), v = randomTensor(DType::kF32, shape, rng, 0, 1);
  for (int64_t taken : {0, 3}) {
    const HostTensor step = kernel_test::makeTensor(DType::kI64, {}, {static_cast<double>(taken)});
    // f32 sgd: the same operations with fused multiply-adds in the same places: bitwise equal.
    expectMatchesCpu(OpId::sgd_update, {&w, &g, &step}, {{"lr", 0.1}}, 0, 0);
    expectMatchesCpu(OpId::sgd_update, {&w, &g, &step}, {{"lr", 0.1}, {"weight_decay", 0.01}}, 0, 0);
    expectMatchesCpu(OpId::sgd_update, {&w, &g, &step, &buffer},
                     {{"lr", 0.05}, {"momentum", 0.9}, {"dampening", 0.1}, {"weight_decay", 0.001}}, 0, 0);
    expectMatchesCpu(OpId::sgd_update, {&w, &g, &step, &buffer},
                     {{"lr", 0.05}, {"momentum", 0.9}, {"nesterov", int64_t{1}}}, 0, 0);
    expectMatchesCpu(OpId::adamw_update, {&w, &g, &m, &v, &step}, {}, 1e-6, 1e-7);
    expectMatchesCpu(OpId::adamw_update, {&w, &g, &m, &v, &step}, {{"lr", 0.01}, {"weight_decay", 0.1}}, 1e-6, 1e-7);
    const HostTensor dw = randomTensor(DType::kF64, shape, rng), dg = randomTensor(DType::kF64, shape, rng);
    const HostTensor dm = randomTensor(DType::kF64, shape, rng), dv = randomTensor(DType::kF64, shape, rng, 0, 1);
    expectMatchesCpu(OpId::adamw_update, {&dw, &dg, &dm, &dv, &step}, {}, 1e-13, 1e-15);
  }
}

}  // namespace
}  // namespace cleave::runtime
