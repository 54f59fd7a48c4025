// safetensors files: a JSON header of named tensors (dtype, shape, byte range) followed by their data.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ir/status.h"
#include "ir/tensor_type.h"

namespace cleave::runtime {

// A tensor to write: its name, type, and data (type.bytes() bytes, little-endian, row-major).
struct SafetensorsEntry {
  std::string name;
  TensorType type;
  const void* data = nullptr;
};

// A tensor read from a file, owning its bytes.
struct SafetensorsTensor {
  std::string name;
  TensorType type;
  std::vector<uint8_t> data;
};

// The contents of a safetensors file, tensors in the order of their data offsets.
struct SafetensorsFile {
  std::vector<SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;  // the "__metadata__" object

  // The tensor named `name`, or nullptr.
  const SafetensorsTensor* find(const std::string& name) const;
};

// Writes `tensors` (in the given order, data packed without gaps) and `metadata` to `path`
// atomically. Dtypes map to F32 F64 F16 BF16 I64 I32 I8 U8 BOOL.
Status writeSafetensors(const std::string& path, std::span<const SafetensorsEntry> tensors,
                        const std::map<std::string, std::string>& metadata);

// Reads a safetensors file. A corrupt file (bad header length, bad JSON, unknown dtype, offsets out
// of range, overlapping or leaving gaps, shape and byte count disagreeing) gives kBadInput naming the file.
Expected<SafetensorsFile> readSafetensors(const std::string& path);

}  // namespace cleave::runtime
