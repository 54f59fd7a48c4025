// Reading and writing single tensor elements of any dtype as doubles, and f16/bf16 conversions.
#pragma once

#include <cstdint>

#include "ir/dtype.h"

namespace cleave::runtime {

// IEEE half precision bits -> float (exact).
float halfToFloat(uint16_t bits);
// float -> IEEE half precision bits, rounding to nearest even (overflow gives infinity).
uint16_t floatToHalf(float value);
// bfloat16 bits -> float (exact).
float bfloat16ToFloat(uint16_t bits);
// float -> bfloat16 bits, rounding to nearest even (NaN stays NaN).
uint16_t floatToBfloat16(float value);

// Element `index` of a `dtype` array at `data`, as a double (bool: 0 or 1).
double loadElement(DType dtype, const void* data, int64_t index);
// Stores `value` into element `index` of a `dtype` array at `data`; integers truncate toward zero,
// bool stores value != 0.
void storeElement(DType dtype, void* data, int64_t index, double value);

}  // namespace cleave::runtime
