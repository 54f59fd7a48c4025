// .npy files (NumPy's array format, versions 1.0–3.0): reading and writing C-order arrays.
#include "runtime/io/npy.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <string_view>

#include "runtime/device/element_access.h"
#include "runtime/io/file_io.h"

namespace cleave::runtime {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

struct NpyDType {
  char kind;  // NumPy's type character: f, i, u, b
  int size;
  DType dtype;
};
constexpr NpyDType kNpyDTypes[] = {
    {'f', 4, DType::kF32}, {'f', 8, DType::kF64}, {'f', 2, DType::kF16}, {'i', 8, DType::kI64},
    {'i', 4, DType::kI32}, {'i', 1, DType::kI8},  {'u', 1, DType::kU8},  {'b', 1, DType::kBool},
};

// The header's three fields.
struct NpyHeader {
  std::string descr;
  std::optional<bool> fortran_order;
  std::optional<Shape> shape;
};

// Parses the Python dict literal of a .npy header, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  // Returns the fields, or an error message (without the file name).
  Expected<NpyHeader> parse() {
    NpyHeader header;
    bool has_descr = false;
    if (!consume('{')) return fail("expected '{'");
    while (!consume('}')) {
      std::string key;
      if (!parseString(key)) return fail("expected a quoted key");
      if (!consume(':')) return fail("expected ':' after '" + key + "'");
      if (key == "descr") {
        if (peek() == '[') return fail("structured dtypes (a descr list) are not supported");
        if (!parseString(header.descr)) return fail("'descr' is not a string");
        has_descr = true;
      } else if (key == "fortran_order") {
        if (consumeWord("True")) header.fortran_order = true;
        else if (consumeWord("False")) header.fortran_order = false;
        else return fail("'fortran_order' is not True or False");
      } else if (key == "shape") {
        Shape shape;
        if (!parseShape(shape)) return fail("'shape' is not a tuple of non-negative integers");
        header.shape = std::move(shape);
      } else {
        return fail("unexpected key '" + key + "'");
      }
      if (!consume(',') && peek() != '}') return fail("expected ',' or '}'");
    }
    if (!has_descr || !header.fortran_order || !header.shape)
      return Status::badInput("header lacks 'descr', 'fortran_order' or 'shape'");
    return header;
  }

 private:
  Status fail(const std::string& what) {
    return Status::badInput("bad header at character " + std::to_string(pos_) + ": " + what);
  }
  void skipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n')) ++pos_;
  }
  char peek() {
    skipSpace();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool consume(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  bool consumeWord(std::string_view word) {
    skipSpace();
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  bool parseString(std::string& out) {
    char quote = peek();
    if (quote != '\'' && quote != '"') return false;
    size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) return false;
    out = std::string(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return true;
  }
  bool parseShape(Shape& shape) {
    if (!consume('(')) return false;
    while (!consume(')')) {
      skipSpace();
      int64_t value = 0;
      size_t start = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        if (value > (INT64_MAX - 9) / 10) return false;
        value = value * 10 + (text_[pos_++] - '0');
      }
      if (pos_ == start) return false;
      if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 longs
      shape.push_back(value);
      if (!consume(',') && peek() != ')') return false;
    }
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// The dtype for a descr like "<f4"; an error message for anything else.
Expected<DType> parseDescr(const std::string& descr) {
  if (descr.size() < 3) return Status::badInput("unknown dtype '" + descr + "'");
  char order = descr[0];
  char kind = descr[1];
  int size = 0;
  for (size_t i = 2; i < descr.size(); ++i) {
    if (descr[i] < '0' || descr[i] > '9' || size > 1000) return Status::badInput("unknown dtype '" + descr + "'");
    size = size * 10 + (descr[i] - '0');
  }
  if (order != '<' && order != '>' && order != '|' && order != '=')
    return Status::badInput("unknown dtype '" + descr + "'");
  if (order == '>' && size > 1)
    return Status::badInput("dtype '" + descr + "' is big-endian; only little-endian data is supported "
                            "(convert with arr.astype(arr.dtype.newbyteorder('<')))");
  for (const auto& entry : kNpyDTypes)
    if (entry.kind == kind && entry.size == size) return entry.dtype;
  return Status::badInput("unsupported dtype '" + descr + "' (supported: <f4 <f8 <f2 <i8 <i4 |i1 |u1 |b1)");
}

// The descr this writer uses for `dtype`; nullopt for bf16.
std::optional<std::string> descrFor(DType dtype) {
  for (const auto& entry : kNpyDTypes)
    if (entry.dtype == dtype) return std::string(entry.size == 1 ? "|" : "<") + entry.kind + std::to_string(entry.size);
  return std::nullopt;
}

uint32_t readLittleEndian(const std::string& bytes, size_t offset, int width) {
  uint32_t value = 0;
  for (int i = width - 1; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(bytes[offset + i]);
  return value;
}

// Steps: magic and version, header length, header dict, dtype and shape, then the data size.
Expected<NpyArray> parseNpy(const std::string& bytes) {
  // 1. Magic string and version: 1.0 has a 2-byte header length, 2.0 and 3.0 a 4-byte one.
  if (bytes.size() < 10 || std::string_view(bytes).substr(0, kMagic.size()) != kMagic)
    return Status::badInput("not a .npy file (no \\x93NUMPY magic)");
  int major = static_cast<uint8_t>(bytes[6]);
  if (major < 1 || major > 3) return Status::badInput("unsupported .npy version " + std::to_string(major) + ".x");
  int length_width = major == 1 ? 2 : 4;
  size_t header_start = 8 + static_cast<size_t>(length_width);
  if (bytes.size() < header_start) return Status::badInput("truncated header");
  size_t header_length = readLittleEndian(bytes, 8, length_width);
  if (bytes.size() < header_start + header_length)
    return Status::badInput("truncated header (" + std::to_string(header_length) + " bytes announced)");

  // 2. The header dict.
  CLEAVE_ASSIGN_OR_RETURN(NpyHeader header,
                          HeaderParser(std::string_view(bytes).substr(header_start, header_length)).parse());
  if (*header.fortran_order)
    return Status::badInput("array is in Fortran order; only C order is supported (save np.ascontiguousarray(a))");
  CLEAVE_ASSIGN_OR_RETURN(DType dtype, parseDescr(header.descr));

  // 3. The data must hold exactly numel elements.
  NpyArray array;
  array.type = TensorType{dtype, *header.shape};
  int64_t expected = dtypeSize(dtype);
  for (int64_t dim : array.type.shape)
    if (__builtin_mul_overflow(expected, dim, &expected)) return Status::badInput("shape is too large");
  size_t data_start = header_start + header_length;
  int64_t available = static_cast<int64_t>(bytes.size() - data_start);
  if (available < expected)
    return Status::badInput("truncated data: " + array.type.str() + " needs " + std::to_string(expected) +
                            " bytes, the file has " + std::to_string(available));
  if (available > expected)
    return Status::badInput(std::to_string(available - expected) + " unexpected bytes after the " +
                            array.type.str() + " data");
  array.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(data_start), bytes.end());
  return array;
}

}  // namespace

Expected<NpyArray> readNpy(const std::string& path) {
  CLEAVE_ASSIGN_OR_RETURN(std::string bytes, readWholeFile(path));
  auto array = parseNpy(bytes);
  if (!array) return array.status().withContext("'" + path + "': ");
  return array;
}

Status checkNpyType(const NpyArray& array, const TensorType& expected, const std::string& path) {
  if (array.type == expected) return Status::ok();
  return Status::badInput("'" + path + "' holds " + array.type.str() + ", expected " + expected.str());
}

Status writeNpy(const std::string& path, const TensorType& type, const void* data) {
  std::optional<std::string> descr = descrFor(type.dtype);
  if (!descr)
    return Status::badInput("cannot write '" + path + "': " + std::string(dtypeName(type.dtype)) +
                            " has no .npy dtype");
  // The header dict, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (3,), }, padded with
  // spaces and ended by '\n' so the data starts at a multiple of 64 bytes, as NumPy writes it.
  std::string shape = "(";
  for (size_t i = 0; i < type.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(type.shape[i]);
  if (type.shape.size() == 1) shape += ",";
  shape += ")";
  std::string header = "{'descr': '" + *descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  int length_width = header.size() + 12 + 64 > 65535 ? 4 : 2;
  size_t prefix = 8 + static_cast<size_t>(length_width);
  size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header.append(total - prefix - header.size() - 1, ' ');
  header += '\n';

  std::string preamble(kMagic);
  preamble += static_cast<char>(length_width == 2 ? 1 : 2);
  preamble += '\0';
  for (int i = 0; i < length_width; ++i) preamble += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return writeFileAtomically(path, [&](FileWriter& out) -> Status {
    CLEAVE_TRY(out.write(preamble + header));
    return out.write(data, type.bytes());
  });
}

Status checkNpyFinite(const NpyArray& array, const std::string& path) {
  if (!isFloat(array.type.dtype)) return Status::ok();
  const int64_t count = array.type.numel();
  const int64_t per_row = array.type.shape.empty() || array.type.shape[0] == 0 ? 1 : count / array.type.shape[0];
  for (int64_t i = 0; i < count; ++i) {
    double value = loadElement(array.type.dtype, array.data.data(), i);
    if (std::isfinite(value)) continue;
    return Status::badInput("'" + path + "': row " + std::to_string(i / per_row) + " holds " +
                            (std::isnan(value) ? "NaN" : value > 0 ? "+inf" : "-inf") + " (element " +
                            std::to_string(i % per_row) + " of the row)");
  }
  return Status::ok();
}

}  // namespace cleave::runtime
