// .npy files (NumPy's array format, versions 1.0–3.0): reading and writing C-order arrays.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/status.h"
#include "ir/tensor_type.h"

namespace cleave::runtime {

// An array read from a .npy file: its type and its little-endian row-major bytes.
struct NpyArray {
  TensorType type;
  std::vector<uint8_t> data;
};

// Reads a .npy file. Dtypes: <f4 <f8 <f2 <i8 <i4 |i1 |u1 |b1 (f32 f64 f16 i64 i32 i8 u8 bool).
// kBadInput naming the file for Fortran order, big-endian or unknown dtypes, bad headers and
// truncated data.
Expected<NpyArray> readNpy(const std::string& path);

// Checks an array read from `path` has exactly type `expected`; the error names the file and both types.
Status checkNpyType(const NpyArray& array, const TensorType& expected, const std::string& path);

// kBadInput naming `path`, the row (dim 0) and the element within it when a float array holds NaN
// or an infinity: such data would only surface later as a NaN loss.
Status checkNpyFinite(const NpyArray& array, const std::string& path);

// Writes `data` (a tensor of `type`) to `path` atomically as a version 1.0 .npy file (2.0 when the
// header needs it). bf16 has no NumPy dtype: kBadInput.
Status writeNpy(const std::string& path, const TensorType& type, const void* data);

}  // namespace cleave::runtime
