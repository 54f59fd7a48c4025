// Tests for the model generators: graphs verify, sizes and names are right, seeds are distinct.
#include "frontend/model_generators.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "ir/verifier.h"
#include "passes/fusion/gelu_recognition.h"
#include "passes/fusion/rms_norm.h"

namespace cleave {
namespace {

const Param& paramNamed(const Graph& graph, const std::string& name) {
  ValueId v = graph.findValue(name);
  EXPECT_NE(v, kNoValue) << name;
  const Param* param = graph.findParam(v);
  EXPECT_NE(param, nullptr) << name << " is not a parameter";
  static const Param kMissing;
  return param ? *param : kMissing;
}

TensorType typeOf(const Graph& graph, const std::string& name) {
  ValueId v = graph.findValue(name);
  EXPECT_NE(v, kNoValue) << name;
  return v == kNoValue ? TensorType{} : graph.values[v].type;
}

double arg(const Initializer& init, const std::string& name) {
  auto it = init.args.find(name);
  EXPECT_NE(it, init.args.end()) << init.kind << " has no '" << name << "'";
  return it == init.args.end() ? NAN : std::get<double>(it->second);
}

// The nodes of `graph` that are `op`.
int64_t countOps(const Graph& graph, OpId op) {
  return std::count_if(graph.nodes.begin(), graph.nodes.end(), [&](const Node& n) { return n.op == op; });
}

TEST(ModelGenerators, MlpHasThePyTorchShapeAndParameterCount) {
  auto graph = generateMlp(MlpSpec{});
  ASSERT_TRUE(graph) << graph.status().message();
  ASSERT_TRUE(verifyGraph(*graph).isOk()) << verifyGraph(*graph).message();
  // 784*512 + 512 + 512*512 + 512 + 512*10 + 10
  EXPECT_EQ(graph->parameterCount(), 669706);
  ASSERT_EQ(graph->inputs.size(), 1u);
  EXPECT_EQ(graph->values[graph->inputs[0]].name, "x");
  EXPECT_EQ(graph->values[graph->inputs[0]].type, (TensorType{DType::kF32, {128, 784}}));
  ASSERT_EQ(graph->outputs.size(), 1u);
  EXPECT_EQ(graph->values[graph->outputs[0]].name, "logits");
  EXPECT_EQ(graph->values[graph->outputs[0]].type, (TensorType{DType::kF32, {128, 10}}));
  // PyTorch layout [out, in] and nn.Linear's default initializers.
  EXPECT_EQ(typeOf(*graph, "fc1.weight"), (TensorType{DType::kF32, {512, 784}}));
  const Param& weight = paramNamed(*graph, "fc1.weight");
  EXPECT_EQ(weight.init.kind, "kaiming_uniform");
  EXPECT_DOUBLE_EQ(arg(weight.init, "a"), std::sqrt(5.0));
  const Param& bias = paramNamed(*graph, "fc1.bias");
  EXPECT_EQ(bias.init.kind, "uniform");
  EXPECT_DOUBLE_EQ(arg(bias.init, "high"), 1.0 / std::sqrt(784.0));
  EXPECT_DOUBLE_EQ(arg(bias.init, "low"), -1.0 / std::sqrt(784.0));
  EXPECT_DOUBLE_EQ(arg(paramNamed(*graph, "fc3.bias").init, "high"), 1.0 / std::sqrt(512.0));
}

TEST(ModelGenerators, MlpHiddenWidthsAreConfigurable) {
  MlpSpec spec;
  spec.hidden = {100};
  spec.batch = 4;
  auto graph = generateMlp(spec);
  ASSERT_TRUE(graph) << graph.status().message();
  ASSERT_TRUE(verifyGraph(*graph).isOk());
  EXPECT_EQ(graph->parameterCount(), 784 * 100 + 100 + 100 * 10 + 10);
  EXPECT_EQ(typeOf(*graph, "fc2.weight"), (TensorType{DType::kF32, {10, 100}}));
}

TEST(ModelGenerators, CnnIsTheFashionMnistConvnet) {
  auto graph = generateCnn(CnnSpec{});
  ASSERT_TRUE(graph) << graph.status().message();
  ASSERT_TRUE(verifyGraph(*graph).isOk()) << verifyGraph(*graph).message();
  // conv1 32*1*5*5 + 32, conv2 64*32*5*5 + 64, fc1 3136*1024 + 1024, fc2 1024*10 + 10
  EXPECT_EQ(graph->parameterCount(), 832 + 51264 + 3212288 + 10250);
  EXPECT_EQ(graph->values[graph->inputs[0]].type, (TensorType{DType::kF32, {64, 1, 28, 28}}));
  EXPECT_EQ(typeOf(*graph, "conv1.out"), (TensorType{DType::kF32, {64, 32, 28, 28}}));  // "same" padding
  EXPECT_EQ(typeOf(*graph, "pool2.out"), (TensorType{DType::kF32, {64, 64, 7, 7}}));
  EXPECT_EQ(typeOf(*graph, "flatten.out"), (TensorType{DType::kF32, {64, 3136}}));
  EXPECT_EQ(typeOf(*graph, "logits"), (TensorType{DType::kF32, {64, 10}}));
  // Conv bias bound is 1/sqrt(fan_in) with fan_in = in_channels * kh * kw, as PyTorch.
  EXPECT_DOUBLE_EQ(arg(paramNamed(*graph, "conv2.bias").init, "high"), 1.0 / std::sqrt(32.0 * 25.0));
}

TEST(ModelGenerators, SmallGptHasNamedValuesAndTheRightParameterCount) {
  GptSpec spec{.layers = 2, .hidden = 64, .heads = 4, .seq = 16, .vocab = 100, .batch = 2};
  auto graph = generateGpt(spec);
  ASSERT_TRUE(graph) << graph.status().message();
  ASSERT_TRUE(verifyGraph(*graph).isOk()) << verifyGraph(*graph).message();
  // wte 100*64 + wpe 16*64 + 2 layers * (ln1 128 + q, k, v 3*(64*64+64) + proj 64*64+64 + ln2 128
  //   + fc1 256*64+256 + fc2 64*256+64 = 49,984) + ln_f 128 + lm_head 100*64
  EXPECT_EQ(graph->parameterCount(), 6400 + 1024 + 2 * 49984 + 128 + 6400);
  EXPECT_EQ(graph->values[graph->inputs[0]].name, "tokens");
  EXPECT_EQ(graph->values[graph->inputs[0]].type, (TensorType{DType::kI64, {2, 16}}));
  EXPECT_EQ(typeOf(*graph, "logits"), (TensorType{DType::kF32, {2, 16, 100}}));
  EXPECT_EQ(typeOf(*graph, "h0.attn.k.weight"), (TensorType{DType::kF32, {64, 64}}));
  EXPECT_EQ(typeOf(*graph, "h1.attn.q"), (TensorType{DType::kF32, {2, 4, 16, 16}}));
  EXPECT_EQ(typeOf(*graph, "h1.attn.probs"), (TensorType{DType::kF32, {2, 4, 16, 16}}));
  EXPECT_EQ(typeOf(*graph, "h1.mlp.fc1.out"), (TensorType{DType::kF32, {2, 16, 256}}));
  EXPECT_EQ(typeOf(*graph, "attn.causal_mask"), (TensorType{DType::kF32, {16, 16}}));
  EXPECT_EQ(paramNamed(*graph, "wte.weight").init.kind, "normal");
  EXPECT_DOUBLE_EQ(arg(paramNamed(*graph, "wte.weight").init, "std"), 0.02);
  EXPECT_EQ(paramNamed(*graph, "h0.ln1.weight").init.kind, "ones");
  EXPECT_EQ(paramNamed(*graph, "h0.ln1.bias").init.kind, "zeros");
  EXPECT_EQ(graph->findValue("lm_head.bias"), kNoValue);
}

// --rms-norm writes each of the 5 norms as PyTorch exports Llama's RMSNorm (a weight, no bias),
// which the rms-norm pass then recognises, every one.
TEST(ModelGenerators, GptWithRmsNormWritesTheExportedFormThatRmsNormFusionRecognises) {
  GptSpec spec{.layers = 2, .hidden = 64, .heads = 4, .seq = 16, .vocab = 100, .batch = 2, .rms_norm = true};
  auto graph = generateGpt(spec);
  ASSERT_TRUE(graph) << graph.status().message();
  ASSERT_TRUE(verifyGraph(*graph).isOk()) << verifyGraph(*graph).message();
  EXPECT_EQ(countOps(*graph, OpId::reduce_mean), 5);
  EXPECT_EQ(countOps(*graph, OpId::layer_norm), 0);
  EXPECT_EQ(graph->findValue("h0.ln1.bias"), kNoValue);
  EXPECT_EQ(paramNamed(*graph, "h0.ln1.weight").init.kind, "ones");
  auto fused = fuseRmsNorms(*graph);
  ASSERT_TRUE(fused) << fused.status().message();
  EXPECT_EQ(*fused, 5);
  EXPECT_EQ(countOps(*graph, OpId::rms_norm), 5);
  EXPECT_EQ(typeOf(*graph, "ln_f.out"), (TensorType{DType::kF32, {2, 16, 64}}));
}

// --exported-gelu writes each GELU as PyTorch's exports below opset 20 do, which the gelu pass then
// recognises, every one.
TEST(ModelGenerators, GptWithExportedGeluWritesTheFormThatGeluRecognitionRecognises) {
  GptSpec spec{.layers = 2, .hidden = 64, .heads = 4, .seq = 16, .vocab = 100, .batch = 2, .exported_gelu = true};
  auto graph = generateGpt(spec);
  ASSERT_TRUE(graph) << graph.status().message();
  ASSERT_TRUE(verifyGraph(*graph).isOk()) << verifyGraph(*graph).message();
  EXPECT_EQ(countOps(*graph, OpId::erf), 2);
  EXPECT_EQ(countOps(*graph, OpId::gelu), 0);
  auto fused = fuseGelus(*graph);
  ASSERT_TRUE(fused) << fused.status().message();
  EXPECT_EQ(*fused, 2);
  EXPECT_EQ(countOps(*graph, OpId::gelu), 2);
  EXPECT_EQ(typeOf(*graph, "h1.mlp.gelu"), (TensorType{DType::kF32, {2, 16, 256}}));
}

TEST(ModelGenerators, RandomInitializersHaveDistinctDeterministicSeeds) {
  GptSpec spec{.layers = 3, .hidden = 32, .heads = 2, .seq = 8, .vocab = 50, .batch = 1, .seed = 7};
  auto first = generateGpt(spec);
  auto again = generateGpt(spec);
  spec.seed = 8;
  auto reseeded = generateGpt(spec);
  ASSERT_TRUE(first && again && reseeded);
  std::set<int64_t> seeds, reseeded_seeds;
  for (size_t i = 0; i < first->params.size(); ++i) {
    const Initializer& init = first->params[i].init;
    auto seed = init.args.find("seed");
    if (init.kind == "ones" || init.kind == "zeros") {
      EXPECT_EQ(seed, init.args.end()) << first->values[first->params[i].value].name;
      continue;
    }
    ASSERT_NE(seed, init.args.end()) << first->values[first->params[i].value].name;
    EXPECT_TRUE(seeds.insert(std::get<int64_t>(seed->second)).second) << "seed used twice";
    EXPECT_TRUE(attrEquals(seed->second, again->params[i].init.args.at("seed")));
    reseeded_seeds.insert(std::get<int64_t>(reseeded->params[i].init.args.at("seed")));
  }
  EXPECT_GT(seeds.size(), 10u);
  for (int64_t s : reseeded_seeds) EXPECT_EQ(seeds.count(s), 0u) << "base seeds 7 and 8 share seed " << s;
}

TEST(ModelGenerators, Gpt3ShapeBuildsAndVerifiesQuickly) {
  GptSpec spec{.layers = 96, .hidden = 12288, .heads = 96, .seq = 2048, .vocab = 50257, .batch = 8};
  auto start = std::chrono::steady_clock::now();
  auto graph = generateGpt(spec);
  ASSERT_TRUE(graph) << graph.status().message();
  Status verified = verifyGraph(*graph);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(verified.isOk()) << verified.message();
  // 2 * 50257*12288 + 2048*12288 + 96 * (12*12288^2 + 13*12288) + 2*12288
  EXPECT_EQ(graph->parameterCount(), int64_t{175221817344});
  EXPECT_LT(seconds, 2.0);
}

TEST(ModelGenerators, BadSizesAreBadInputNamingTheSize) {
  auto uneven = generateGpt(GptSpec{.layers = 1, .hidden = 100, .heads = 3});
  ASSERT_FALSE(uneven);
  EXPECT_EQ(uneven.status().kind(), ErrorKind::kBadInput);
  EXPECT_NE(uneven.status().message().find("multiple of heads"), std::string::npos);

  auto no_layers = generateGpt(GptSpec{.layers = 0});
  ASSERT_FALSE(no_layers);
  EXPECT_NE(no_layers.status().message().find("layers"), std::string::npos);

  auto huge = generateGpt(GptSpec{.heads = 1, .seq = int64_t{1} << 30, .batch = 1 << 20});
  ASSERT_FALSE(huge);
  EXPECT_NE(huge.status().message().find("elements"), std::string::npos);

  MlpSpec mlp;
  mlp.hidden = {512, 0};
  auto zero_width = generateMlp(mlp);
  ASSERT_FALSE(zero_width);
  EXPECT_NE(zero_width.status().message().find("hidden width"), std::string::npos);

  auto odd_image = generateCnn(CnnSpec{.height = 30});
  ASSERT_FALSE(odd_image);
  EXPECT_NE(odd_image.status().message().find("multiples of 4"), std::string::npos);

  auto negative_seed = generateCnn(CnnSpec{.seed = -1});
  ASSERT_FALSE(negative_seed);
  EXPECT_NE(negative_seed.status().message().find("seed"), std::string::npos);
}

}  // namespace
}  // namespace cleave
