// Reading and writing single tensor elements of any dtype as doubles, and f16/bf16 conversions.
#pragma once

#include <cstdint>
#include <cstring>

#include "ir/dtype.h"

namespace cleave::runtime {

// IEEE half precision bits -> float (exact).
float halfToFloat(uint16_t bits);
// float -> IEEE half precision bits, rounding to nearest even (overflow gives infinity).
uint16_t floatToHalf(float value);
// bfloat16 bits -> float (exact). Inline: kernels convert whole tensors with these, vectorised.
inline float bfloat16ToFloat(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}
// float -> bfloat16 bits, rounding to nearest even (NaN stays a quiet NaN).
inline uint16_t floatToBfloat16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  const bool nan = (word & 0x7fffffffu) > 0x7f800000u;
  const uint32_t rounded = (word + 0x7fffu + ((word >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(nan ? (word >> 16) | 0x40u : rounded);
}

// Element `index` of a `dtype` array at `data`, as a double (bool: 0 or 1).
double loadElement(DType dtype, const void* data, int64_t index);
// Stores `value` into element `index` of a `dtype` array at `data`; integers truncate toward zero,
// bool stores value != 0.
void storeElement(DType dtype, void* data, int64_t index, double value);

}  // namespace cleave::runtime
