// f32 matmul and gemm on oneDNN's matmul, constant weights packed once per weights tensor and thread.
#include "runtime/cpu/onednn_matmul.h"

#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ir/op_table.h"
#include "ir/ops/op_rules.h"
#include "runtime/cpu/cpu_kernel_support.h"
#include "runtime/cpu/onednn_support.h"

namespace cleave::runtime::cpu {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// One product out[M, N] = op(a)[M, K] · op(b)[K, N] (+ bias[N]) as the call states it, or `batch`
// such products of matrices stored one after another (attention's).
struct Product {
  int64_t batch = 1;
  int64_t m = 0, k = 0, n = 0;
  bool transpose_a = false, transpose_b = false;
  bool has_bias = false;
  bool constant_weights = false;  // b is constant: packed once per generation
  // Summing into the destination (sgd_matmul_update's): the product times a scale given at each call
  // (a binary post-op), plus sum_scale times the destination's old value (0: not read).
  bool scaled = false;
  float sum_scale = 0.0f;
  // A fused_matmul's: the source, weights and destination as [batch..., rows, columns] with the
  // strides of the buffers they are read from and written to (empty for matmul and gemm).
  memory::dims src_dims, src_strides, weights_dims, weights_strides, dst_dims, dst_strides;
};

// The batch of a matmul whose a, b and result have the same batch dims (none broadcast), or 0.
int64_t unbroadcastBatch(const Shape& a, const Shape& b, const Shape& out) {
  if (a.size() < 3 || a.size() != b.size() || a.size() != out.size()) return 0;
  int64_t batch = 1;
  for (size_t d = 0; d + 2 < a.size(); ++d) {
    if (a[d] != b[d] || a[d] != out[d]) return 0;
    batch *= a[d];
  }
  return batch;
}

// Dims and strides of transpose(x, perm) read in place from x's row-major buffer, its last two dims
// swapped when `transposed`.
std::pair<memory::dims, memory::dims> permutedView(const Shape& shape, const std::vector<int64_t>& perm, bool transposed) {
  memory::dims dims(perm.size()), strides(perm.size());
  std::vector<int64_t> row_major(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1, stride = 1; d >= 0; stride *= shape[d--]) row_major[d] = stride;
  for (size_t i = 0; i < perm.size(); ++i) {
    dims[i] = shape[static_cast<size_t>(perm[i])];
    strides[i] = row_major[static_cast<size_t>(perm[i])];
  }
  if (transposed && dims.size() >= 2) {
    std::swap(dims[dims.size() - 1], dims[dims.size() - 2]);
    std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  }
  return {dims, strides};
}

// Whether a fused_matmul reads or writes any tensor through a permutation other than the identity.
bool permutesAnything(const KernelCall& call) {
  for (const char* attr : {"perm_a", "perm_b", "perm_result"})
    if (!ops::isIdentityPermutation(call.op.getInts(attr))) return true;
  return false;
}

// A fused_matmul whose operands and product have the same batch dims (none broadcast): each tensor
// read or written in place through its permutation's strides (oneDNN's matmul takes any strides).
std::optional<Product> fusedProductOf(const KernelCall& call) {
  auto layout = ops::fusedMatmulLayout(call.op);
  if (!layout) return std::nullopt;
  const Shape& a = layout->operands[0].shape;
  const Shape& b = layout->operands[1].shape;
  const Shape& product = layout->product.shape;
  if (a.size() > 12 || unbroadcastBatch(a, b, product) == 0) return std::nullopt;
  Product p;
  p.transpose_a = call.op.getInt("transpose_a") != 0;
  p.transpose_b = call.op.getInt("transpose_b") != 0;
  p.has_bias = call.op.operands.size() == 3;
  p.m = product[product.size() - 2];
  p.n = product.back();
  p.k = p.transpose_a ? a[a.size() - 2] : a.back();
  if (layout->product.numel() == 0 || p.k == 0) return std::nullopt;
  std::tie(p.src_dims, p.src_strides) = permutedView(call.op.operands[0].shape, layout->perm_a, p.transpose_a);
  std::tie(p.weights_dims, p.weights_strides) = permutedView(call.op.operands[1].shape, layout->perm_b, p.transpose_b);
  // The product's dim perm_result[j] is the result's dim j.
  const std::vector<int64_t>& perm = layout->perm_result;
  const Shape& result = call.op.results[0].shape;
  p.dst_dims.assign(perm.size(), 0);
  p.dst_strides.assign(perm.size(), 0);
  for (int64_t j = static_cast<int64_t>(result.size()) - 1, stride = 1; j >= 0; stride *= result[j--]) {
    p.dst_dims[static_cast<size_t>(perm[j])] = result[j];
    p.dst_strides[static_cast<size_t>(perm[j])] = stride;
  }
  return p;
}

// The product a call asks for, or nullopt when oneDNN does not take it here: one 2-D GEMM after
// folding a's batch dims into m (matmul with a 2-D b), a batch of GEMMs over batch dims that a and b
// share without broadcasting, gemm with alpha 1 and at most a bias row, fused_matmul as those with
// its bias row or, when it permutes, strided (fusedProductOf).
std::optional<Product> productOf(const KernelCall& call) {
  if (call.op.operands[0].dtype != DType::kF32) return std::nullopt;
  // A fused_matmul that permutes nothing (a bias folded in alone) is a matmul with a bias row.
  const bool fused = call.op.def.id == OpId::fused_matmul;
  if (fused && permutesAnything(call)) return fusedProductOf(call);
  const Shape& a = call.op.operands[0].shape;
  const Shape& b = call.op.operands[1].shape;
  const Shape& out = call.op.results[0].shape;
  Product p;
  p.transpose_a = call.op.getInt("transpose_a") != 0;
  p.transpose_b = call.op.getInt("transpose_b") != 0;
  p.has_bias = fused && call.op.operands.size() == 3;
  if ((call.op.def.id == OpId::matmul || fused) && b.size() > 2) {
    p.batch = unbroadcastBatch(a, b, out);
    if (p.batch == 0) return std::nullopt;
    p.m = out[out.size() - 2];
    p.n = out.back();
    p.k = p.transpose_a ? a[a.size() - 2] : a.back();
    if (p.m == 0 || p.n == 0 || p.k == 0) return std::nullopt;
    p.constant_weights = call.constants_generation != 0 && (call.constant_operands & 2u) != 0;
    return p;
  }
  if (b.size() != 2 || a.size() < 2) return std::nullopt;
  if (p.transpose_a && a.size() != 2) return std::nullopt;  // a transposed batch does not fold into m
  p.k = p.transpose_a ? a[0] : a.back();
  p.n = out.back();
  p.m = call.op.results[0].numel() / std::max<int64_t>(p.n, 1);  // matmul folds a's batch dims into m
  if (call.op.def.id == OpId::gemm) {
    if (call.op.getFloat("alpha") != 1.0) return std::nullopt;
    const double beta = call.op.getFloat("beta");
    if (call.op.operands.size() == 3 && beta != 0.0) {
      const Shape& c = call.op.operands[2].shape;
      const bool bias_row = (c.size() == 1 && c[0] == p.n) || (c.size() == 2 && c[0] == 1 && c[1] == p.n);
      if (beta != 1.0 || !bias_row) return std::nullopt;
      p.has_bias = true;
    }
  }
  if (p.m == 0 || p.n == 0 || p.k == 0) return std::nullopt;
  p.constant_weights = call.constants_generation != 0 && (call.constant_operands & 2u) != 0;
  return p;
}

// A prepared product: the primitive, the plan's buffers as memories, the packed weights.
struct PreparedMatmul {
  bool supported = false;
  dnnl::matmul primitive;
  memory source, plain_weights, packed_weights, bias, destination, scratchpad;
  float scale = 1.0f;  // the scaled product's scale, which `scale_memory` reads
  memory scale_memory;
  dnnl::reorder pack;
  uint64_t packed_generation = 0;  // the constants_generation packed_weights holds
  std::unordered_map<int, memory> arguments;  // the primitive's arguments, made once: calls only set handles
};

void prepare(const Product& p, PreparedMatmul& out) {
  const auto f32 = memory::data_type::f32;
  // 2-D, or 3-D with the batch outermost; a transposed operand swaps its last two dims' strides.
  const bool batched = p.batch > 1;
  auto dims = [&](int64_t rows, int64_t columns) {
    return batched ? memory::dims{p.batch, rows, columns} : memory::dims{rows, columns};
  };
  auto tag = [&](bool transposed) {
    return batched ? (transposed ? Tag::acb : Tag::abc) : (transposed ? Tag::ba : Tag::ab);
  };
  const bool strided = !p.src_dims.empty();
  const memory::desc source = strided ? memory::desc(p.src_dims, f32, p.src_strides)
                                      : memory::desc(dims(p.m, p.k), f32, tag(p.transpose_a));
  const memory::desc destination = strided ? memory::desc(p.dst_dims, f32, p.dst_strides)
                                           : memory::desc(dims(p.m, p.n), f32, tag(false));
  const memory::desc plain_weights = strided ? memory::desc(p.weights_dims, f32, p.weights_strides)
                                             : memory::desc(dims(p.k, p.n), f32, tag(p.transpose_b));
  // Constant weights in the layout the kernel reads best, reordered once; others read in place.
  const memory::desc weights = p.constant_weights ? memory::desc(dims(p.k, p.n), f32, Tag::any) : plain_weights;
  // The bias row, broadcast over every dim of the destination but the last.
  memory::dims bias_dims(strided ? p.dst_dims.size() : batched ? 3 : 2, 1);
  bias_dims.back() = p.n;
  memory::dims bias_strides(bias_dims.size(), p.n);
  bias_strides.back() = 1;
  const memory::desc bias(bias_dims, f32, bias_strides);
  dnnl::primitive_attr attributes;
  attributes.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // Post-ops: times the call's scale (a [1, 1] tensor broadcast, read at each call), then plus
  // sum_scale times the old destination.
  const memory::desc scale_desc(memory::dims(batched ? 3 : 2, 1), f32, batched ? Tag::abc : Tag::ab);
  if (p.scaled || p.sum_scale != 0.0f) {
    dnnl::post_ops post_ops;
    if (p.scaled) post_ops.append_binary(dnnl::algorithm::binary_mul, scale_desc);
    if (p.sum_scale != 0.0f) post_ops.append_sum(p.sum_scale);
    attributes.set_post_ops(post_ops);
  }
  const dnnl::matmul::primitive_desc pd(
      p.has_bias ? dnnl::matmul::desc(source, weights, bias, destination)
                 : dnnl::matmul::desc(source, weights, destination),
      attributes, cpuEngine());
  out.primitive = dnnl::matmul(pd);
  out.source = memory(source, cpuEngine(), DNNL_MEMORY_NONE);
  out.destination = memory(destination, cpuEngine(), DNNL_MEMORY_NONE);
  out.plain_weights = memory(plain_weights, cpuEngine(), DNNL_MEMORY_NONE);
  if (p.constant_weights) {
    out.packed_weights = memory(pd.weights_desc(), cpuEngine());
    out.pack = dnnl::reorder(out.plain_weights, out.packed_weights);
  }
  out.scratchpad = memory(pd.scratchpad_desc(), cpuEngine());
  out.arguments = {{DNNL_ARG_SRC, out.source},
                   {DNNL_ARG_WEIGHTS, p.constant_weights ? out.packed_weights : out.plain_weights},
                   {DNNL_ARG_DST, out.destination},
                   {DNNL_ARG_SCRATCHPAD, out.scratchpad}};
  if (p.has_bias) {
    out.bias = memory(bias, cpuEngine(), DNNL_MEMORY_NONE);
    out.arguments.emplace(DNNL_ARG_BIAS, out.bias);
  }
  if (p.scaled) {
    out.scale_memory = memory(scale_desc, cpuEngine(), &out.scale);
    out.arguments.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, out.scale_memory);
  }
  out.supported = true;
}

// Runs product p of `call` (p.m etc. from its operands `a_index`, `a_index` + 1 and, with a bias,
// + 2) into `destination`; `scale` is the scaled product's.
std::optional<Status> runProduct(const KernelCall& call, const Product& p, int a_index, void* destination,
                                 float scale) {
  const int threads = threadCount(call);
  OpenMpThreads omp_threads(threads);
  const void* weights = call.inputs[static_cast<size_t>(a_index) + 1];

  // One entry per shape, transposes, post-ops and thread count; with constant weights, per weights tensor.
  std::vector<int64_t> key = {
      p.constant_weights ? static_cast<int64_t>(reinterpret_cast<intptr_t>(weights)) : 0,
      static_cast<int64_t>(call.op.def.id), p.batch, p.m, p.k, p.n, p.transpose_a, p.transpose_b, p.has_bias,
      p.scaled, static_cast<int64_t>(std::bit_cast<uint32_t>(p.sum_scale)), threads};
  for (const memory::dims* layout : {&p.src_dims, &p.src_strides, &p.weights_dims, &p.weights_strides, &p.dst_dims,
                                     &p.dst_strides}) {
    key.push_back(static_cast<int64_t>(layout->size()));
    key.insert(key.end(), layout->begin(), layout->end());
  }
  thread_local std::map<std::vector<int64_t>, std::unique_ptr<PreparedMatmul>> prepared;
  std::unique_ptr<PreparedMatmul>& entry = prepared[key];
  if (!entry) {
    entry = std::make_unique<PreparedMatmul>();
    try {
      prepare(p, *entry);
    } catch (const dnnl::error&) {
      entry->supported = false;  // no oneDNN implementation: OpenBLAS runs it
    }
  }
  if (!entry->supported) return std::nullopt;

  try {
    dnnl::stream& stream = threadStream();
    entry->plain_weights.set_data_handle(const_cast<void*>(weights));
    if (p.constant_weights && entry->packed_generation != call.constants_generation) {
      entry->pack.execute(stream, entry->plain_weights, entry->packed_weights);
      entry->packed_generation = call.constants_generation;
    }
    entry->source.set_data_handle(const_cast<void*>(call.inputs[static_cast<size_t>(a_index)]));
    entry->destination.set_data_handle(destination);
    if (p.has_bias) entry->bias.set_data_handle(const_cast<void*>(call.inputs[static_cast<size_t>(a_index) + 2]));
    entry->scale = scale;
    entry->primitive.execute(stream, entry->arguments);
    stream.wait();
  } catch (const dnnl::error& e) {
    return Status::internal(std::string(call.op.def.name) + ": oneDNN failed: " + e.what());
  }
  return Status::ok();
}

}  // namespace

std::optional<Status> runOneDnnMatmul(const KernelCall& call) {
  const std::optional<Product> product = productOf(call);
  if (!product) return std::nullopt;
  return runProduct(call, *product, 0, call.outputs[0], 1.0f);
}

std::optional<Status> runOneDnnProductInto(const KernelCall& call, float* target, std::optional<float> scale,
                                           float sum_scale) {
  if (call.op.operands[1].dtype != DType::kF32) return std::nullopt;
  const ops::SgdMatmulGemm gemm = ops::sgdMatmulGemm(call.op);
  Product p;
  p.transpose_a = gemm.transpose_a;
  p.transpose_b = gemm.transpose_b;
  p.m = gemm.m;
  p.k = gemm.k;
  p.n = gemm.n;
  if (p.m == 0 || p.n == 0 || p.k == 0) return std::nullopt;
  p.scaled = scale.has_value();
  p.sum_scale = sum_scale;
  return runProduct(call, p, 1, target, scale.value_or(1.0f));
}

}  // namespace cleave::runtime::cpu
