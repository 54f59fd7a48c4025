// Element types of tensors: names, sizes and parsing.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace cleave {

// The element type of a tensor.
enum class DType : uint8_t { kF32, kF16, kBF16, kF64, kI64, kI32, kI8, kU8, kBool };

// The text name of a dtype ("f32", "bool", ...), as written in .cir files.
std::string_view dtypeName(DType dtype);
// Parses a dtype name; nullopt when it is not one.
std::optional<DType> parseDType(std::string_view name);
// Bytes per element.
int64_t dtypeSize(DType dtype);
// True for f32, f16, bf16, f64.
bool isFloat(DType dtype);
// True for i64, i32, i8, u8.
bool isInteger(DType dtype);
// bfloat16 bits of `value`: the top half of the f32 bits, rounded to nearest even (NaN stays NaN).
uint16_t bfloat16Bits(float value);
// The float a bfloat16 holds (exact).
float bfloat16Value(uint16_t bits);

}  // namespace cleave
