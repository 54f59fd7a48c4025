// IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed: unsigned byte arrays.
#include "runtime/io/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace cleave::runtime {
namespace {

constexpr uint8_t kUnsignedByteType = 0x08;
// The largest array this reader accepts (4 GiB), so a corrupt header cannot ask for more.
constexpr int64_t kMaxElements = int64_t{1} << 32;

struct GzCloser {
  void operator()(gzFile_s* file) const { gzclose(file); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly `bytes` bytes; false on a short read.
bool readExactly(gzFile file, void* out, int64_t bytes) {
  auto* next = static_cast<uint8_t*>(out);
  while (bytes > 0) {
    unsigned chunk = static_cast<unsigned>(std::min<int64_t>(bytes, 1 << 30));
    int got = gzread(file, next, chunk);
    if (got <= 0) return false;
    next += got;
    bytes -= got;
  }
  return true;
}

// Steps: magic (two zero bytes, type code, number of dims), big-endian u32 dims, then the data.
Expected<IdxArray> parseIdx(gzFile file) {
  // 1. Magic number.
  uint8_t magic[4];
  if (!readExactly(file, magic, 4)) return Status::badInput("truncated header");
  if (magic[0] != 0 || magic[1] != 0) return Status::badInput("not an IDX file (bad magic number)");
  if (magic[2] != kUnsignedByteType) {
    char code[8];
    std::snprintf(code, sizeof code, "0x%02x", magic[2]);
    return Status::badInput(std::string("element type ") + code + " is not supported (only unsigned bytes, 0x08)");
  }
  int rank = magic[3];
  if (rank == 0) return Status::badInput("IDX file has no dimensions");

  // 2. Dims, big-endian.
  IdxArray array;
  int64_t elements = 1;
  for (int i = 0; i < rank; ++i) {
    uint8_t b[4];
    if (!readExactly(file, b, 4)) return Status::badInput("truncated header (dimension " + std::to_string(i) + ")");
    int64_t dim = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | int64_t{b[3]};
    array.dims.push_back(dim);
    if (__builtin_mul_overflow(elements, dim, &elements) || elements > kMaxElements)
      return Status::badInput("dimensions " + shapeStr(array.dims) + " are too large");
  }

  // 3. Data: exactly the elements the dims say, nothing after. Read in chunks, so that a corrupt
  //    header announcing gigabytes costs no more memory than the data the file really holds.
  constexpr int64_t kChunkBytes = int64_t{16} << 20;
  bool complete = true;
  for (int64_t done = 0; done < elements && complete;) {
    int64_t chunk = std::min(kChunkBytes, elements - done);
    array.data.resize(static_cast<size_t>(done + chunk));
    complete = readExactly(file, array.data.data() + done, chunk);
    done += chunk;
  }
  if (!complete)
    return Status::badInput("truncated data: dimensions " + shapeStr(array.dims) + " need " +
                            std::to_string(elements) + " bytes");
  uint8_t extra;
  if (gzread(file, &extra, 1) != 0)
    return Status::badInput("data continues past the " + std::to_string(elements) + " bytes the dimensions " +
                            shapeStr(array.dims) + " need");
  return array;
}

}  // namespace

Expected<IdxArray> readIdx(const std::string& path) {
  // gzopen reads gzip-compressed and plain files alike.
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) return Status::badInput("cannot open '" + path + "': " + std::strerror(errno));
  auto array = parseIdx(file.get());
  // A damaged gzip stream shows up as a short read; say what zlib saw instead.
  int zlib_error = Z_OK;
  const char* message = gzerror(file.get(), &zlib_error);
  if (zlib_error != Z_OK && zlib_error != Z_STREAM_END)
    return Status::badInput("'" + path + "': corrupt gzip data: " + message);
  if (!array) return array.status().withContext("'" + path + "': ");
  return array;
}

}  // namespace cleave::runtime
