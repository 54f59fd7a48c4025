// safetensors files: a JSON header of named tensors (dtype, shape, byte range) followed by their data.
#include "runtime/io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "runtime/io/file_io.h"

namespace cleave::runtime {
namespace {

// The safetensors reference implementation refuses headers above 100 MB; so does this reader.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::kF32, "F32"}, {DType::kF64, "F64"}, {DType::kF16, "F16"}, {DType::kBF16, "BF16"}, {DType::kI64, "I64"},
    {DType::kI32, "I32"}, {DType::kI8, "I8"},   {DType::kU8, "U8"},   {DType::kBool, "BOOL"},
};

const char* safetensorsDTypeName(DType dtype) {
  for (const auto& entry : kDTypeNames)
    if (entry.dtype == dtype) return entry.name;
  return "?";
}

std::optional<DType> parseSafetensorsDType(const std::string& name) {
  for (const auto& entry : kDTypeNames)
    if (name == entry.name) return entry.dtype;
  return std::nullopt;
}

// A tensor's header entry before its data is read.
struct HeaderEntry {
  std::string name;
  TensorType type;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Reads one non-negative integer from a JSON value.
std::optional<uint64_t> jsonUnsigned(const nlohmann::json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) return static_cast<uint64_t>(value.get<int64_t>());
  return std::nullopt;
}

// Steps: check the header is an object; read __metadata__; read each tensor's dtype, shape and
// byte range; then check the ranges tile the data section exactly.
Expected<std::vector<HeaderEntry>> parseHeader(const std::string& text, uint64_t data_bytes,
                                               std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return Status::badInput("header is not valid JSON");
  if (!header.is_object()) return Status::badInput("header is not a JSON object");

  std::vector<HeaderEntry> entries;
  for (const auto& [name, value] : header.items()) {
    // 1. Metadata: an object of strings.
    if (name == "__metadata__") {
      if (!value.is_object()) return Status::badInput("__metadata__ is not an object");
      for (const auto& [key, text_value] : value.items()) {
        if (!text_value.is_string()) return Status::badInput("__metadata__ entry '" + key + "' is not a string");
        metadata[key] = text_value.get<std::string>();
      }
      continue;
    }
    // 2. A tensor: dtype, shape, data_offsets.
    const std::string tensor_name = name;  // clang 14 cannot capture a structured binding
    auto bad = [&](const std::string& what) { return Status::badInput("tensor '" + tensor_name + "': " + what); };
    if (!value.is_object()) return bad("entry is not an object");
    auto dtype_it = value.find("dtype");
    auto shape_it = value.find("shape");
    auto offsets_it = value.find("data_offsets");
    if (dtype_it == value.end() || shape_it == value.end() || offsets_it == value.end())
      return bad("entry lacks dtype, shape or data_offsets");
    if (!dtype_it->is_string()) return bad("dtype is not a string");
    std::optional<DType> dtype = parseSafetensorsDType(dtype_it->get<std::string>());
    if (!dtype) return bad("unsupported dtype '" + dtype_it->get<std::string>() + "'");
    HeaderEntry entry{name, TensorType{*dtype, {}}, 0, 0};
    if (!shape_it->is_array()) return bad("shape is not an array");
    uint64_t bytes = static_cast<uint64_t>(dtypeSize(*dtype));
    for (const auto& dim : *shape_it) {
      std::optional<uint64_t> d = jsonUnsigned(dim);
      if (!d || *d > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(bytes, *d, &bytes))
        return bad("shape " + shape_it->dump() + " is not a list of sizes");
      entry.type.shape.push_back(static_cast<int64_t>(*d));
    }
    if (!offsets_it->is_array() || offsets_it->size() != 2) return bad("data_offsets is not [begin, end]");
    std::optional<uint64_t> begin = jsonUnsigned((*offsets_it)[0]);
    std::optional<uint64_t> end = jsonUnsigned((*offsets_it)[1]);
    if (!begin || !end || *begin > *end) return bad("data_offsets " + offsets_it->dump() + " is not a byte range");
    if (*end > data_bytes)
      return bad("data_offsets " + offsets_it->dump() + " reach past the data (" + std::to_string(data_bytes) +
                 " bytes)");
    if (*end - *begin != bytes)
      return bad(entry.type.str() + " needs " + std::to_string(bytes) + " bytes, data_offsets " +
                 offsets_it->dump() + " hold " + std::to_string(*end - *begin));
    entry.begin = *begin;
    entry.end = *end;
    entries.push_back(std::move(entry));
  }

  // 3. In offset order, each range starts where the previous ended and the last ends at the data's end.
  std::sort(entries.begin(), entries.end(), [](const HeaderEntry& a, const HeaderEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (const auto& entry : entries) {
    if (entry.begin < covered) return Status::badInput("tensor '" + entry.name + "' overlaps the tensor before it");
    if (entry.begin > covered)
      return Status::badInput("gap in the data before tensor '" + entry.name + "' (bytes " + std::to_string(covered) +
                              " to " + std::to_string(entry.begin) + " belong to no tensor)");
    covered = entry.end;
  }
  if (covered != data_bytes)
    return Status::badInput("the data section has " + std::to_string(data_bytes) + " bytes but the tensors cover " +
                            std::to_string(covered));
  return entries;
}

Expected<SafetensorsFile> readFrom(std::ifstream& file, uint64_t file_bytes) {
  // The 8-byte little-endian header length, then the header, then the data section.
  uint8_t length_bytes[8];
  if (file_bytes < 8 || !file.read(reinterpret_cast<char*>(length_bytes), 8))
    return Status::badInput("too short for a safetensors file");
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | length_bytes[i];
  if (header_bytes > kMaxHeaderBytes || header_bytes > file_bytes - 8)
    return Status::badInput("header length " + std::to_string(header_bytes) + " does not fit the file (" +
                            std::to_string(file_bytes) + " bytes)");
  std::string header_text(header_bytes, '\0');
  if (!file.read(header_text.data(), static_cast<std::streamsize>(header_bytes)))
    return Status::badInput("cannot read the header");

  SafetensorsFile contents;
  CLEAVE_ASSIGN_OR_RETURN(std::vector<HeaderEntry> entries,
                          parseHeader(header_text, file_bytes - 8 - header_bytes, contents.metadata));
  for (auto& entry : entries) {
    SafetensorsTensor tensor{std::move(entry.name), std::move(entry.type), {}};
    tensor.data.resize(entry.end - entry.begin);
    if (!file.read(reinterpret_cast<char*>(tensor.data.data()), static_cast<std::streamsize>(tensor.data.size())))
      return Status::badInput("cannot read the data of tensor '" + tensor.name + "'");
    contents.tensors.push_back(std::move(tensor));
  }
  return contents;
}

}  // namespace

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& tensor : tensors)
    if (tensor.name == name) return &tensor;
  return nullptr;
}

Status writeSafetensors(const std::string& path, std::span<const SafetensorsEntry> tensors,
                        const std::map<std::string, std::string>& metadata) {
  // The header: metadata, then each tensor's dtype, shape and byte range, padded to 8 bytes.
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& tensor : tensors) {
    if (tensor.name == "__metadata__" || header.contains(tensor.name))
      return Status::internal("cannot write '" + path + "': tensor name '" + tensor.name + "' is reserved or repeated");
    uint64_t bytes = static_cast<uint64_t>(tensor.type.bytes());
    header[tensor.name] = {{"dtype", safetensorsDTypeName(tensor.type.dtype)},
                           {"shape", tensor.type.shape},
                           {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::string length_bytes(8, '\0');
  for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<char>((header_text.size() >> (8 * i)) & 0xff);

  return writeFileAtomically(path, [&](FileWriter& out) -> Status {
    CLEAVE_TRY(out.write(length_bytes + header_text));
    for (const auto& tensor : tensors) CLEAVE_TRY(out.write(tensor.data, tensor.type.bytes()));
    return Status::ok();
  });
}

Expected<SafetensorsFile> readSafetensors(const std::string& path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) return Status::badInput("cannot open '" + path + "': " + std::strerror(errno));
  auto size = static_cast<int64_t>(file.tellg());
  if (size < 0) return Status::badInput("cannot read '" + path + "'");
  file.seekg(0);
  auto contents = readFrom(file, static_cast<uint64_t>(size));
  if (!contents) return contents.status().withContext("'" + path + "': ");
  return contents;
}

}  // namespace cleave::runtime
