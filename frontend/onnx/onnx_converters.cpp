// The one table from ONNX op type to converter: what the importer maps, at which opsets, and how.
#include "frontend/onnx/onnx_converters.h"

#include <algorithm>
#include <string>
#include <vector>

namespace cleave {
namespace {

// The family parts joined into one table, sorted by op type then first opset.
std::vector<OnnxConverter> buildTable() {
  std::vector<OnnxConverter> table;
  for (auto part : {elementwiseConverters(), activationConverters(), reductionConverters(), networkConverters(),
                    shapeConverters(), constantConverters(), einsumConverters(), sequenceConverters(),
                    attentionConverters()})
    table.insert(table.end(), part.begin(), part.end());
  std::sort(table.begin(), table.end(), [](const OnnxConverter& a, const OnnxConverter& b) {
    return a.op_type != b.op_type ? a.op_type < b.op_type : a.first_opset < b.first_opset;
  });
  return table;
}

}  // namespace

std::span<const OnnxConverter> onnxConverters() {
  static const std::vector<OnnxConverter> kTable = buildTable();
  return kTable;
}

Status checkOnnxConverterTable() {
  auto table = onnxConverters();
  for (size_t i = 0; i < table.size(); ++i) {
    const OnnxConverter& entry = table[i];
    const std::string where = "ONNX converter table: " + std::string(entry.op_type) + " at opsets " +
                              std::to_string(entry.first_opset) + ".." + std::to_string(entry.last_opset);
    if (!entry.convert) return Status::internal(where + " has no converter");
    if (entry.first_opset < kMinOnnxOpset || entry.last_opset > kMaxOnnxOpset || entry.first_opset > entry.last_opset)
      return Status::internal(where + " is outside " + std::to_string(kMinOnnxOpset) + ".." +
                              std::to_string(kMaxOnnxOpset) + " or empty");
    if (i > 0 && table[i - 1].op_type == entry.op_type && table[i - 1].last_opset >= entry.first_opset)
      return Status::internal(where + " overlaps the entry for opsets " + std::to_string(table[i - 1].first_opset) +
                              ".." + std::to_string(table[i - 1].last_opset));
  }
  return Status::ok();
}

const OnnxConverter* findOnnxConverter(std::string_view op_type, int64_t opset) {
  auto table = onnxConverters();
  auto it = std::lower_bound(table.begin(), table.end(), op_type,
                             [](const OnnxConverter& entry, std::string_view type) { return entry.op_type < type; });
  for (; it != table.end() && it->op_type == op_type; ++it)
    if (it->first_opset <= opset && opset <= it->last_opset) return &*it;
  return nullptr;
}

}  // namespace cleave
