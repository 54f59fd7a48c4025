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

// Which keys each query may see, as ONNX's Attention states it: query i at absolute position
// p = offset + i (offset: the keys before the query block, past_sequence_length) sees key j when
// j <= p (is_causal), p - left <= j (left >= 0) and j <= p + right (right >= 0).
struct KeyWindow {
  bool causal = false;
  int64_t left = -1, right = -1;
  bool any() const { return causal || left >= 0 || right >= 0; }
};

// The window as a bias [queries, keys] of `dtype` (f32 or f64) at a fixed offset: 0 where the
// query sees the key, -inf elsewhere.
TensorPtr windowBias(DType dtype, int64_t queries, int64_t keys, int64_t offset, const KeyWindow& window) {
  auto bias = std::make_shared<TensorData>();
  bias->type = {dtype, {queries, keys}};
  bias->bytes.resize(static_cast<size_t>(queries * keys * dtypeSize(dtype)));
  for (int64_t i = 0; i < queries; ++i)
    for (int64_t j = 0; j < keys; ++j) {
      const int64_t p = offset + i;
      const bool seen = (!window.causal || j <= p) && (window.left < 0 || p - window.left <= j) &&
                        (window.right < 0 || j <= p + window.right);
      const double value = seen ? 0.0 : -std::numeric_limits<double>::infinity();
      if (dtype == DType::kF64) bias->as<double>()[i * keys + j] = value;
      else bias->as<float>()[i * keys + j] = static_cast<float>(value);
    }
  return bias;
}

// An i64 constant [queries, keys] holding j - i + shift.
TensorPtr keyMinusQuery(int64_t queries, int64_t keys, int64_t shift) {
  auto table = std::make_shared<TensorData>();
  table->type = {DType::kI64, {queries, keys}};
  table->bytes.resize(static_cast<size_t>(queries * keys * 8));
  for (int64_t i = 0; i < queries; ++i)
    for (int64_t j = 0; j < keys; ++j) table->as<int64_t>()[i * keys + j] = j - i + shift;
  return table;
}

// The keys each query of each batch row sees when the cache is outside the operator (opset 24's
// nonpad_kv_seqlen n, i64 [batch]): key j is valid when j < n[b], and the window's offset is
// n[b] - queries. A bool [batch, 1, queries or 1, keys]: with p = n[b] - queries + i, j <= p is
// j - i + queries <= n[b], p - left <= j is n[b] <= j - i + queries + left, and j <= p + right is
// j - i + queries - right <= n[b].
Expected<std::string> nonpadKeys(OnnxComposite& c, OnnxImportContext& ctx, const onnx::NodeProto& node, int64_t batch,
                                 int64_t queries, int64_t keys, const KeyWindow& window) {
  CLEAVE_ASSIGN_OR_RETURN(TensorType lengths_type, ctx.typeOf(node, node.input(6)));
  if (lengths_type.dtype != DType::kI64 || lengths_type.shape != Shape{batch})
    return c.fail("nonpad_kv_seqlen must be i64[" + std::to_string(batch) + "] (one length per batch row), got " +
                  lengths_type.str());
  CLEAVE_ASSIGN_OR_RETURN(std::string lengths,
                          c.apply(OpId::reshape, {node.input(6)}, {{"shape", std::vector<int64_t>{batch, 1, 1, 1}}}));
  int tables = 0;
  auto table = [&](int64_t rows, int64_t shift) {  // j - i + shift, or j + shift with one row
    const std::string name = node.output(0) + "/key_table_" + std::to_string(tables++);
    ctx.bindConstant(name, keyMinusQuery(rows, keys, shift));
    return name;
  };
  CLEAVE_ASSIGN_OR_RETURN(std::string no, c.filled(0, DType::kBool));
  CLEAVE_ASSIGN_OR_RETURN(std::string seen, c.apply(OpId::less_equal, {table(1, 1), lengths}));  // j + 1 <= n[b]
  auto also = [&](const std::string& lhs, const std::string& rhs) -> Status {
    CLEAVE_ASSIGN_OR_RETURN(std::string condition, c.apply(OpId::less_equal, {lhs, rhs}));
    CLEAVE_ASSIGN_OR_RETURN(seen, c.apply(OpId::where, {seen, condition, no}));
    return Status::ok();
  };
  if (window.causal) CLEAVE_TRY(also(table(queries, queries), lengths));
  if (window.left >= 0) CLEAVE_TRY(also(lengths, table(queries, queries + window.left)));
  if (window.right >= 0) CLEAVE_TRY(also(table(queries, queries - window.right), lengths));
  return seen;
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
  // softmax_precision: the softmax runs in that type (f32 or f64), its input cast to it and its
  // result back.
  const int64_t precision = intAttr(node, "softmax_precision", 0);
  if (precision != 0 && precision != 1 && precision != 11)
    return c.fail("softmax_precision " + std::to_string(precision) + " is not supported (1, f32, and 11, f64, are)");
  const DType softmax_dtype = precision == 0 ? q_type.dtype : precision == 1 ? DType::kF32 : DType::kF64;
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

  // 4. The bias: the mask (bool: 0 where true, -inf where false; float: as given; a mask shorter than
  //    the keys padded with -inf), plus the keys the window hides (is_causal, and from opset 25
  //    left_window_size and right_window_size) at the offset of the past keys, or (opset 24's
  //    nonpad_kv_seqlen, a cache written outside the operator) each batch row's padding keys hidden
  //    and its window at its own offset.
  std::string bias, zero, minus_inf;
  auto ensureConstants = [&]() -> Status {
    if (!zero.empty()) return Status::ok();
    CLEAVE_ASSIGN_OR_RETURN(zero, c.filled(0.0, q_type.dtype));
    CLEAVE_ASSIGN_OR_RETURN(minus_inf, c.filled(-std::numeric_limits<double>::infinity(), q_type.dtype));
    return Status::ok();
  };
  auto addToBias = [&](const std::string& term) -> Status {
    if (bias.empty()) {
      bias = term;
      return Status::ok();
    }
    CLEAVE_ASSIGN_OR_RETURN(bias, c.apply(OpId::add, {bias, term}));
    return Status::ok();
  };
  const bool masked = hasInput(node, 3);
  if (masked) {
    CLEAVE_ASSIGN_OR_RETURN(TensorType mask_type, ctx.typeOf(node, node.input(3)));
    if (mask_type.rank() == 0 || mask_type.shape.back() > keys)
      return c.fail("attn_mask " + mask_type.str() + " must end in at most the " + std::to_string(keys) + " keys");
    if (mask_type.dtype != DType::kBool && mask_type.dtype != q_type.dtype)
      return c.fail("attn_mask is " + std::string(dtypeName(mask_type.dtype)) + "; it must be bool or Q's type");
    CLEAVE_TRY(ensureConstants());
    std::string mask = node.input(3);
    if (mask_type.dtype == DType::kBool) {
      CLEAVE_ASSIGN_OR_RETURN(mask, c.apply(OpId::where, {mask, zero, minus_inf}));
    }
    if (const int64_t missing = keys - mask_type.shape.back(); missing > 0) {
      Shape padding = mask_type.shape;
      padding.back() = missing;
      CLEAVE_ASSIGN_OR_RETURN(std::string hidden,
                              c.filled(-std::numeric_limits<double>::infinity(), q_type.dtype, padding));
      CLEAVE_ASSIGN_OR_RETURN(mask, c.apply(OpId::concat, {mask, hidden}, {{"axis", int64_t{-1}}}));
    }
    CLEAVE_TRY(addToBias(mask));
  }
  KeyWindow window;
  window.causal = intAttr(node, "is_causal", 0) != 0;
  window.left = intAttr(node, "left_window_size", -1);
  window.right = intAttr(node, "right_window_size", -1);
  if (window.left < -1 || window.right < -1)
    return c.fail("left_window_size and right_window_size must be -1 (unbounded) or at least 0");
  const bool nonpad = hasInput(node, 6);
  if (nonpad) {
    if (past > 0) return c.fail("nonpad_kv_seqlen cannot be given with past_key and past_value");
    CLEAVE_TRY(ensureConstants());
    CLEAVE_ASSIGN_OR_RETURN(std::string seen, nonpadKeys(c, ctx, node, q_type.shape[0], queries, keys, window));
    CLEAVE_ASSIGN_OR_RETURN(std::string hidden, c.apply(OpId::where, {seen, zero, minus_inf}));
    CLEAVE_TRY(addToBias(hidden));
  } else if (window.any()) {
    const std::string hidden = node.output(0) + (window.left < 0 && window.right < 0 ? "/causal" : "/window");
    ctx.bindConstant(hidden, windowBias(q_type.dtype, queries, keys, past, window));
    CLEAVE_TRY(addToBias(hidden));
  }
  std::string logits = scores;
  if (!bias.empty()) {
    CLEAVE_ASSIGN_OR_RETURN(logits, c.apply(OpId::add, {scores, bias}));
  }
  if (qk_mode == kQkWithBias) qk_output = logits;

  // 5. Softmax over the keys; a row whose keys are all hidden gives 0 (a causal window alone at the
  //    past's offset always leaves a row its own key).
  std::string probabilities;
  if (softmax_dtype == q_type.dtype) {
    CLEAVE_ASSIGN_OR_RETURN(probabilities, c.apply(OpId::softmax, {logits}, {{"axis", int64_t{-1}}}));
  } else {
    CLEAVE_ASSIGN_OR_RETURN(std::string widened, c.apply(OpId::cast, {logits}, {{"to", std::string(dtypeName(softmax_dtype))}}));
    CLEAVE_ASSIGN_OR_RETURN(std::string wide, c.apply(OpId::softmax, {widened}, {{"axis", int64_t{-1}}}));
    CLEAVE_ASSIGN_OR_RETURN(probabilities, c.apply(OpId::cast, {wide}, {{"to", std::string(dtypeName(q_type.dtype))}}));
  }
  if (masked || nonpad || window.left >= 0 || window.right >= 0) {
    CLEAVE_TRY(ensureConstants());
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
    {"Attention", convertAttention, 23},  // 24 adds nonpad_kv_seqlen, 25 the window sizes
    {"RotaryEmbedding", convertRotaryEmbedding, 23},
};

}  // namespace

std::span<const OnnxConverter> attentionConverters() { return kAttentionConverters; }

}  // namespace cleave
