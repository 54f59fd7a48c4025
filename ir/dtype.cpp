// Element types of tensors: names, sizes and parsing.
#include "ir/dtype.h"

#include <array>
#include <cstring>

namespace cleave {
namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int64_t size;
};
constexpr std::array<DTypeInfo, 9> kDTypes = {{
    {DType::kF32, "f32", 4},
    {DType::kF16, "f16", 2},
    {DType::kBF16, "bf16", 2},
    {DType::kF64, "f64", 8},
    {DType::kI64, "i64", 8},
    {DType::kI32, "i32", 4},
    {DType::kI8, "i8", 1},
    {DType::kU8, "u8", 1},
    {DType::kBool, "bool", 1},
}};
}  // namespace

std::string_view dtypeName(DType dtype) { return kDTypes[static_cast<int>(dtype)].name; }

std::optional<DType> parseDType(std::string_view name) {
  for (const auto& info : kDTypes)
    if (info.name == name) return info.dtype;
  return std::nullopt;
}

int64_t dtypeSize(DType dtype) { return kDTypes[static_cast<int>(dtype)].size; }

bool isFloat(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kF64; }

bool isInteger(DType d) { return d == DType::kI64 || d == DType::kI32 || d == DType::kI8 || d == DType::kU8; }

uint16_t bfloat16Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // keep NaN a NaN
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

float bfloat16Value(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

}  // namespace cleave
