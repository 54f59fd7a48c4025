// Model generators: GPT, MLP and CNN graphs built op by op with readable value names.
#include "frontend/model_generators.h"

#include <cmath>
#include <initializer_list>
#include <memory>
#include <numbers>
#include <string>
#include <utility>

namespace cleave {
namespace {

// The most elements one tensor may have: every count stays exact in a double and an int64.
constexpr double kMaxElements = 9007199254740992.0;  // 2^53
// The most layers a generated model may have; keeps its parameter count, and so its derived
// seeds, well under kSeedsPerModel.
constexpr int64_t kMaxLayers = 10'000;

// Initializers as PyTorch's defaults; GraphBuilder adds each random one's seed.
Initializer kaimingUniformWeight() { return Initializer{"kaiming_uniform", {{"a", std::sqrt(5.0)}}, nullptr}; }
Initializer uniformBias(int64_t fan_in) {
  double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  return Initializer{"uniform", {{"low", -bound}, {"high", bound}}, nullptr};
}
Initializer normalInit(double std_dev) { return Initializer{"normal", {{"std", std_dev}}, nullptr}; }
Initializer onesInit() { return Initializer{"ones", {}, nullptr}; }
Initializer zerosInit() { return Initializer{"zeros", {}, nullptr}; }

bool isRandom(const Initializer& init) {
  return init.kind == "normal" || init.kind == "uniform" || init.kind == "xavier_uniform" ||
         init.kind == "xavier_normal" || init.kind == "kaiming_uniform" || init.kind == "kaiming_normal";
}

TensorType f32(Shape shape) { return TensorType{DType::kF32, std::move(shape)}; }

// Builds a graph op by op. It keeps the first error and turns later calls into no-ops, so model
// code reads as straight-line math; finish() reports that error.
class GraphBuilder {
 public:
  GraphBuilder(std::string graph_name, int64_t base_seed) : base_seed_(base_seed) { graph_.name = std::move(graph_name); }

  ValueId input(const std::string& name, TensorType type) { return keep(graph_.addInput(name, std::move(type))); }

  // Adds a parameter; a random initializer gets the seed base_seed * kSeedsPerModel + index.
  ValueId param(const std::string& name, Shape shape, Initializer init) {
    if (isRandom(init))
      init.args["seed"] = base_seed_ * kSeedsPerModel + static_cast<int64_t>(graph_.params.size());
    return keep(graph_.addParam(name, f32(std::move(shape)), std::move(init)));
  }

  // Adds a one-result node named `name`.
  ValueId op(OpId op_id, std::vector<ValueId> operands, const std::string& name, AttrMap attrs = {}) {
    return ops(op_id, std::move(operands), {name}, std::move(attrs)).front();
  }

  // Adds a node with several results named `names` (kNoValue for each after an error).
  std::vector<ValueId> ops(OpId op_id, std::vector<ValueId> operands, std::vector<std::string> names,
                           AttrMap attrs = {}) {
    const size_t count = names.size();
    if (!status_.isOk()) return std::vector<ValueId>(count, kNoValue);
    auto results = graph_.addNode(op_id, std::move(operands), std::move(attrs), SourceLoc{}, std::move(names));
    if (!results) {
      status_ = results.status();
      return std::vector<ValueId>(count, kNoValue);
    }
    return std::move(results).value();
  }

  // A `constant` node holding the f32 scalar `number`.
  ValueId scalar(const std::string& name, float number) {
    auto data = std::make_shared<TensorData>();
    data->type = f32({});
    data->bytes.resize(sizeof(float));
    *data->as<float>() = number;
    return op(OpId::constant, {}, name, {{"value", std::shared_ptr<const TensorData>(std::move(data))}});
  }

  // x @ weight^T + bias with weight [out, in] (PyTorch's nn.Linear); `prefix.weight`, `prefix.bias`.
  ValueId linear(const std::string& prefix, ValueId x, int64_t in, int64_t out, const std::string& result_name,
                 bool with_bias = true) {
    ValueId weight = param(prefix + ".weight", {out, in}, kaimingUniformWeight());
    if (!with_bias) return op(OpId::matmul, {x, weight}, result_name, {{"transpose_b", int64_t{1}}});
    ValueId bias = param(prefix + ".bias", {out}, uniformBias(in));
    ValueId product = op(OpId::matmul, {x, weight}, prefix + ".matmul", {{"transpose_b", int64_t{1}}});
    return op(OpId::add, {product, bias}, result_name);
  }

  // Llama's RMSNorm over the last dimension with weight `prefix.weight` (ones), decomposed as
  // PyTorch's ONNX exports write it (GptSpec::rms_norm).
  ValueId rmsNorm(const std::string& prefix, ValueId x, int64_t width) {
    ValueId weight = param(prefix + ".weight", {width}, onesInit());
    ValueId squares = op(OpId::pow, {x, scalar(prefix + ".two", 2.0f)}, prefix + ".pow");
    ValueId mean = op(OpId::reduce_mean, {squares}, prefix + ".mean", {{"axes", std::vector<int64_t>{-1}}});
    ValueId padded = op(OpId::add, {mean, scalar(prefix + ".eps", 1e-6f)}, prefix + ".add");
    ValueId root = op(OpId::sqrt, {padded}, prefix + ".sqrt");
    ValueId reciprocal = op(OpId::div, {scalar(prefix + ".one", 1.0f), root}, prefix + ".rsqrt");
    ValueId normalized = op(OpId::mul, {x, reciprocal}, prefix + ".normalized");
    return op(OpId::mul, {weight, normalized}, prefix + ".out");
  }

  // GELU (erf form) decomposed as PyTorch's ONNX exports below opset 20 write it
  // (GptSpec::exported_gelu): x · (0.5 · (erf(x / √2) + 1)).
  ValueId exportedGelu(const std::string& prefix, ValueId x) {
    ValueId scaled = op(OpId::div, {x, scalar(prefix + ".sqrt2", static_cast<float>(std::numbers::sqrt2))}, prefix + ".div");
    ValueId erf = op(OpId::erf, {scaled}, prefix + ".erf");
    ValueId shifted = op(OpId::add, {erf, scalar(prefix + ".one", 1.0f)}, prefix + ".add");
    ValueId cdf = op(OpId::mul, {scalar(prefix + ".half", 0.5f), shifted}, prefix + ".cdf");
    return op(OpId::mul, {x, cdf}, prefix);
  }

  // Layer norm over the last dimension with scale `prefix.weight` (ones) and `prefix.bias` (zeros).
  ValueId layerNorm(const std::string& prefix, ValueId x, int64_t width) {
    ValueId scale = param(prefix + ".weight", {width}, onesInit());
    ValueId bias = param(prefix + ".bias", {width}, zerosInit());
    return op(OpId::layer_norm, {x, scale, bias}, prefix + ".out");
  }

  // Returns the graph with `outputs`, or the first error met while building it.
  Expected<Graph> finish(std::vector<ValueId> outputs) {
    if (!status_.isOk()) return status_.withContext("generating @" + graph_.name + ": ");
    graph_.outputs = std::move(outputs);
    return std::move(graph_);
  }

 private:
  ValueId keep(Expected<ValueId> added) {
    if (!status_.isOk()) return kNoValue;
    if (!added) {
      status_ = added.status();
      return kNoValue;
    }
    return *added;
  }

  Graph graph_;
  int64_t base_seed_;
  Status status_;
};

// Fails unless `value` is in [low, high]; `what` names the size ("gpt: --hidden").
Status checkRange(const std::string& what, int64_t value, int64_t low, int64_t high) {
  if (value < low || value > high)
    return Status::badInput(what + " must be in [" + std::to_string(low) + ", " + std::to_string(high) + "], got " +
                            std::to_string(value));
  return Status::ok();
}

// Fails when a tensor of `dims` would have too many elements to count exactly.
Status checkElements(const std::string& what, std::initializer_list<int64_t> dims) {
  double elements = 1;
  for (int64_t d : dims) elements *= static_cast<double>(d);
  if (elements > kMaxElements)
    return Status::badInput(what + " would have " + std::to_string(elements) + " elements; at most 2^53 are supported");
  return Status::ok();
}

Status checkSeed(const std::string& model, int64_t seed) {
  return checkRange(model + ": seed", seed, 0, kMaxBaseSeed);
}

Status checkGptSpec(const GptSpec& s) {
  constexpr int64_t kMaxDim = int64_t{1} << 31;
  CLEAVE_TRY(checkRange("gpt: layers", s.layers, 1, kMaxLayers));
  CLEAVE_TRY(checkRange("gpt: hidden", s.hidden, 1, kMaxDim));
  CLEAVE_TRY(checkRange("gpt: heads", s.heads, 1, s.hidden));
  CLEAVE_TRY(checkRange("gpt: seq", s.seq, 1, kMaxDim));
  CLEAVE_TRY(checkRange("gpt: vocab", s.vocab, 1, kMaxDim));
  CLEAVE_TRY(checkRange("gpt: batch", s.batch, 1, kMaxDim));
  CLEAVE_TRY(checkRange("gpt: ffn", s.ffn, 0, kMaxDim));
  CLEAVE_TRY(checkSeed("gpt", s.seed));
  if (s.hidden % s.heads != 0)
    return Status::badInput("gpt: hidden (" + std::to_string(s.hidden) + ") must be a multiple of heads (" +
                            std::to_string(s.heads) + ")");
  int64_t ffn = s.ffn == 0 ? 4 * s.hidden : s.ffn;
  CLEAVE_TRY(checkElements("gpt: the attention scores [B,A,S,S]", {s.batch, s.heads, s.seq, s.seq}));
  CLEAVE_TRY(checkElements("gpt: the logits [B,S,V]", {s.batch, s.seq, s.vocab}));
  CLEAVE_TRY(checkElements("gpt: the MLP activations [B,S,ffn]", {s.batch, s.seq, ffn}));
  CLEAVE_TRY(checkElements("gpt: the fc1 weight [ffn,H]", {ffn, s.hidden}));
  CLEAVE_TRY(checkElements("gpt: the embedding [V,H]", {s.vocab, s.hidden}));
  return Status::ok();
}

// The spec's norm of x: a layer norm, or Llama's RMSNorm (GptSpec::rms_norm).
ValueId norm(GraphBuilder& b, const std::string& prefix, ValueId x, const GptSpec& s) {
  return s.rms_norm ? b.rmsNorm(prefix, x, s.hidden) : b.layerNorm(prefix, x, s.hidden);
}

// One pre-norm transformer block: x + attn(ln1(x)), then + mlp(ln2(.)). Returns the block output.
ValueId gptBlock(GraphBuilder& b, const GptSpec& s, int64_t ffn, int64_t layer, ValueId x, ValueId scale,
                 ValueId causal_mask) {
  const std::string p = "h" + std::to_string(layer) + ".";
  const int64_t head_dim = s.hidden / s.heads;
  const AttrMap swap_seq_and_heads = {{"perm", std::vector<int64_t>{0, 2, 1, 3}}};

  // 1. Attention: q, k and v projections (separate weights, so tensor parallelism splits them by
  //    heads), then [B,S,H] -> [B,S,A,D] -> [B,A,S,D] each.
  ValueId normed = norm(b, p + "ln1", x, s);
  std::vector<ValueId> heads;
  const char* head_names[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    std::string name = p + "attn." + head_names[i];
    ValueId projected = b.linear(name, normed, s.hidden, s.hidden, name + ".out");
    ValueId per_head = b.op(OpId::reshape, {projected}, name + ".heads",
                            {{"shape", std::vector<int64_t>{0, s.seq, s.heads, head_dim}}});
    heads.push_back(b.op(OpId::transpose, {per_head}, name, swap_seq_and_heads));
  }
  // 2. Causal softmax(q k^T / sqrt(D)) v.
  ValueId scores = b.op(OpId::matmul, {heads[0], heads[1]}, p + "attn.scores", {{"transpose_b", int64_t{1}}});
  ValueId scaled = b.op(OpId::mul, {scores, scale}, p + "attn.scores.scaled");
  ValueId masked = b.op(OpId::add, {scaled, causal_mask}, p + "attn.scores.masked");
  ValueId probs = b.op(OpId::softmax, {masked}, p + "attn.probs");
  ValueId context = b.op(OpId::matmul, {probs, heads[2]}, p + "attn.context");
  // 3. Merge the heads back to [B,S,H], project, add the residual.
  ValueId merged = b.op(OpId::transpose, {context}, p + "attn.context.merged", swap_seq_and_heads);
  ValueId flat = b.op(OpId::reshape, {merged}, p + "attn.context.flat",
                      {{"shape", std::vector<int64_t>{0, s.seq, s.hidden}}});
  ValueId projected = b.linear(p + "attn.proj", flat, s.hidden, s.hidden, p + "attn.proj.out");
  ValueId attended = b.op(OpId::add, {x, projected}, p + "attn.residual");
  // 4. MLP: fc1 -> gelu -> fc2, add the residual.
  ValueId normed2 = norm(b, p + "ln2", attended, s);
  ValueId fc1 = b.linear(p + "mlp.fc1", normed2, s.hidden, ffn, p + "mlp.fc1.out");
  ValueId activated = s.exported_gelu ? b.exportedGelu(p + "mlp.gelu", fc1) : b.op(OpId::gelu, {fc1}, p + "mlp.gelu");
  ValueId fc2 = b.linear(p + "mlp.fc2", activated, ffn, s.hidden, p + "mlp.fc2.out");
  return b.op(OpId::add, {attended, fc2}, p + "out");
}

}  // namespace

Expected<Graph> generateGpt(const GptSpec& s) {
  CLEAVE_TRY(checkGptSpec(s));
  const int64_t ffn = s.ffn == 0 ? 4 * s.hidden : s.ffn;
  GraphBuilder b("gpt", s.seed);

  // 1. Token embedding (gather) plus a learned position embedding [S,H], broadcast over the batch.
  ValueId tokens = b.input("tokens", TensorType{DType::kI64, {s.batch, s.seq}});
  ValueId wte = b.param("wte.weight", {s.vocab, s.hidden}, normalInit(0.02));
  ValueId wpe = b.param("wpe.weight", {s.seq, s.hidden}, normalInit(0.02));
  ValueId token_embeddings = b.op(OpId::gather, {wte, tokens}, "wte.out");
  ValueId x = b.op(OpId::add, {token_embeddings, wpe}, "embed");

  // 2. Constants every block shares: the score scale 1/sqrt(D) and the causal mask [S,S], which is
  //    0 on and below the diagonal and -1e9 above it: (ones - tril(ones)) * -1e9.
  ValueId scale = b.scalar("attn.scale", static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.hidden / s.heads))));
  ValueId one = b.scalar("attn.one", 1.0f);
  ValueId ones = b.op(OpId::expand, {one}, "attn.ones", {{"shape", std::vector<int64_t>{s.seq, s.seq}}});
  ValueId lower = b.op(OpId::trilu, {ones}, "attn.lower", {{"upper", int64_t{0}}});
  ValueId future = b.op(OpId::sub, {ones, lower}, "attn.future");
  ValueId fill = b.scalar("attn.mask_fill", -1e9f);
  ValueId causal_mask = b.op(OpId::mul, {future, fill}, "attn.causal_mask");

  // 3. The blocks, the final layer norm and the vocabulary head (no bias).
  for (int64_t layer = 0; layer < s.layers; ++layer) x = gptBlock(b, s, ffn, layer, x, scale, causal_mask);
  ValueId normed = norm(b, "ln_f", x, s);
  ValueId logits = b.linear("lm_head", normed, s.hidden, s.vocab, "logits", /*with_bias=*/false);
  return b.finish({logits});
}

Expected<Graph> generateMlp(const MlpSpec& s) {
  constexpr int64_t kMaxWidth = int64_t{1} << 24;
  CLEAVE_TRY(checkRange("mlp: input", s.input, 1, kMaxWidth));
  CLEAVE_TRY(checkRange("mlp: classes", s.classes, 1, kMaxWidth));
  CLEAVE_TRY(checkRange("mlp: batch", s.batch, 1, kMaxWidth));
  CLEAVE_TRY(checkRange("mlp: number of hidden layers", static_cast<int64_t>(s.hidden.size()), 0, kMaxLayers));
  for (int64_t width : s.hidden) CLEAVE_TRY(checkRange("mlp: hidden width", width, 1, kMaxWidth));
  CLEAVE_TRY(checkSeed("mlp", s.seed));

  GraphBuilder b("mlp", s.seed);
  ValueId x = b.input("x", f32({s.batch, s.input}));
  int64_t width = s.input;
  for (size_t i = 0; i < s.hidden.size(); ++i) {
    std::string name = "fc" + std::to_string(i + 1);
    ValueId dense = b.linear(name, x, width, s.hidden[i], name + ".out");
    x = b.op(OpId::relu, {dense}, name + ".relu");
    width = s.hidden[i];
  }
  ValueId logits = b.linear("fc" + std::to_string(s.hidden.size() + 1), x, width, s.classes, "logits");
  return b.finish({logits});
}

Expected<Graph> generateCnn(const CnnSpec& s) {
  constexpr int64_t kMaxDim = int64_t{1} << 16;
  CLEAVE_TRY(checkRange("cnn: batch", s.batch, 1, kMaxDim));
  CLEAVE_TRY(checkRange("cnn: channels", s.channels, 1, kMaxDim));
  CLEAVE_TRY(checkRange("cnn: height", s.height, 4, kMaxDim));
  CLEAVE_TRY(checkRange("cnn: width", s.width, 4, kMaxDim));
  CLEAVE_TRY(checkRange("cnn: classes", s.classes, 1, kMaxDim));
  CLEAVE_TRY(checkSeed("cnn", s.seed));
  if (s.height % 4 != 0 || s.width % 4 != 0)
    return Status::badInput("cnn: image height and width must be multiples of 4 (two 2x2 poolings), got " +
                            std::to_string(s.height) + "x" + std::to_string(s.width));
  CLEAVE_TRY(checkElements("cnn: the conv2 activations [B,64,H,W]", {s.batch, 64, s.height, s.width}));

  GraphBuilder b("cnn", s.seed);
  const AttrMap same_5x5 = {{"pads", std::vector<int64_t>{2, 2, 2, 2}}};
  const AttrMap pool_2x2 = {{"kernel", std::vector<int64_t>{2, 2}}};
  // conv 5x5 "same" + bias -> relu -> max pool 2, twice; `prefix.weight` is [out, in, 5, 5].
  auto convBlock = [&](const std::string& prefix, const std::string& pool_name, ValueId x, int64_t in, int64_t out) {
    ValueId weight = b.param(prefix + ".weight", {out, in, 5, 5}, kaimingUniformWeight());
    ValueId bias = b.param(prefix + ".bias", {out}, uniformBias(in * 5 * 5));
    ValueId conv = b.op(OpId::conv2d, {x, weight, bias}, prefix + ".out", same_5x5);
    ValueId activated = b.op(OpId::relu, {conv}, prefix + ".relu");
    return b.op(OpId::max_pool2d, {activated}, pool_name, pool_2x2);
  };

  ValueId x = b.input("x", f32({s.batch, s.channels, s.height, s.width}));
  ValueId pooled1 = convBlock("conv1", "pool1.out", x, s.channels, 32);
  ValueId pooled2 = convBlock("conv2", "pool2.out", pooled1, 32, 64);
  ValueId flat = b.op(OpId::flatten, {pooled2}, "flatten.out");
  const int64_t features = 64 * (s.height / 4) * (s.width / 4);
  ValueId dense = b.linear("fc1", flat, features, 1024, "fc1.out");
  ValueId activated = b.op(OpId::relu, {dense}, "fc1.relu");
  ValueId logits = b.linear("fc2", activated, 1024, s.classes, "logits");
  return b.finish({logits});
}

}  // namespace cleave
