// The .cir printer: writes a Graph as text that the parser (text_parser.cpp) reads back exactly.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "ir/text_format.h"

namespace cleave {
namespace {

// Tensors with at most this many elements print as a list of numbers, larger ones as hex.
constexpr int64_t kMaxListElements = 16;

bool isIdentChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// True when a %value or @graph name can be printed without quotes: [A-Za-z0-9_.]+.
bool isBareName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name)
    if (!isIdentChar(c) && c != '.') return false;
  return true;
}

// True when an attribute name can be printed without quotes: [A-Za-z_][A-Za-z0-9_]*.
bool isBareIdent(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name)
    if (!isIdentChar(c)) return false;
  return true;
}

// Appends `text` in double quotes with the escapes the lexer reads: \" \\ \n \t \r \xHH.
void appendQuoted(std::string& out, std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  out += '"';
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (byte < 0x20 || byte == 0x7f) {
          out += "\\x";
          out += kHex[byte >> 4];
          out += kHex[byte & 15];
        } else {
          out += c;  // printable ASCII and UTF-8 bytes go through as they are
        }
    }
  }
  out += '"';
}

// Appends `sigil` and `name`, quoting the name when it is not bare.
void appendName(std::string& out, char sigil, std::string_view name) {
  out += sigil;
  if (isBareName(name)) {
    out += name;
  } else {
    appendQuoted(out, name);
  }
}

void appendValue(std::string& out, const Graph& graph, ValueId id) {
  if (id < 0 || id >= static_cast<ValueId>(graph.values.size())) {
    // A broken graph (e.g. printed while debugging a pass) still prints, visibly wrong.
    appendName(out, '%', "<bad value id " + std::to_string(id) + ">");
    return;
  }
  appendName(out, '%', graph.values[id].name);
}

// Appends the shortest decimal text that reads back as exactly `x` (float or double).
template <class T>
void appendShortest(std::string& out, T x) {
  if (std::isnan(x)) {
    out += "nan";
    return;
  }
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof buf, x);
  out.append(buf, result.ptr);
}

// A float attribute: shortest round-trip text that always reads back as a float (1.0, 1e-05, inf).
void appendFloatAttr(std::string& out, double x) {
  size_t start = out.size();
  appendShortest(out, x);
  if (out.find_first_of(".ein", start) == std::string::npos) out += ".0";
}

void appendIntList(std::string& out, const std::vector<int64_t>& list) {
  out += '[';
  for (size_t i = 0; i < list.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(list[i]);
  }
  out += ']';
}

template <class T>
T loadElement(const TensorData& data, int64_t index) {
  T element;
  std::memcpy(&element, data.bytes.data() + index * sizeof(T), sizeof(T));
  return element;
}

// True when every element of `data` prints exactly in the list form (no NaN payloads lost,
// no bool bytes other than 0 and 1).
bool listFormIsExact(const TensorData& data) {
  int64_t n = data.type.numel();
  for (int64_t i = 0; i < n; ++i) {
    switch (data.type.dtype) {
      case DType::kF32:
        if (std::isnan(loadElement<float>(data, i))) return false;
        break;
      case DType::kF64:
        if (std::isnan(loadElement<double>(data, i))) return false;
        break;
      case DType::kBool:
        if (data.bytes[i] > 1) return false;
        break;
      default: break;
    }
  }
  return true;
}

// True when `data` prints as a list of numbers rather than hex bytes.
bool printsAsList(const TensorData& data) {
  if (static_cast<int64_t>(data.bytes.size()) != data.type.bytes()) return false;  // hex shows what is there
  int64_t n = data.type.numel();
  if (n == 0) return true;
  DType d = data.type.dtype;
  bool listable = d == DType::kF32 || d == DType::kF64 || isInteger(d) || d == DType::kBool;
  return listable && n <= kMaxListElements && listFormIsExact(data);
}

void appendElement(std::string& out, const TensorData& data, int64_t i) {
  switch (data.type.dtype) {
    case DType::kF32: appendShortest(out, loadElement<float>(data, i)); break;
    case DType::kF64: appendShortest(out, loadElement<double>(data, i)); break;
    case DType::kI64: out += std::to_string(loadElement<int64_t>(data, i)); break;
    case DType::kI32: out += std::to_string(loadElement<int32_t>(data, i)); break;
    case DType::kI8: out += std::to_string(loadElement<int8_t>(data, i)); break;
    case DType::kU8:
    case DType::kBool: out += std::to_string(data.bytes[i]); break;
    case DType::kF16:
    case DType::kBF16: break;  // printsAsList never chooses the list form for these with elements
  }
}

// A tensor literal: dense<f32[2]: [1, 2.5]> or dense<f32[64,64]: 0x0000803f...>.
void appendTensor(std::string& out, const TensorData& data) {
  out += "dense<";
  out += data.type.str();
  out += ": ";
  if (printsAsList(data)) {
    out += '[';
    for (int64_t i = 0, n = data.type.numel(); i < n; ++i) {
      if (i) out += ", ";
      appendElement(out, data, i);
    }
    out += ']';
  } else {
    static const char kHex[] = "0123456789abcdef";
    size_t start = out.size();
    out.resize(start + 2 + 2 * data.bytes.size());
    char* p = out.data() + start;
    *p++ = '0';
    *p++ = 'x';
    for (uint8_t byte : data.bytes) {
      *p++ = kHex[byte >> 4];
      *p++ = kHex[byte & 15];
    }
  }
  out += '>';
}

void appendAttribute(std::string& out, const Attribute& attr) {
  switch (attrKind(attr)) {
    case AttrKind::kInt: out += std::to_string(std::get<int64_t>(attr)); break;
    case AttrKind::kFloat: appendFloatAttr(out, std::get<double>(attr)); break;
    case AttrKind::kString: appendQuoted(out, std::get<std::string>(attr)); break;
    case AttrKind::kInts: appendIntList(out, std::get<std::vector<int64_t>>(attr)); break;
    case AttrKind::kFloats: {
      const auto& list = std::get<std::vector<double>>(attr);
      out += '[';
      for (size_t i = 0; i < list.size(); ++i) {
        if (i) out += ", ";
        appendFloatAttr(out, list[i]);
      }
      out += ']';
      break;
    }
    case AttrKind::kTensor: {
      const auto& tensor = std::get<std::shared_ptr<const TensorData>>(attr);
      if (tensor) {
        appendTensor(out, *tensor);
      } else {
        out += "<null tensor>";  // only a broken graph has one; the parser rejects this text
      }
      break;
    }
  }
}

// " {a = 1, b = [2, 3]}", or nothing for an empty map.
void appendAttrMap(std::string& out, const AttrMap& attrs) {
  if (attrs.empty()) return;
  out += " {";
  bool first = true;
  for (const auto& [name, value] : attrs) {
    if (!first) out += ", ";
    first = false;
    if (isBareIdent(name)) {
      out += name;
    } else {
      appendQuoted(out, name);
    }
    out += " = ";
    appendAttribute(out, value);
  }
  out += '}';
}

void appendParam(std::string& out, const Graph& graph, const Param& param) {
  out += "  param ";
  appendValue(out, graph, param.value);
  out += " : ";
  if (param.value >= 0 && param.value < static_cast<ValueId>(graph.values.size()))
    out += graph.values[param.value].type.str();
  out += " = ";
  if (param.init.kind == "data" && param.init.data) {
    appendTensor(out, *param.init.data);
  } else {
    out += param.init.kind;
    appendAttrMap(out, param.init.args);
  }
  if (!param.trainable) out += " frozen";
  if (!param.model.shape.empty()) {
    out += " model ";
    out += shapeStr(param.model.shape);
    if (param.model.grouped()) {
      out += " parts ";
      out += shapeStr(param.model.parts);
      out += " along ";
      out += std::to_string(param.model.axis);
    }
  }
  if (!param.full_shape.empty()) {
    out += " shard of ";
    out += shapeStr(param.full_shape);
    out += " at ";
    out += shapeStr(param.shard_offset);
  }
  // How the start follows from the device's coordinates: per mesh axis, each dim's step.
  std::vector<std::string> axes;
  for (const Param::ShardStep& step : param.shard_steps)
    if (std::find(axes.begin(), axes.end(), step.axis) == axes.end()) axes.push_back(step.axis);
  for (size_t a = 0; a < axes.size(); ++a) {
    std::vector<int64_t> steps(param.shard_offset.size(), 0);
    for (const Param::ShardStep& step : param.shard_steps)
      if (step.axis == axes[a] && step.dim >= 0 && step.dim < static_cast<int64_t>(steps.size())) steps[step.dim] += step.step;
    out += a == 0 ? " by " : ", ";
    out += axes[a] + " " + shapeStr(steps);
  }
  out += '\n';
}

void appendNode(std::string& out, const Graph& graph, const Node& node) {
  out += "  ";
  for (size_t i = 0; i < node.results.size(); ++i) {
    if (i) out += ", ";
    appendValue(out, graph, node.results[i]);
  }
  if (!node.results.empty()) out += " = ";
  out += opName(node.op);
  out += '(';
  for (size_t i = 0; i < node.operands.size(); ++i) {
    if (i) out += ", ";
    appendValue(out, graph, node.operands[i]);
  }
  out += ')';
  appendAttrMap(out, node.attrs);
  if (!node.results.empty()) out += " : ";
  for (size_t i = 0; i < node.results.size(); ++i) {
    if (i) out += ", ";
    ValueId v = node.results[i];
    if (v >= 0 && v < static_cast<ValueId>(graph.values.size())) out += graph.values[v].type.str();
  }
  if (!node.loc.node_name.empty()) {
    out += " loc(";
    if (!node.loc.file.empty()) {
      appendQuoted(out, node.loc.file);
      out += ':';
    }
    appendQuoted(out, node.loc.node_name);
    out += ')';
  }
  out += '\n';
}

}  // namespace

std::string printGraph(const Graph& graph) {
  std::string out = "graph ";
  appendName(out, '@', graph.name);
  out += " {\n";
  for (ValueId v : graph.inputs) {
    out += "  input ";
    appendValue(out, graph, v);
    out += " : ";
    if (v >= 0 && v < static_cast<ValueId>(graph.values.size())) out += graph.values[v].type.str();
    out += '\n';
  }
  for (const auto& param : graph.params) appendParam(out, graph, param);
  for (const auto& node : graph.nodes) appendNode(out, graph, node);
  for (const auto& update : graph.updates) {
    out += "  update ";
    appendValue(out, graph, update.target);
    out += " = ";
    appendValue(out, graph, update.new_value);
    out += '\n';
  }
  if (!graph.outputs.empty()) {
    out += "  output ";
    for (size_t i = 0; i < graph.outputs.size(); ++i) {
      if (i) out += ", ";
      appendValue(out, graph, graph.outputs[i]);
    }
    out += '\n';
  }
  out += "}\n";
  return out;
}

}  // namespace cleave
