// Fused kernels' code generation: the host JIT's results and cache, and PTX for the GPU checked by
// ptxas for sm_90 (the H100/H200 architecture; no GPU needed), skipped where CUDA is not installed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "ir/op_table.h"
#include "runtime/codegen/cpu_jit.h"
#include "runtime/codegen/fused_kernel_ir.h"
#include "runtime/codegen/ptx_compiler.h"

namespace cleave::runtime::codegen {
namespace {

// A fused node's context: its body and operand types (results from the shape rule).
struct FusedNode {
  std::vector<TensorType> operands;
  AttrMap attrs;
  std::vector<TensorType> results;

  FusedNode(std::vector<TensorType> operand_types, const std::string& body)
      : operands(std::move(operand_types)), attrs{{"body", body}} {
    auto types = inferResultTypes(opDef(OpId::fused), operands, attrs);
    EXPECT_TRUE(types) << types.status().message();
    if (types) results = *types;
  }
  OpContext context() const { return OpContext{opDef(OpId::fused), operands, results, attrs}; }
};

const TensorType kRows{DType::kF32, {64, 256}};
const TensorType kBias{DType::kF32, {256}};

TEST(FusedKernelSpec, MergesDimsThatStepTogetherAndKeepsBroadcastOnes) {
  FusedNode bias({{DType::kF32, {8, 64, 256}}, kBias}, "t0 = add(x0, x1); t1 = gelu(t0); return t1");
  auto spec = fusedKernelSpec(bias.context());
  ASSERT_TRUE(spec) << spec.status().message();
  EXPECT_EQ(spec->dims, (std::vector<int64_t>{512, 256}));
  EXPECT_EQ(spec->operand_strides[0], (std::vector<int64_t>{256, 1}));
  EXPECT_EQ(spec->operand_strides[1], (std::vector<int64_t>{0, 1}));
  FusedNode column({{DType::kF32, {4, 1, 5}}, {DType::kF32, {3, 1}}}, "t0 = mul(x0, x1); return t0");
  spec = fusedKernelSpec(column.context());
  ASSERT_TRUE(spec) << spec.status().message();
  EXPECT_EQ(spec->dims, (std::vector<int64_t>{4, 3, 5}));
  EXPECT_EQ(spec->operand_strides[0], (std::vector<int64_t>{5, 0, 1}));
  EXPECT_EQ(spec->operand_strides[1], (std::vector<int64_t>{0, 1, 0}));
  // Ending along the last axis, rows stay rows: the last dim is never merged, even of size 1.
  FusedNode softmax({{DType::kF32, {8, 64, 32}}}, "t0 = exp(x0); t1 = softmax(t0); return t1");
  spec = fusedKernelSpec(softmax.context());
  ASSERT_TRUE(spec) << spec.status().message();
  EXPECT_TRUE(spec->along_last_axis);
  EXPECT_EQ(spec->dims, (std::vector<int64_t>{512, 32}));
  FusedNode single({{DType::kF32, {6, 1}}}, "t0 = exp(x0); t1 = softmax(t0); return t1");
  spec = fusedKernelSpec(single.context());
  ASSERT_TRUE(spec) << spec.status().message();
  EXPECT_EQ(spec->dims, (std::vector<int64_t>{6, 1}));
}

TEST(HostFusedKernel, CompilesOncePerBodyAndTypes) {
  FusedNode node({kRows, kBias}, "t0 = add(x0, x1); t1 = relu(t0); return t1");
  const int64_t before = hostFusedKernelsCompiled();
  auto first = hostFusedKernel(node.context());
  ASSERT_TRUE(first) << first.status().message();
  auto again = hostFusedKernel(node.context());
  ASSERT_TRUE(again);
  EXPECT_EQ(first->function, again->function);
  EXPECT_EQ(hostFusedKernelsCompiled(), before + 1);
  // Partial ranges: elements [3, 300) only.
  std::vector<float> x(64 * 256), b(256), y(64 * 256, -7.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 13) - 6.0f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.5f * static_cast<float>(i % 3);
  const void* inputs[] = {x.data(), b.data()};
  void* outputs[] = {y.data()};
  EXPECT_EQ(first->row_length, 0);
  first->function(inputs, outputs, 3, 300);
  for (size_t i = 0; i < y.size(); ++i) {
    const float expected = i < 3 || i >= 300 ? -7.0f : std::max(0.0f, x[i] + b[i % 256]);
    ASSERT_EQ(y[i], expected) << "element " << i;
  }
}

// PTX for a fused node, written to a file for ptxas.
std::string ptxFile(const FusedNode& node, const std::string& name) {
  auto ptx = fusedKernelPtx(node.context(), "cleave_fused");
  EXPECT_TRUE(ptx) << ptx.status().message();
  if (!ptx) return "";
  EXPECT_NE(ptx->find(".entry cleave_fused"), std::string::npos) << *ptx;
  EXPECT_NE(ptx->find(".target sm_80"), std::string::npos);
  const std::string path = ::testing::TempDir() + name + ".ptx";
  std::ofstream(path) << *ptx;
  return path;
}

TEST(FusedKernelPtx, PtxasCompilesItForSm90) {
  const std::vector<FusedNode> nodes = {
      FusedNode({kRows, kBias}, "t0 = add(x0, x1); t1 = gelu(t0)[approximate=tanh]; t2 = mul(t1, 0.5); return t2"),
      FusedNode({kRows, kRows}, "t0 = gelu_grad(x0, x1); t1 = sigmoid(t0); t2 = erf(t1); t3 = pow(t2, 3); "
                                "t4 = pow(t3, -0.5); t5 = clip(t4)[min=-1, max=1]; return t5, t0"),
      FusedNode({{DType::kBF16, {4, 1, 5}}, {DType::kBF16, {3, 1}}}, "t0 = mul(x0, x1); t1 = exp(t0); return t1"),
      FusedNode({{DType::kF32, {2, 4, 64, 64}}, {DType::kF32, {1, 1, 64, 64}}},
                "t0 = mul(x0, 0.125); t1 = add(t0, x1); t2 = softmax(t1); return t1, t2"),
      FusedNode({{DType::kF32, {16, 300}}, {DType::kF32, {16, 300}}, {DType::kF32, {300}}, {DType::kF32, {300}}},
                "t0 = add(x0, x1); t1 = layer_norm(t0, x2, x3)[epsilon=1e-05]; return t0, t1"),
      FusedNode({kRows, kRows}, "t0 = gelu_grad(x0, x1); t1 = reduce_sum(t0)[axes=[0], keepdims=0]; return t0, t1"),
      FusedNode({{DType::kF32, {16, 300}}, {DType::kF32, {16, 300}}, {DType::kF32, {300}}},
                "t0 = add(x0, x1); t1 = rms_norm(t0, x2)[epsilon=1e-06]; return t0, t1"),
  };
  std::vector<std::string> files;
  for (size_t n = 0; n < nodes.size(); ++n) files.push_back(ptxFile(nodes[n], "fused_" + std::to_string(n)));
  // Rows along the last axis go to warps, whose lanes combine their maximum and sum by shuffles;
  // elementwise kernels have no shuffles.
  auto softmax = fusedKernelPtx(nodes[3].context(), "cleave_fused");
  ASSERT_TRUE(softmax) << softmax.status().message();
  EXPECT_NE(softmax->find("shfl.sync.bfly.b32"), std::string::npos) << *softmax;
  auto layer_norm = fusedKernelPtx(nodes[4].context(), "cleave_fused");
  ASSERT_TRUE(layer_norm) << layer_norm.status().message();
  EXPECT_NE(layer_norm->find("shfl.sync.bfly.b32"), std::string::npos);
  EXPECT_NE(layer_norm->find("sqrt.rn.f64"), std::string::npos);
  auto rms_norm = fusedKernelPtx(nodes[6].context(), "cleave_fused");
  ASSERT_TRUE(rms_norm) << rms_norm.status().message();
  EXPECT_NE(rms_norm->find("shfl.sync.bfly.b32"), std::string::npos);
  EXPECT_NE(rms_norm->find("sqrt.rn.f64"), std::string::npos);
  auto elementwise = fusedKernelPtx(nodes[0].context(), "cleave_fused");
  ASSERT_TRUE(elementwise) << elementwise.status().message();
  EXPECT_EQ(elementwise->find("shfl.sync"), std::string::npos);
  // A column sum is no parameter of the GPU kernel (the launcher sums the returned tensor): two
  // operands, one result and the count.
  auto column_sum = fusedKernelPtx(nodes[5].context(), "cleave_fused");
  ASSERT_TRUE(column_sum) << column_sum.status().message();
  EXPECT_NE(column_sum->find("cleave_fused_param_3"), std::string::npos) << *column_sum;
  EXPECT_EQ(column_sum->find("cleave_fused_param_4"), std::string::npos) << *column_sum;
  // layer_norm_grad has no GPU code yet: an error that says so (the CUDA launcher runs the steps
  // before it as a fused kernel of their own, then layer_norm_grad's kernel).
  FusedNode norm_gradient({kRows, kRows, {DType::kF32, {kRows.shape.back()}}},
                          "t0 = neg(x0); t1, t2, t3 = layer_norm_grad(t0, x1, x2); return t1, t2, t3");
  auto no_ptx = fusedKernelPtx(norm_gradient.context(), "cleave_fused");
  ASSERT_FALSE(no_ptx);
  EXPECT_NE(no_ptx.status().message().find("layer_norm_grad has no GPU code yet"), std::string::npos)
      << no_ptx.status().message();
  FusedNode rms_gradient({kRows, kRows, {DType::kF32, {kRows.shape.back()}}},
                         "t0 = neg(x0); t1, t2 = rms_norm_grad(t0, x1, x2); return t1, t2");
  auto no_rms_ptx = fusedKernelPtx(rms_gradient.context(), "cleave_fused");
  ASSERT_FALSE(no_rms_ptx);
  EXPECT_NE(no_rms_ptx.status().message().find("rms_norm_grad has no GPU code yet"), std::string::npos)
      << no_rms_ptx.status().message();
  // Nor a lone column sum: the launcher runs reduce_sum's kernel over its operand.
  FusedNode lone_sum({kRows}, "t0 = reduce_sum(x0)[axes=[0], keepdims=0]; return t0");
  auto no_sum_ptx = fusedKernelPtx(lone_sum.context(), "cleave_fused");
  ASSERT_FALSE(no_sum_ptx);
  EXPECT_NE(no_sum_ptx.status().message().find("lone column sum"), std::string::npos) << no_sum_ptx.status().message();
  // Nor a total sum: the launcher runs its chain as a fused kernel (assembled below), then reduce_sum's.
  FusedNode total_sum({kRows}, "t0 = mul(x0, x0); t1 = reduce_sum(t0)[keepdims=0]; return t1");
  auto no_total_ptx = fusedKernelPtx(total_sum.context(), "cleave_fused");
  ASSERT_FALSE(no_total_ptx);
  EXPECT_NE(no_total_ptx.status().message().find("total sum"), std::string::npos) << no_total_ptx.status().message();
  files.push_back(ptxFile(FusedNode({kRows}, "t0 = mul(x0, x0); return t0"), "fused_total_sum_chain"));
  // A general power calls libdevice's __nv_powf, linked in from CUDA's toolkit (where there is one;
  // without it the error says what is missing).
  FusedNode general({kRows, kRows}, "t0 = pow(x0, x1); t1 = pow(t0, 1.7); return t1");
  auto ptx = fusedKernelPtx(general.context(), "cleave_fused");
  if (std::ifstream("/usr/local/cuda/nvvm/libdevice/libdevice.10.bc")) {
    files.push_back(ptxFile(general, "fused_pow"));
  } else {
    ASSERT_FALSE(ptx);
    EXPECT_NE(ptx.status().message().find("libdevice"), std::string::npos) << ptx.status().message();
  }

  const std::string ptxas = CLEAVE_PTXAS;
  if (ptxas.empty()) GTEST_SKIP() << "no ptxas (CUDA is not installed): PTX generated, not assembled";
  for (const std::string& file : files) {
    if (file.empty()) continue;
    const std::string command = ptxas + " -arch=sm_90 " + file + " -o " + file + ".cubin 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
  }
}

}  // namespace
}  // namespace cleave::runtime::codegen
