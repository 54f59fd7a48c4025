// The attention ops of opset 23: Attention, which torch.export's exporter writes for
// scaled_dot_product_attention (Hugging Face's default "sdpa" attention) from opset 23, and
// RotaryEmbedding. Each is composed of cleave's matmul, softmax, shape and elementwise ops, as the
// exporters below opset 23 write them, so that autodiff, tensor parallelism (heads split),
// pipelines and fusion treat them as they treat those.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "frontend/onnx/onnx_composite.h"
#include "frontend/onnx/onnx_converters.h"

namespace cleave {
namespace {

// qk_matmul_output_mode: the scores (1, after the softcap, is the same value: ONNX's reference softcaps
// the scores in place), with the bias added, after the softmax.
constexpr int kQkMatmul = 0, kQkWithBias = 2, kQkAfterSoftmax = 3;

// A 3-D input [batch, sequence, heads·size] as [batch, heads, sequence, size].
Expected<std::string> splitHeads(OnnxComposite& c, const std::string& x, const TensorType& type, int64_t heads) {
  if (heads <= 0 || type.shape[2] % heads != 0)
    return c.fail("a 3-D input of " + type.str() + " needs q_num_heads and kv_num_heads that divide its last dim");
  CLEAVE_ASSIGN_OR_RETURN(std::string split,
                          c.apply(OpId::reshape, {x}, {{"shape", std::vector<int64_t>{0, 0, heads, type.shape[2] / heads}}}));
  return c.apply(OpId::transpose, {split}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
}

// [batch, kv_heads, sequence, size] with each head repeated `times` times in a row (h0, h0, h1, h1, ...).
Expected<std::string> repeatHeads(OnnxComposite& c, const std::string& x, const Shape& shape, int64_t times) {
  const int64_t batch = shape[0], heads = shape[1], length = shape[2], size = shape[3];
  CLEAVE_ASSIGN_OR_RETURN(std::string grouped,
                          c.apply(OpId::reshape, {x}, {{"shape", std::vector<int64_t>{batch, heads, 1, length, size}}}));
  CLEAVE_ASSIGN_OR_RETURN(std::string repeated,
                          c.apply(OpId::expand, {grouped}, {{"shape", std::vector<int64_t>{batch, heads, times, length, size}}}));
  return c.apply(OpId::reshape, {repeated}, {{"shape", std::vector<int64_t>{batch, heads * times, length, size}}});
}

// The causal bias [queries, keys] of `dtype` (f32 or f64): 0 where key j <= query i + offset (the
// keys of the past first), -inf elsewhere.
TensorPtr causalBias(DType dtype, int64_t queries, int64_t keys, int64_t offset) {
  auto bias = std::make_shared<TensorData>();
  bias->type = {dtype, {queries, keys}};
  bias->bytes.resize(static_cast<size_t>(queries * keys * dtypeSize(dtype)));
  for (int64_t i = 0; i < queries; ++i)
    for (int64_t j = 0; j < keys; ++j) {
      const double value = j <= i + offset ? 0.0 : -std::numeric_limits<double>::infinity();
      if (dtype == DType::kF64) bias->as<double>()[i * keys + j] = value;
      else bias->as<float>()[i * keys + j] = static_cast<float>(value);
    }
  return bias;
}

// softmax(Q·√s · (K·√s)ᵀ [softcapped] + bias) · V, s = scale (default 1/√head size), as ONNX's
// function body computes it: K and V concatenated after past_key and past_value (outputs 1 and 2),
// their heads repeated for grouped-query attention, the bias from attn_mask (bool: 0 or -inf;
// float: added) and is_causal (aligned to the last query), a row every key of which is masked
// giving 0, and output 3 the scores at qk_matmul_output_mode.
Status convertAttention(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  CLEAVE_ASSIGN_OR_RETURN(TensorType q_type, ctx.typeOf(node, node.input(0)));
  CLEAVE_ASSIGN_OR_RETURN(TensorType k_type, ctx.typeOf(node, node.input(1)));
  CLEAVE_ASSIGN_OR_RETURN(TensorType v_type, ctx.typeOf(node, node.input(2)));
  const int64_t rank = q_type.rank();
  if ((rank != 3 && rank != 4) || k_type.rank() != rank || v_type.rank() != rank)
    return c.fail("Q, K and V must all be 3-D or all 4-D, got " + q_type.str() + ", " + k_type.str() + ", " + v_type.str());
  if (q_type.dtype != DType::kF32 && q_type.dtype != DType::kF64)
    return c.fail("Attention on " + std::string(dtypeName(q_type.dtype)) + " is not supported (f32 and f64 are)");
  if (const int64_t precision = intAttr(node, "softmax_precision", 0);
      precision != 0 && precision != (q_type.dtype == DType::kF32 ? 1 : 11))
    return c.fail("softmax_precision " + std::to_string(precision) + " differs from the inputs' type, which is not supported");
  const double softcap = floatAttr(node, "softcap", 0.0);
  const int64_t qk_mode = intAttr(node, "qk_matmul_output_mode", kQkMatmul);
  if (qk_mode < kQkMatmul || qk_mode > kQkAfterSoftmax)
    return c.fail("qk_matmul_output_mode must be 0 to 3, got " + std::to_string(qk_mode));

  // 1. Q, K and V as [batch, heads, sequence, size].
  std::string q = node.input(0), k = node.input(1), v = node.input(2);
  if (rank == 3) {
    const int64_t q_heads = intAttr(node, "q_num_heads", 0), kv_heads = intAttr(node, "kv_num_heads", 0);
    CLEAVE_ASSIGN_OR_RETURN(q, splitHeads(c, q, q_type, q_heads));
    CLEAVE_ASSIGN_OR_RETURN(k, splitHeads(c, k, k_type, kv_heads));
    CLEAVE_ASSIGN_OR_RETURN(v, splitHeads(c, v, v_type, kv_heads));
    q_type.shape = {q_type.shape[0], q_heads, q_type.shape[1], q_type.shape[2] / q_heads};
    k_type.shape = {k_type.shape[0], kv_heads, k_type.shape[1], k_type.shape[2] / kv_heads};
    v_type.shape = {v_type.shape[0], kv_heads, v_type.shape[1], v_type.shape[2] / kv_heads};
  }
  // 2. The past keys and values first; they are outputs 1 and 2.
  int64_t past = 0;
  if (hasInput(node, 4) != hasInput(node, 5)) return c.fail("past_key and past_value must be given together");
  if (hasInput(node, 4)) {
    CLEAVE_ASSIGN_OR_RETURN(TensorType past_type, ctx.typeOf(node, node.input(4)));
    if (past_type.rank() != 4) return c.fail("past_key must be 4-D, got " + past_type.str());
    past = past_type.shape[2];
    CLEAVE_ASSIGN_OR_RETURN(k, c.apply(OpId::concat, {node.input(4), k}, {{"axis", int64_t{2}}}));
    CLEAVE_ASSIGN_OR_RETURN(v, c.apply(OpId::concat, {node.input(5), v}, {{"axis", int64_t{2}}}));
    k_type.shape[2] += past;
    v_type.shape[2] += past;
  }
  for (int output = 1; output <= 2; ++output) {
    if (hasOutput(node, output)) CLEAVE_TRY(ctx.emitTo(node, OpId::identity, {output == 1 ? k : v}, {}, {node.output(output)}));
  }
  const int64_t q_heads = q_type.shape[1], kv_heads = k_type.shape[1];
  if (v_type.shape[1] != kv_heads || q_heads % kv_heads != 0)
    return c.fail("query heads (" + std::to_string(q_heads) + ") must be a multiple of the key and value heads (" +
                  std::to_string(kv_heads) + ", " + std::to_string(v_type.shape[1]) + ")");
  if (q_heads != kv_heads) {
    CLEAVE_ASSIGN_OR_RETURN(k, repeatHeads(c, k, k_type.shape, q_heads / kv_heads));
    CLEAVE_ASSIGN_OR_RETURN(v, repeatHeads(c, v, v_type.shape, q_heads / kv_heads));
  }
  const int64_t queries = q_type.shape[2], keys = k_type.shape[2];

  // 3. The scores, scaled on both sides by √scale, then softcapped.
  const double scale = floatAttr(node, "scale", 1.0 / std::sqrt(static_cast<double>(q_type.shape[3])));
  CLEAVE_ASSIGN_OR_RETURN(std::string root, c.filled(std::sqrt(scale), q_type.dtype));
  CLEAVE_ASSIGN_OR_RETURN(std::string q_scaled, c.apply(OpId::mul, {q, root}));
  CLEAVE_ASSIGN_OR_RETURN(std::string k_scaled, c.apply(OpId::mul, {k, root}));
  CLEAVE_ASSIGN_OR_RETURN(std::string scores, c.apply(OpId::matmul, {q_scaled, k_scaled}, {{"transpose_b", int64_t{1}}}));
  if (softcap > 0) {
    CLEAVE_ASSIGN_OR_RETURN(std::string cap, c.filled(softcap, q_type.dtype));
    CLEAVE_ASSIGN_OR_RETURN(std::string divided, c.apply(OpId::div, {scores, cap}));
    CLEAVE_ASSIGN_OR_RETURN(std::string bounded, c.apply(OpId::tanh, {divided}));
    CLEAVE_ASSIGN_OR_RETURN(scores, c.apply(OpId::mul, {bounded, cap}));
  }
  std::string qk_output = scores;

  // 4. The bias: the mask (bool: 0 where true, -inf where false; float: as given), plus the causal bias.
  std::string bias, zero, minus_inf;  // the constants, with a mask
  const bool masked = hasInput(node, 3);
  if (masked) {
    CLEAVE_ASSIGN_OR_RETURN(TensorType mask_type, ctx.typeOf(node, node.input(3)));
    if (mask_type.rank() == 0 || mask_type.shape.back() != keys)
      return c.fail("attn_mask " + mask_type.str() + " must end in the " + std::to_string(keys) +
                    " keys (a shorter mask, padded, is not supported)");
    CLEAVE_ASSIGN_OR_RETURN(zero, c.filled(0.0, q_type.dtype));
    CLEAVE_ASSIGN_OR_RETURN(minus_inf, c.filled(-std::numeric_limits<double>::infinity(), q_type.dtype));
    bias = node.input(3);
    if (mask_type.dtype == DType::kBool) {
      CLEAVE_ASSIGN_OR_RETURN(bias, c.apply(OpId::where, {bias, zero, minus_inf}));
    } else if (mask_type.dtype != q_type.dtype) {
      return c.fail("attn_mask is " + std::string(dtypeName(mask_type.dtype)) + "; it must be bool or Q's type");
    }
  }
  if (intAttr(node, "is_causal", 0) != 0) {
    const std::string causal = node.output(0) + "/causal";
    ctx.bindConstant(causal, causalBias(q_type.dtype, queries, keys, past));
    if (bias.empty()) {
      bias = causal;
    } else {
      CLEAVE_ASSIGN_OR_RETURN(bias, c.apply(OpId::add, {bias, causal}));
    }
  }
  std::string logits = scores;
  if (!bias.empty()) {
    CLEAVE_ASSIGN_OR_RETURN(logits, c.apply(OpId::add, {scores, bias}));
  }
  if (qk_mode == kQkWithBias) qk_output = logits;

  // 5. Softmax over the keys; a row whose keys are all masked gives 0 (only a mask can mask them all).
  CLEAVE_ASSIGN_OR_RETURN(std::string probabilities, c.apply(OpId::softmax, {logits}, {{"axis", int64_t{-1}}}));
  if (masked) {
    CLEAVE_ASSIGN_OR_RETURN(std::string largest,
                            c.apply(OpId::reduce_max, {bias}, {{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}}));
    CLEAVE_ASSIGN_OR_RETURN(std::string all_masked, c.apply(OpId::equal, {largest, minus_inf}));
    CLEAVE_ASSIGN_OR_RETURN(probabilities, c.apply(OpId::where, {all_masked, zero, probabilities}));
  }
  if (qk_mode == kQkAfterSoftmax) qk_output = probabilities;
  if (hasOutput(node, 3)) CLEAVE_TRY(ctx.emitTo(node, OpId::identity, {qk_output}, {}, {node.output(3)}));

  // 6. The weighted values, [batch, heads, queries, size], or [batch, queries, heads·size] for 3-D inputs.
  if (rank == 4) return c.finish(OpId::matmul, {probabilities, v});
  CLEAVE_ASSIGN_OR_RETURN(std::string weighted, c.apply(OpId::matmul, {probabilities, v}));
  CLEAVE_ASSIGN_OR_RETURN(std::string merged, c.apply(OpId::transpose, {weighted}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}}));
  return c.finish(OpId::reshape, {merged}, {{"shape", std::vector<int64_t>{0, 0, q_heads * v_type.shape[3]}}});
}

// The last dim of `x` (4-D) from `begin` to `end` by `step`.
Expected<std::string> lastDimSlice(OnnxComposite& c, const std::string& x, int64_t begin, int64_t end, int64_t step = 1) {
  return c.apply(OpId::slice, {x}, {{"starts", std::vector<int64_t>{begin}}, {"ends", std::vector<int64_t>{end}},
                                    {"axes", std::vector<int64_t>{3}}, {"steps", std::vector<int64_t>{step}}});
}

// RotaryEmbedding (opset 23): the first rotary_embedding_dim (default: all) of each head's values
// rotated by the cos and sin of its position (caches indexed by position_ids, or given per batch
// and position), as pairs of halves or, interleaved, of neighbours; the rest passed through. The
// input is [batch, heads, sequence, size], or [batch, sequence, heads·size] with num_heads.
Status convertRotaryEmbedding(OnnxImportContext& ctx, const onnx::NodeProto& node) {
  CLEAVE_ASSIGN_OR_RETURN(OnnxComposite c, OnnxComposite::start(ctx, node));
  const TensorType& x_type = c.xType();
  if (x_type.rank() != 3 && x_type.rank() != 4) return c.fail("the input must be 3-D or 4-D, got " + x_type.str());
  // 1. The input as 4-D, and the axis the caches' [batch, sequence, rotary/2] get for its heads.
  std::string x = c.x();
  int64_t heads_axis = 1;
  int64_t size = x_type.rank() == 4 ? x_type.shape[3] : 0;
  if (x_type.rank() == 3) {
    const int64_t heads = intAttr(node, "num_heads", 0);
    if (heads <= 0 || x_type.shape[2] % heads != 0)
      return c.fail("a 3-D input of " + x_type.str() + " needs num_heads dividing its last dim");
    size = x_type.shape[2] / heads;
    CLEAVE_ASSIGN_OR_RETURN(x, c.apply(OpId::reshape, {x}, {{"shape", std::vector<int64_t>{0, 0, heads, size}}}));
    heads_axis = 2;
  }
  const int64_t rotary_attr = intAttr(node, "rotary_embedding_dim", 0);
  const int64_t rotary = rotary_attr > 0 ? rotary_attr : size;
  if (rotary > size || rotary % 2 != 0)
    return c.fail("rotary_embedding_dim " + std::to_string(rotary) + " must be even and at most the head size " +
                  std::to_string(size));
  // 2. cos and sin of each position, [batch, sequence, rotary/2] with a heads axis of 1.
  std::vector<std::string> caches;
  for (int input = 1; input <= 2; ++input) {
    std::string cache = node.input(input);
    if (hasInput(node, 3)) {
      CLEAVE_ASSIGN_OR_RETURN(cache, c.apply(OpId::gather, {cache, node.input(3)}, {{"axis", int64_t{0}}}));
    }
    CLEAVE_ASSIGN_OR_RETURN(cache, c.apply(OpId::unsqueeze, {cache}, {{"axes", std::vector<int64_t>{heads_axis}}}));
    caches.push_back(cache);
  }
  const std::string &cos = caches[0], &sin = caches[1];
  // 3. The rotated pairs: halves, or neighbours when interleaved.
  const bool interleaved = intAttr(node, "interleaved", 0) != 0;
  const int64_t half = rotary / 2;
  CLEAVE_ASSIGN_OR_RETURN(std::string first, interleaved ? lastDimSlice(c, x, 0, rotary, 2) : lastDimSlice(c, x, 0, half));
  CLEAVE_ASSIGN_OR_RETURN(std::string second, interleaved ? lastDimSlice(c, x, 1, rotary, 2) : lastDimSlice(c, x, half, rotary));
  CLEAVE_ASSIGN_OR_RETURN(std::string first_cos, c.apply(OpId::mul, {cos, first}));
  CLEAVE_ASSIGN_OR_RETURN(std::string second_sin, c.apply(OpId::mul, {sin, second}));
  CLEAVE_ASSIGN_OR_RETURN(std::string real, c.apply(OpId::sub, {first_cos, second_sin}));
  CLEAVE_ASSIGN_OR_RETURN(std::string first_sin, c.apply(OpId::mul, {sin, first}));
  CLEAVE_ASSIGN_OR_RETURN(std::string second_cos, c.apply(OpId::mul, {cos, second}));
  CLEAVE_ASSIGN_OR_RETURN(std::string imaginary, c.apply(OpId::add, {first_sin, second_cos}));
  std::string rotated;
  if (interleaved) {
    const AttrMap last{{"axes", std::vector<int64_t>{4}}};
    CLEAVE_ASSIGN_OR_RETURN(std::string real_pairs, c.apply(OpId::unsqueeze, {real}, last));
    CLEAVE_ASSIGN_OR_RETURN(std::string imaginary_pairs, c.apply(OpId::unsqueeze, {imaginary}, last));
    CLEAVE_ASSIGN_OR_RETURN(std::string pairs, c.apply(OpId::concat, {real_pairs, imaginary_pairs}, {{"axis", int64_t{4}}}));
    CLEAVE_ASSIGN_OR_RETURN(rotated, c.apply(OpId::reshape, {pairs}, {{"shape", std::vector<int64_t>{0, 0, 0, rotary}}}));
  } else {
    CLEAVE_ASSIGN_OR_RETURN(rotated, c.apply(OpId::concat, {real, imaginary}, {{"axis", int64_t{3}}}));
  }
  // 4. The values past rotary_embedding_dim after them, and the input's shape back.
  if (rotary < size) {
    CLEAVE_ASSIGN_OR_RETURN(std::string passed, lastDimSlice(c, x, rotary, size));
    CLEAVE_ASSIGN_OR_RETURN(rotated, c.apply(OpId::concat, {rotated, passed}, {{"axis", int64_t{3}}}));
  }
  if (x_type.rank() == 4) return c.finish(OpId::identity, {rotated});
  return c.finish(OpId::reshape, {rotated}, {{"shape", std::vector<int64_t>{0, 0, x_type.shape[2]}}});
}

constexpr OnnxConverter kAttentionConverters[] = {
    {"Attention", convertAttention, 23},
    {"RotaryEmbedding", convertRotaryEmbedding, 23},
};

}  // namespace

std::span<const OnnxConverter> attentionConverters() { return kAttentionConverters; }

}  // namespace cleave
