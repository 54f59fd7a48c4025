// Model generators: build GPT, MLP and CNN graphs from a few sizes, with seeded initializers.
//
// Conventions shared by every generator:
// - Linear layers store their weight as [out, in] (PyTorch's layout) and apply it with
//   `matmul(x, weight) {transpose_b = 1}`, then `add` the bias [out]; an imported PyTorch model
//   and a generated one therefore look alike. Convolution weights are [out, in, kh, kw].
// - Parameters carry shapes and initializers, never data, so a 175B-parameter graph is cheap.
//   Initializers follow PyTorch's defaults: Linear and Conv weights kaiming_uniform {a = sqrt(5)},
//   their biases uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)); GPT embeddings normal {std = 0.02}
//   (GPT-2's); layer norm scale ones, bias zeros.
// - Every random initializer has its own `seed`: base_seed * kSeedsPerModel + parameter index.
// - Value names are what users see in plans: `h0.attn.qkv.weight`, `h0.attn.q`, `fc1.out`.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Seeds of one model's parameters are base_seed * kSeedsPerModel + index, so they never collide.
constexpr int64_t kSeedsPerModel = 1'000'000;
// The largest base seed whose derived seeds still fit in an int64.
constexpr int64_t kMaxBaseSeed = (INT64_MAX / kSeedsPerModel) - 1;

// Sizes of a GPT-style decoder: token + position embeddings, pre-norm blocks, final norm, head.
struct GptSpec {
  int64_t layers = 4;
  int64_t hidden = 256;
  int64_t heads = 4;
  int64_t seq = 64;     // sequence length S (the position table has S rows)
  int64_t vocab = 1024;
  int64_t batch = 8;
  int64_t ffn = 0;      // MLP width; 0 means 4 * hidden
  int64_t seed = 0;     // base seed for the parameter initializers
  // Llama's RMSNorm instead of layer norm (weight ones, no bias), written as PyTorch exports it:
  // pow(x, 2), reduce_mean over the last dim, add 1e-6, sqrt, div(1, .), mul by x, mul by the weight.
  bool rms_norm = false;
  // GELU as PyTorch's ONNX exports write it below opset 20 (nn.GELU in BERT, ViT, Whisper):
  // div(x, √2), erf, add 1, mul by 0.5, mul by x, the constants scalars.
  bool exported_gelu = false;
};

// Sizes of a multilayer perceptron with relu between layers (default 784-512-512-10).
struct MlpSpec {
  int64_t input = 784;
  std::vector<int64_t> hidden = {512, 512};
  int64_t classes = 10;
  int64_t batch = 128;
  int64_t seed = 0;
};

// Sizes of the Fashion-MNIST benchmark convnet (two 5x5 convs with max pooling, two dense layers).
struct CnnSpec {
  int64_t batch = 64;
  int64_t channels = 1;
  int64_t height = 28;  // must be a multiple of 4 (two 2x2 poolings)
  int64_t width = 28;
  int64_t classes = 10;
  int64_t seed = 0;
};

// A GPT decoder: input `tokens : i64[B,S]`, output `logits : f32[B,S,V]`. Bad sizes are kBadInput.
Expected<Graph> generateGpt(const GptSpec& spec);
// An MLP: input `x : f32[B,input]`, output `logits : f32[B,classes]`.
Expected<Graph> generateMlp(const MlpSpec& spec);
// The Fashion-MNIST convnet: input `x : f32[B,C,H,W]`, output `logits : f32[B,classes]`.
Expected<Graph> generateCnn(const CnnSpec& spec);

}  // namespace cleave
