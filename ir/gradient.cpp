// GradientContext: how gradient rules emit backward nodes, scalar constants and broadcast reductions.
#include "ir/gradient.h"

#include <cmath>
#include <cstring>

namespace cleave {
namespace {

// IEEE binary16 bits of `value`, rounded to nearest even (overflow gives infinity).
uint16_t halfBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0));
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to infinity
  if (magnitude < 0x38800000u) {
    // Below 2^-14 the result is subnormal: a multiple of 2^-24, which scaling by 2^24 makes an integer.
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(std::fabs(value) * 16777216.0f)));
  }
  const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));  // rebias the exponent 127 -> 15
}

template <class T>
void storeScalar(TensorData& tensor, T value) {
  tensor.bytes.resize(sizeof(T));
  std::memcpy(tensor.bytes.data(), &value, sizeof(T));
}

}  // namespace

std::shared_ptr<const TensorData> scalarTensor(double value, DType dtype) {
  auto tensor = std::make_shared<TensorData>();
  tensor->type = TensorType{dtype, {}};
  switch (dtype) {
    case DType::kF32: storeScalar(*tensor, static_cast<float>(value)); break;
    case DType::kF64: storeScalar(*tensor, value); break;
    case DType::kF16: storeScalar(*tensor, halfBits(static_cast<float>(value))); break;
    case DType::kBF16: storeScalar(*tensor, bfloat16Bits(static_cast<float>(value))); break;
    case DType::kI64: storeScalar(*tensor, static_cast<int64_t>(value)); break;
    case DType::kI32: storeScalar(*tensor, static_cast<int32_t>(value)); break;
    case DType::kI8: storeScalar(*tensor, static_cast<int8_t>(value)); break;
    case DType::kU8: storeScalar(*tensor, static_cast<uint8_t>(value)); break;
    case DType::kBool: storeScalar(*tensor, static_cast<uint8_t>(value != 0 ? 1 : 0)); break;
  }
  return tensor;
}

std::vector<ValueId> GradientContext::emitAll(OpId op, std::vector<ValueId> operands, AttrMap attrs) {
  if (!status.isOk()) return {};
  for (ValueId v : operands)
    if (v == kNoValue) {
      status = Status::internal(nodeContext(graph, node) + "its gradient rule passed a missing value to " +
                                std::string(opName(op)));
      return {};
    }
  // Backward nodes carry the forward node's location, so errors about them point at the model.
  auto results = graph.addNode(op, std::move(operands), std::move(attrs), node.loc);
  if (!results) {
    status = Status::internal(nodeContext(graph, node) + "its gradient rule emitted an invalid " +
                              std::string(opName(op)) + ": " + results.status().message());
    return {};
  }
  return std::move(*results);
}

ValueId GradientContext::emit(OpId op, std::vector<ValueId> operands, AttrMap attrs) {
  std::vector<ValueId> results = emitAll(op, std::move(operands), std::move(attrs));
  if (results.empty()) return kNoValue;
  if (results.size() != 1) {
    status = Status::internal(nodeContext(graph, node) + "its gradient rule used emit() for " +
                              std::string(opName(op)) + ", which has " + std::to_string(results.size()) + " results");
    return kNoValue;
  }
  return results[0];
}

ValueId GradientContext::scalar(double value, DType dtype) {
  return emit(OpId::constant, {}, {{"value", scalarTensor(value, dtype)}});
}

ValueId GradientContext::reduceToShape(ValueId grad, const Shape& target_shape) {
  if (grad == kNoValue || !status.isOk()) return kNoValue;
  const Shape shape = target_shape;  // a copy: emitting may move graph.values, which it may point into
  const Shape grad_shape = typeOf(grad).shape;
  if (grad_shape == shape) return grad;
  // 1. Broadcasting aligns shapes from the right: the grad's extra leading dims were added, and a
  //    target dim of 1 facing a larger grad dim was stretched. Both are summed over.
  const size_t added = grad_shape.size() - shape.size();
  if (grad_shape.size() < shape.size()) {
    status = Status::internal(nodeContext(graph, node) + "gradient " + typeOf(grad).str() +
                              " has fewer dims than its operand's shape " + shapeStr(shape));
    return kNoValue;
  }
  std::vector<int64_t> axes;
  bool only_added = true;
  for (size_t d = 0; d < grad_shape.size(); ++d) {
    bool stretched = d >= added && shape[d - added] == 1 && grad_shape[d] != 1;
    if (d < added || stretched) axes.push_back(static_cast<int64_t>(d));
    only_added = only_added && !stretched;
  }
  // 2. Sum (an empty axes list would mean "all axes", so skip the sum when there is nothing to
  //    reduce). When only added dims are summed, dropping them gives the shape; otherwise keep the
  //    dims and reshape the added leading ones away.
  ValueId summed = grad;
  if (!axes.empty())
    summed = emit(OpId::reduce_sum, {grad}, {{"axes", axes}, {"keepdims", int64_t{only_added ? 0 : 1}}});
  if (summed == kNoValue || typeOf(summed).shape == shape) return summed;
  return emit(OpId::reshape, {summed}, {{"shape", shape}});
}

}  // namespace cleave
