// The one rule for casting a float to an integer dtype, shared by the reference, the CPU and the CUDA kernels.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ir/ops/host_device.h"

namespace cleave {

// `value` cast to integer type D as PyTorch casts on x86 CPUs (cvttsd2si): truncated toward zero;
// NaN, ±inf and values out of range give the "integer indefinite", INT64_MIN for i64 and INT32_MIN
// for narrower types, which i8 and u8 then wrap as they wrap any int32 (INT32_MIN becomes 0).
// Exporters rely on it: T5's mask casts -inf to i64 and masks the result later.
template <class D>
CLEAVE_HOST_DEVICE inline D floatToInteger(double value) {
  static_assert(std::is_integral_v<D>);
  if constexpr (sizeof(D) == 8) {
    if (!(value >= -9223372036854775808.0 && value < 9223372036854775808.0)) return static_cast<D>(INT64_MIN);
    return static_cast<D>(static_cast<int64_t>(value));
  } else {
    const int32_t wide = value > -2147483649.0 && value < 2147483648.0 ? static_cast<int32_t>(value) : INT32_MIN;
    return static_cast<D>(wide);  // modular for i8 and u8
  }
}

}  // namespace cleave
