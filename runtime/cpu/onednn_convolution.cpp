// f32 convolutions through oneDNN: primitives made once per shape and thread, buffers reordered
// between the plan's plain layouts (NCHW or NHWC images, OIHW weights) and the layouts oneDNN's
// kernels choose (NHWC on AVX-512: a conv2d with layout NHWC then reads and writes the plan's
// buffers as they are).
#include "runtime/cpu/onednn_convolution.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/ops/image_layout.h"
#include "runtime/cpu/cpu_kernel_support.h"
#include "runtime/cpu/onednn_support.h"

namespace cleave::runtime::cpu {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// One tensor a primitive reads or writes: the plan's buffer (plain layout) and, when the primitive
// wants another layout, a staging buffer and the reorder between the two.
struct StagedTensor {
  memory user;                    // the plan's buffer; its handle is set at each call
  memory library;                 // what the primitive reads or writes (== user when no reorder)
  std::optional<dnnl::reorder> reorder;  // user -> library for an input, library -> user for an output

  void prepare(const memory::desc& user_desc, const memory::desc& wanted, bool is_input) {
    user = memory(user_desc, cpuEngine(), DNNL_MEMORY_NONE);
    if (wanted == user_desc) {
      library = user;
      return;
    }
    library = memory(wanted, cpuEngine());
    reorder = is_input ? dnnl::reorder(user, library) : dnnl::reorder(library, user);
  }
};

// A prepared convolution: its primitive, its tensors in argument order and its scratchpad.
struct PreparedConvolution {
  bool supported = false;
  dnnl::primitive primitive;
  std::vector<std::pair<int, StagedTensor>> inputs;   // (DNNL_ARG_*, tensor), reordered in before the run
  std::vector<std::pair<int, StagedTensor>> outputs;  // reordered out after the run
  // fused_conv2d's residual: the plan's buffer, copied into the output (in the primitive's layout)
  // before the run, which adds the convolution to it (a sum post-op).
  memory residual;
  std::optional<dnnl::reorder> residual_copy;
  memory scratchpad;
  std::unordered_map<int, memory> arguments;  // the primitive's arguments, made once: calls only set handles
  // For constant weights (KernelCall::constant_operands): the generation whose values the staged
  // copy holds; its reorder is skipped while the call's generation is the same.
  uint64_t staged_weights_generation = 0;
};

// conv2d or fused_conv2d (not a gradient).
bool isForward(const KernelCall& call) { return call.op.def.id == OpId::conv2d || call.op.def.id == OpId::fused_conv2d; }
// The weights operand of the call when they are constant and worth keeping reordered: the forward
// convolutions' operand 1 (the gradients' weights are never constant in a plan that trains).
bool hasConstantWeights(const KernelCall& call) {
  return isForward(call) && call.constants_generation != 0 && (call.constant_operands & 2u) != 0;
}
// fused_conv2d's relu.
bool endsWithRelu(const KernelCall& call) {
  return call.op.def.id == OpId::fused_conv2d && call.op.getString("activation") == "relu";
}

// Where a node allows Winograd (allow_winograd, set by passes/algorithm/winograd.h on inference
// graphs' 3x3 stride-1 convolutions), oneDNN's Winograd convolution (F(2x2,3x3) or F(4x4,3x3),
// AVX-512 only) runs when the output plane has at least this many pixels. Measured per shape against
// brgconv with ONEDNN_VERBOSE on this project's AVX-512 machine, ResNet-18 (ms a call, 1 / 2 threads):
//   64 ch 56x56 b1 3.39 -> 2.32 / 1.79 -> 1.13;  128 ch 28x28 b1 2.40 -> 1.96 / 1.28 -> 0.97;
//   256 ch 14x14 b1 2.41 -> 2.37 / 1.26 -> 1.00;  64 ch 16x16 b8 2.52 -> 1.62 / 1.29 -> 0.90;
//   but 512 ch 7x7 b1 3.18 -> 3.48 / 1.61 -> 1.67;  128 ch 8x8 b8 1.69 -> 1.71 / 0.95 -> 0.89;
//   256 ch 4x4 b8 2.39 -> 2.42 / 1.15 -> 1.34 (sums over the net's convolutions of each shape).
// Winograd reads and writes blocked images (nChw16c), so each call also reorders its image in and
// its result out: the end-to-end gains are ResNet-18 224x224 b1 14.2 -> 11.8 ms (1 thread) and
// 7.6 -> 6.8 ms (2 threads).
constexpr int64_t kMinWinogradOutputPlane = 14 * 14;

bool triesWinograd(const KernelCall& call, const Shape& y) {
  return isForward(call) && call.op.getInt("allow_winograd") == 1 && y[2] * y[3] >= kMinWinogradOutputPlane;
}

// The shapes and attributes that decide a primitive: op, layout, activation, algorithm, x, w, y shapes
// (NCHW), window, groups, bias, threads.
std::vector<int64_t> problemKey(const KernelCall& call, const Shape& x, const Shape& w, const Shape& y, const Window2d& window,
                                int64_t groups) {
  std::vector<int64_t> key = {static_cast<int64_t>(call.op.def.id), static_cast<int64_t>(call.op.operands.size()),
                              threadCount(call), groups, isChannelsLast(call.op) ? 1 : 0, endsWithRelu(call) ? 1 : 0,
                              triesWinograd(call, y) ? 1 : 0};
  for (const Shape* s : {&x, &w, &y}) key.insert(key.end(), s->begin(), s->end());
  key.insert(key.end(), {window.stride_h, window.stride_w, window.dilation_h, window.dilation_w, window.pad_top,
                         window.pad_left, window.pad_bottom, window.pad_right});
  // Constant weights keep their own staged copy: one entry per weights tensor.
  if (hasConstantWeights(call)) key.push_back(static_cast<int64_t>(reinterpret_cast<intptr_t>(call.inputs[1])));
  return key;
}

// The generation of the call's weights a staged copy holds once they are reordered (0: not constant,
// reorder at every call); a copy staged at the same generation can be used without a reorder.
uint64_t weightsGeneration(const KernelCall& call) { return hasConstantWeights(call) ? call.constants_generation : 0; }
bool stagedWeightsCurrent(const KernelCall& call, uint64_t staged_generation) {
  return hasConstantWeights(call) && staged_generation == call.constants_generation;
}

// This thread's prepared primitive for `key`, made by prepare(entry) at its first call; `supported`
// stays false where oneDNN has no implementation (prepare threw).
template <class Prepared, class Prepare>
Prepared& preparedFor(std::map<std::vector<int64_t>, std::unique_ptr<Prepared>>& cache, const std::vector<int64_t>& key,
                      Prepare&& prepare) {
  std::unique_ptr<Prepared>& entry = cache[key];
  if (!entry) {
    entry = std::make_unique<Prepared>();
    try {
      prepare(*entry);
    } catch (const dnnl::error&) {
      entry->supported = false;
    }
  }
  return *entry;
}

// Makes the primitive of one problem; leaves `supported` false when oneDNN has none for it.
void prepare(const KernelCall& call, const Shape& x, const Shape& w, const Shape& y, const Window2d& window,
             int64_t groups, PreparedConvolution& out) {
  const memory::dims x_dims(x.begin(), x.end()), y_dims(y.begin(), y.end());
  memory::dims w_dims(w.begin(), w.end());
  Tag w_tag = Tag::oihw;
  if (groups > 1) {  // OIHW with O = groups · O/groups is goihw's memory order
    w_dims = {groups, w[0] / groups, w[1], w[2], w[3]};
    w_tag = Tag::goihw;
  }
  const auto f32 = memory::data_type::f32;
  const Tag image = isChannelsLast(call.op) ? Tag::nhwc : Tag::nchw;
  const memory::desc x_plain(x_dims, f32, image), y_plain(y_dims, f32, image), w_plain(w_dims, f32, w_tag);
  const memory::desc x_any(x_dims, f32, Tag::any), y_any(y_dims, f32, Tag::any), w_any(w_dims, f32, Tag::any);
  const memory::dims strides = {window.stride_h, window.stride_w};
  const memory::dims dilations = {window.dilation_h - 1, window.dilation_w - 1};  // oneDNN counts from 0
  const memory::dims pad_low = {window.pad_top, window.pad_left}, pad_high = {window.pad_bottom, window.pad_right};
  dnnl::primitive_attr attributes;
  attributes.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // fused_conv2d: + residual, then relu, as post-ops. The residual comes in through the output: a sum
  // post-op (oneDNN 2.6's brgconv kernels take it; with a binary add of a whole tensor it falls back
  // to its gemm convolution on NCHW, 6x slower on ResNet-18).
  const bool has_residual = call.op.def.id == OpId::fused_conv2d && call.op.operands.size() == 4;
  if (call.op.def.id == OpId::fused_conv2d) {
    dnnl::post_ops post_ops;
    if (has_residual) post_ops.append_sum(1.0f);
    if (endsWithRelu(call)) post_ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attributes.set_post_ops(post_ops);
  }
  // Direct, or Winograd where the node allows it (the gradients are always direct).
  const auto direct = dnnl::algorithm::convolution_direct;
  const bool has_bias = call.op.operands.size() >= 3;
  const memory::desc bias_plain({y[1]}, f32, Tag::x);
  const auto forward_prop = isForward(call) ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
  auto forwardWith = [&](dnnl::algorithm algorithm) {
    const dnnl::convolution_forward::desc forward_desc =
        has_bias && isForward(call)
            ? dnnl::convolution_forward::desc(forward_prop, algorithm, x_any, w_any, bias_plain, y_any, strides,
                                              dilations, pad_low, pad_high)
            : dnnl::convolution_forward::desc(forward_prop, algorithm, x_any, w_any, y_any, strides, dilations, pad_low,
                                              pad_high);
    return dnnl::convolution_forward::primitive_desc(forward_desc, attributes, cpuEngine());
  };
  std::optional<dnnl::convolution_forward::primitive_desc> winograd;
  if (triesWinograd(call, y)) {
    try {
      winograd = forwardWith(dnnl::algorithm::convolution_winograd);
    } catch (const dnnl::error&) {  // none for this shape or CPU: direct
    }
  }
  const dnnl::convolution_forward::primitive_desc forward = winograd ? *winograd : forwardWith(direct);
  dnnl::primitive_desc_base chosen;
  auto input = [&](int arg, const memory::desc& plain, const memory::desc& wanted) {
    out.inputs.emplace_back(arg, StagedTensor{});
    out.inputs.back().second.prepare(plain, wanted, true);
  };
  auto output = [&](int arg, const memory::desc& plain, const memory::desc& wanted) {
    out.outputs.emplace_back(arg, StagedTensor{});
    out.outputs.back().second.prepare(plain, wanted, false);
  };
  if (isForward(call)) {
    input(DNNL_ARG_SRC, x_plain, forward.src_desc());
    input(DNNL_ARG_WEIGHTS, w_plain, forward.weights_desc());
    if (has_bias) input(DNNL_ARG_BIAS, bias_plain, bias_plain);
    output(DNNL_ARG_DST, y_plain, forward.dst_desc());
    if (has_residual) {
      out.residual = memory(y_plain, cpuEngine(), DNNL_MEMORY_NONE);
      out.residual_copy = dnnl::reorder(out.residual, out.outputs.back().second.library);
    }
    out.primitive = dnnl::convolution_forward(forward);
    chosen = forward;
  } else if (call.op.def.id == OpId::conv2d_grad_input) {
    const dnnl::convolution_backward_data::primitive_desc backward(
        dnnl::convolution_backward_data::desc(direct, x_any, w_any, y_any, strides, dilations, pad_low, pad_high),
        attributes, cpuEngine(), forward);
    input(DNNL_ARG_DIFF_DST, y_plain, backward.diff_dst_desc());
    input(DNNL_ARG_WEIGHTS, w_plain, backward.weights_desc());
    output(DNNL_ARG_DIFF_SRC, x_plain, backward.diff_src_desc());
    out.primitive = dnnl::convolution_backward_data(backward);
    chosen = backward;
  } else {
    const dnnl::convolution_backward_weights::primitive_desc backward(
        dnnl::convolution_backward_weights::desc(direct, x_any, w_any, y_any, strides, dilations, pad_low, pad_high),
        attributes, cpuEngine(), forward);
    input(DNNL_ARG_DIFF_DST, y_plain, backward.diff_dst_desc());
    input(DNNL_ARG_SRC, x_plain, backward.src_desc());
    output(DNNL_ARG_DIFF_WEIGHTS, w_plain, backward.diff_weights_desc());
    out.primitive = dnnl::convolution_backward_weights(backward);
    chosen = backward;
  }
  out.scratchpad = memory(chosen.scratchpad_desc(), cpuEngine());
  for (const auto& staged : {&out.inputs, &out.outputs})
    for (const auto& [arg, tensor] : *staged) out.arguments.emplace(arg, tensor.library);
  out.arguments.emplace(DNNL_ARG_SCRATCHPAD, out.scratchpad);
  out.supported = true;
}

// ---- conv2d on tiny output planes: one matmul over the whole batch ----
//
// Where each image's output plane has at most this many pixels (ResNet's last stage on 64x64
// images: 2x2), oneDNN's direct convolution spends most of its work on the padding around the
// plane: 1.75 ms a call for 8 images of 512 channels against 1.06 ms for the same product as one
// matmul (ONEDNN_VERBOSE, one thread of this project's AVX-512 machine; ResNet-18 at 64x64, batch 8,
// 16.2 -> 14.4 ms end to end). There the convolution runs as columns [N·Ho·Wo, C·kh·kw] (im2col
// over the whole batch) times the weights' transpose [C·kh·kw, O] on oneDNN's matmul, the weights
// packed once when constant.
constexpr int64_t kMaxGemmOutputPlane = 4;

bool runsAsBatchedGemm(const KernelCall& call, const Shape& w, const Shape& y, int64_t groups) {
  return isForward(call) && groups == 1 && y[2] * y[3] <= kMaxGemmOutputPlane && w[2] * w[3] > 1;
}

struct PreparedGemmConvolution {
  bool supported = false;
  dnnl::matmul primitive;
  memory columns, products;      // [N·Ho·Wo, C·kh·kw] and [N·Ho·Wo, O], owned (products: y itself when NHWC)
  StagedTensor weights;          // the plan's OIHW as [C·kh·kw, O] (transposed), packed when constant
  memory bias, scratchpad;
  std::unordered_map<int, memory> arguments;
  uint64_t staged_weights_generation = 0;
};

void prepareGemm(const KernelCall& call, const Shape& w, const Shape& y, PreparedGemmConvolution& out) {
  const auto f32 = memory::data_type::f32;
  const int64_t rows = y[0] * y[2] * y[3], patch = w[1] * w[2] * w[3], channels = w[0];
  const memory::desc columns({rows, patch}, f32, Tag::ab), products({rows, channels}, f32, Tag::ab);
  const memory::desc plain_weights({patch, channels}, f32, Tag::ba);
  const memory::desc weights = hasConstantWeights(call) ? memory::desc({patch, channels}, f32, Tag::any) : plain_weights;
  const memory::desc bias({1, channels}, f32, Tag::ab);
  const bool has_bias = call.op.operands.size() == 3;
  dnnl::primitive_attr attributes;
  attributes.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::matmul::primitive_desc pd(has_bias ? dnnl::matmul::desc(columns, weights, bias, products)
                                                 : dnnl::matmul::desc(columns, weights, products),
                                        attributes, cpuEngine());
  out.primitive = dnnl::matmul(pd);
  out.columns = memory(columns, cpuEngine());
  out.products = isChannelsLast(call.op) ? memory(products, cpuEngine(), DNNL_MEMORY_NONE) : memory(products, cpuEngine());
  out.weights.prepare(plain_weights, pd.weights_desc(), true);
  out.scratchpad = memory(pd.scratchpad_desc(), cpuEngine());
  out.arguments = {{DNNL_ARG_SRC, out.columns},
                   {DNNL_ARG_WEIGHTS, out.weights.library},
                   {DNNL_ARG_DST, out.products},
                   {DNNL_ARG_SCRATCHPAD, out.scratchpad}};
  if (has_bias) {
    out.bias = memory(bias, cpuEngine(), DNNL_MEMORY_NONE);
    out.arguments.emplace(DNNL_ARG_BIAS, out.bias);
  }
  out.supported = true;
}

// columns[(n·Ho + oh)·Wo + ow, (c·kh + i)·kw + j] = x[n, c, oh·sh − pad_top + i·dh, ow·sw − pad_left + j·dw],
// 0 in the padding: rows per output pixel of every image, where cpu_kernels_convolution.cpp's
// im2col lays out one image's [C·kh·kw, Ho·Wo] for a GEMM per image. `xs` is NCHW; x is NHWC when
// `channels_last`.
void batchedIm2col(const float* x, const Shape& xs, bool channels_last, const Window2d& window, int64_t kernel_h,
                   int64_t kernel_w, float* columns) {
  const int64_t channels = xs[1], patch = channels * kernel_h * kernel_w;
  // Where x[n, c, h, w] is: its plane's start and the steps between rows and between pixels.
  const int64_t row_step = channels_last ? xs[3] * channels : xs[3], pixel_step = channels_last ? channels : 1;
  for (int64_t n = 0; n < xs[0]; ++n)
    for (int64_t oh = 0; oh < window.out_height; ++oh)
      for (int64_t ow = 0; ow < window.out_width; ++ow) {
        float* row = columns + ((n * window.out_height + oh) * window.out_width + ow) * patch;
        for (int64_t c = 0; c < channels; ++c) {
          const float* plane = x + (channels_last ? n * channels * xs[2] * xs[3] + c : (n * channels + c) * xs[2] * xs[3]);
          for (int64_t i = 0; i < kernel_h; ++i) {
            const int64_t ih = oh * window.stride_h - window.pad_top + i * window.dilation_h;
            for (int64_t j = 0; j < kernel_w; ++j) {
              const int64_t iw = ow * window.stride_w - window.pad_left + j * window.dilation_w;
              *row++ = ih >= 0 && ih < xs[2] && iw >= 0 && iw < xs[3] ? plane[ih * row_step + iw * pixel_step] : 0.0f;
            }
          }
        }
      }
}

Status runGemmConvolution(const KernelCall& call, const Shape& x, const Shape& w, const Shape& y,
                          const Window2d& window, PreparedGemmConvolution& entry) {
  dnnl::stream& stream = threadStream();
  const bool channels_last = isChannelsLast(call.op);
  batchedIm2col(call.in<float>(0), x, channels_last, window, w[2], w[3],
                static_cast<float*>(entry.columns.get_data_handle()));
  if (channels_last) entry.products.set_data_handle(call.outputs[0]);  // [N·Ho·Wo, O] is NHWC y
  entry.weights.user.set_data_handle(const_cast<void*>(call.inputs[1]));
  if (entry.weights.reorder && !stagedWeightsCurrent(call, entry.staged_weights_generation))
    entry.weights.reorder->execute(stream, entry.weights.user, entry.weights.library);
  entry.staged_weights_generation = weightsGeneration(call);
  if (call.op.operands.size() == 3) entry.bias.set_data_handle(const_cast<void*>(call.inputs[2]));
  entry.primitive.execute(stream, entry.arguments);
  stream.wait();
  if (channels_last) return Status::ok();
  // products [N·Ho·Wo, O] -> y [N, O, Ho, Wo]
  const auto* products = static_cast<const float*>(entry.products.get_data_handle());
  float* out = call.out<float>(0);
  const int64_t plane = y[2] * y[3], channels = y[1];
  for (int64_t n = 0; n < y[0]; ++n)
    for (int64_t o = 0; o < channels; ++o)
      for (int64_t p = 0; p < plane; ++p) out[(n * channels + o) * plane + p] = products[(n * plane + p) * channels + o];
  return Status::ok();
}

}  // namespace

Expected<ConvolutionImplementation> chosenConvolutionImplementation() {
  static const Expected<ConvolutionImplementation> chosen = []() -> Expected<ConvolutionImplementation> {
    const char* value = std::getenv("CLEAVE_CPU_CONVOLUTION");
    const std::string name = value ? value : "onednn";
    if (name == "onednn") return ConvolutionImplementation::kOneDnn;
    if (name == "im2col") return ConvolutionImplementation::kIm2colGemm;
    return Status::usage("CLEAVE_CPU_CONVOLUTION is '" + name + "'; expected onednn or im2col");
  }();
  return chosen;
}

std::optional<Status> runOneDnnConvolution(const KernelCall& call) {
  // x, w and y in the forward convolution's terms, whichever of the three ops this is; x and y NCHW.
  const OpId op = call.op.def.id;
  const bool channels_last = isChannelsLast(call.op);
  const bool forward = isForward(call);
  const Shape x = asNchw(forward ? call.op.operands[0].shape
                         : op == OpId::conv2d_grad_input ? call.op.results[0].shape : call.op.operands[1].shape,
                         channels_last);
  const Shape& w = op == OpId::conv2d_grad_weight ? call.op.results[0].shape : call.op.operands[1].shape;
  const Shape y = asNchw(forward ? call.op.results[0].shape : call.op.operands[0].shape, channels_last);
  for (const Shape* s : {&x, &w, &y})
    for (int64_t d : *s)
      if (d == 0) return std::nullopt;  // empty tensors: the caller's loops handle them
  const Window2d window = readWindow(call.op, x, y, w[2], w[3], false);
  const int64_t groups = call.op.getInt("groups");
  const int threads = threadCount(call);
  OpenMpThreads omp_threads(threads);

  const std::vector<int64_t> key = problemKey(call, x, w, y, window, groups);
  if (op == OpId::fused_conv2d && runsAsBatchedGemm(call, w, y, groups)) return std::nullopt;
  if (op == OpId::conv2d && runsAsBatchedGemm(call, w, y, groups)) {
    thread_local std::map<std::vector<int64_t>, std::unique_ptr<PreparedGemmConvolution>> prepared_gemms;
    PreparedGemmConvolution& gemm =
        preparedFor(prepared_gemms, key, [&](PreparedGemmConvolution& entry) { prepareGemm(call, w, y, entry); });
    if (gemm.supported) {  // else the direct convolution below runs it
      try {
        return runGemmConvolution(call, x, w, y, window, gemm);
      } catch (const dnnl::error& e) {
        return Status::internal(std::string(call.op.def.name) + ": oneDNN failed: " + e.what());
      }
    }
  }
  thread_local std::map<std::vector<int64_t>, std::unique_ptr<PreparedConvolution>> prepared;
  PreparedConvolution& entry = preparedFor(
      prepared, key, [&](PreparedConvolution& fresh) { prepare(call, x, w, y, window, groups, fresh); });
  if (!entry.supported) return std::nullopt;  // no implementation for these shapes: the caller's own kernel runs

  try {
    dnnl::stream& stream = threadStream();
    const int input_count = static_cast<int>(entry.inputs.size());
    // Operand order of each op, in the primitive's terms: conv2d and fused_conv2d (x, w, bias; the residual
    // apart), grad_input (dy, w), grad_weight (dy, x); prepare() listed the staged inputs in that order.
    for (int i = 0; i < input_count; ++i)
      entry.inputs[static_cast<size_t>(i)].second.user.set_data_handle(const_cast<void*>(call.inputs[i]));
    entry.outputs[0].second.user.set_data_handle(call.outputs[0]);
    const bool weights_staged = stagedWeightsCurrent(call, entry.staged_weights_generation);
    for (auto& [arg, tensor] : entry.inputs)
      if (tensor.reorder && !(arg == DNNL_ARG_WEIGHTS && weights_staged))
        tensor.reorder->execute(stream, tensor.user, tensor.library);
    entry.staged_weights_generation = weightsGeneration(call);
    if (entry.residual_copy) {
      entry.residual.set_data_handle(const_cast<void*>(call.inputs[3]));
      entry.residual_copy->execute(stream, entry.residual, entry.outputs[0].second.library);
    }
    entry.primitive.execute(stream, entry.arguments);
    for (auto& [arg, tensor] : entry.outputs)
      if (tensor.reorder) tensor.reorder->execute(stream, tensor.library, tensor.user);
    stream.wait();
  } catch (const dnnl::error& e) {
    return Status::internal(std::string(call.op.def.name) + ": oneDNN failed: " + e.what());
  }
  return Status::ok();
}

}  // namespace cleave::runtime::cpu
