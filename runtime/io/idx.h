// IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed: unsigned byte arrays.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/status.h"
#include "ir/tensor_type.h"

namespace cleave::runtime {

// An IDX array of unsigned bytes: its dims (e.g. [60000, 28, 28]) and row-major data.
struct IdxArray {
  Shape dims;
  std::vector<uint8_t> data;
};

// Reads an IDX file of unsigned bytes (type code 0x08), gzip-compressed or not. kBadInput naming
// the file for a bad magic number, another element type, or data shorter or longer than the dims say.
Expected<IdxArray> readIdx(const std::string& path);

}  // namespace cleave::runtime
