// Reading and writing single tensor elements of any dtype as doubles, and f16/bf16 conversions.
#include "runtime/device/element_access.h"

#include <cmath>
#include <cstring>

namespace cleave::runtime {
namespace {

uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float bitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace

float halfToFloat(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1f;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return bitsToFloat(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
  if (exponent == 0) {
    // Zero or subnormal: mantissa · 2^-24, exact in float.
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return bitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t floatToHalf(float value) {
  uint32_t bits = floatBits(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs_bits >= 0x47800000u) return sign | 0x7c00u;  // >= 65536: infinity (rounds past the max)
  if (abs_bits < 0x38800000u) {
    // Below the smallest normal half (2^-14): round abs · 2^24 to the nearest even integer.
    float scaled = std::ldexp(bitsToFloat(abs_bits), 24);
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t rebased = abs_bits - (112u << 23);
  uint32_t rounding = 0xfffu + ((rebased >> 13) & 1u);
  return sign | static_cast<uint16_t>((rebased + rounding) >> 13);
}



double loadElement(DType dtype, const void* data, int64_t index) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(data)[index];
    case DType::kF64: return static_cast<const double*>(data)[index];
    case DType::kF16: return halfToFloat(static_cast<const uint16_t*>(data)[index]);
    case DType::kBF16: return bfloat16ToFloat(static_cast<const uint16_t*>(data)[index]);
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(data)[index]);
    case DType::kI32: return static_cast<const int32_t*>(data)[index];
    case DType::kI8: return static_cast<const int8_t*>(data)[index];
    case DType::kU8: return static_cast<const uint8_t*>(data)[index];
    case DType::kBool: return static_cast<const uint8_t*>(data)[index] != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}

void storeElement(DType dtype, void* data, int64_t index, double value) {
  switch (dtype) {
    case DType::kF32: static_cast<float*>(data)[index] = static_cast<float>(value); return;
    case DType::kF64: static_cast<double*>(data)[index] = value; return;
    case DType::kF16: static_cast<uint16_t*>(data)[index] = floatToHalf(static_cast<float>(value)); return;
    case DType::kBF16: static_cast<uint16_t*>(data)[index] = floatToBfloat16(static_cast<float>(value)); return;
    case DType::kI64: static_cast<int64_t*>(data)[index] = static_cast<int64_t>(value); return;
    case DType::kI32: static_cast<int32_t*>(data)[index] = static_cast<int32_t>(value); return;
    case DType::kI8: static_cast<int8_t*>(data)[index] = static_cast<int8_t>(value); return;
    case DType::kU8: static_cast<uint8_t*>(data)[index] = static_cast<uint8_t>(value); return;
    case DType::kBool: static_cast<uint8_t*>(data)[index] = value != 0.0 ? 1 : 0; return;
  }
}

}  // namespace cleave::runtime
