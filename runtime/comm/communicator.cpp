// Communicator: the collectives and point-to-point transfers ranks of a plan use, over explicit groups.
#include "runtime/comm/communicator.h"

#include <cstdint>

namespace cleave::runtime {

Expected<ReduceOp> parseReduceOp(std::string_view name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "mean") return ReduceOp::kMean;
  if (name == "max") return ReduceOp::kMax;
  return Status::badInput("unknown reduce op '" + std::string(name) + "' (sum, mean, max)");
}

std::string_view reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMean: return "mean";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

std::string groupText(std::span<const int> group) {
  std::string text = "{";
  for (size_t i = 0; i < group.size(); ++i) text += (i ? "," : "") + std::to_string(group[i]);
  return text + "}";
}

bool tensorsOverlap(const TensorView& a, const TensorView& b) {
  auto a0 = reinterpret_cast<uintptr_t>(a.data), b0 = reinterpret_cast<uintptr_t>(b.data);
  auto a_bytes = static_cast<uintptr_t>(a.type.bytes()), b_bytes = static_cast<uintptr_t>(b.type.bytes());
  return a_bytes > 0 && b_bytes > 0 && a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

namespace {

// `whole` is `part` with dim `dim` n times as long (and the same dtype).
bool growsAlong(const TensorType& part, const TensorType& whole, int64_t dim, int64_t n) {
  const Shape& p = part.shape;
  const Shape& w = whole.shape;
  bool fits = dim >= 0 && dim < part.rank() && p.size() == w.size() && part.dtype == whole.dtype;
  for (size_t d = 0; fits && d < p.size(); ++d) fits = w[d] == (static_cast<int64_t>(d) == dim ? p[d] * n : p[d]);
  return fits;
}

Status checkNoOverlap(std::string_view what, const TensorView& input, const TensorView& output) {
  if (tensorsOverlap(input, output)) return Status::badInput(std::string(what) + ": the output overlaps the input");
  return Status::ok();
}

}  // namespace

Status checkAllReduceBucket(std::string_view what, std::span<const TensorView> inputs,
                            std::span<const TensorView> outputs) {
  const std::string where(what);
  if (inputs.size() != outputs.size())
    return Status::badInput(where + ": " + std::to_string(inputs.size()) + " inputs but " +
                            std::to_string(outputs.size()) + " outputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].type.dtype != inputs[0].type.dtype || outputs[i].type.dtype != inputs[0].type.dtype ||
        inputs[i].type.numel() != outputs[i].type.numel())
      return Status::badInput(where + ": tensor " + std::to_string(i) + " (" + inputs[i].type.str() + " into " +
                              outputs[i].type.str() + ") does not match the bucket's dtype " +
                              std::string(dtypeName(inputs[0].type.dtype)) + " or its output");
    if (inputs[i].data != outputs[i].data && tensorsOverlap(inputs[i], outputs[i]))
      return Status::badInput(where + ": tensor " + std::to_string(i) + "'s output overlaps its input");
  }
  return Status::ok();
}

Status checkAllGather(std::string_view what, int64_t group_size, const TensorView& input, const TensorView& output,
                      int64_t dim) {
  if (!growsAlong(input.type, output.type, dim, group_size))
    return Status::badInput(std::string(what) + ": gathering " + input.type.str() + " along dim " + std::to_string(dim) +
                            " over " + std::to_string(group_size) + " ranks does not give " + output.type.str());
  return checkNoOverlap(what, input, output);
}

Status checkReduceScatter(std::string_view what, int64_t group_size, const TensorView& input,
                          const TensorView& output, int64_t dim) {
  if (!growsAlong(output.type, input.type, dim, group_size))
    return Status::badInput(std::string(what) + ": scattering " + input.type.str() + " along dim " +
                            std::to_string(dim) + " over " + std::to_string(group_size) + " ranks does not give " +
                            output.type.str());
  return checkNoOverlap(what, input, output);
}

Status checkAllToAll(std::string_view what, int64_t group_size, const TensorView& input, const TensorView& output,
                     int64_t split_dim, int64_t concat_dim) {
  const int64_t rank = input.type.rank();
  bool fits = split_dim >= 0 && split_dim < rank && concat_dim >= 0 && concat_dim < rank &&
              input.type.shape[static_cast<size_t>(split_dim)] % group_size == 0 &&
              input.type.dtype == output.type.dtype;
  Shape expected = input.type.shape;
  if (fits) {
    expected[static_cast<size_t>(split_dim)] /= group_size;
    expected[static_cast<size_t>(concat_dim)] *= group_size;
  }
  if (!fits || expected != output.type.shape)
    return Status::badInput(std::string(what) + ": splitting " + input.type.str() + " along dim " +
                            std::to_string(split_dim) + " and concatenating along dim " + std::to_string(concat_dim) +
                            " over " + std::to_string(group_size) + " ranks does not give " + output.type.str());
  return checkNoOverlap(what, input, output);
}

}  // namespace cleave::runtime
