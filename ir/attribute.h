// Node attributes: integers, floats, strings, lists of them, and constant tensors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "ir/tensor_type.h"

namespace cleave {

// Constant tensor contents: a type and its little-endian bytes (row-major).
struct TensorData {
  TensorType type;
  std::vector<uint8_t> bytes;

  template <class T>
  const T* as() const { return reinterpret_cast<const T*>(bytes.data()); }
  template <class T>
  T* as() { return reinterpret_cast<T*>(bytes.data()); }
  bool operator==(const TensorData&) const = default;
};

// The block of `whole` (row-major) that starts at `start` and has shape `size`.
TensorData dataBlock(const TensorData& whole, const Shape& start, const Shape& size);

// The kinds an attribute can have; the order matches Attribute's variant.
enum class AttrKind : uint8_t { kInt, kFloat, kString, kInts, kFloats, kTensor };

// One attribute value.
using Attribute = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>,
                               std::shared_ptr<const TensorData>>;

// Attributes by name; std::map keeps them sorted, so printing is deterministic.
using AttrMap = std::map<std::string, Attribute>;

// The kind of an attribute value.
inline AttrKind attrKind(const Attribute& a) { return static_cast<AttrKind>(a.index()); }
// The name of an attribute kind ("int", "floats", ...), for diagnostics.
const char* attrKindName(AttrKind kind);
// Structural equality (tensors compared by contents).
bool attrEquals(const Attribute& a, const Attribute& b);

}  // namespace cleave
