// Reading fields newer than libonnx's schema (see onnx_newer_fields.h).
#include "frontend/onnx/onnx_newer_fields.h"

#include <google/protobuf/unknown_field_set.h>
#include <onnx/onnx_pb.h>

namespace cleave {

std::vector<std::string> unknownStrings(const google::protobuf::Message& message, int number) {
  std::vector<std::string> values;
  const auto& unknown = message.GetReflection()->GetUnknownFields(message);
  for (int i = 0; i < unknown.field_count(); ++i)
    if (unknown.field(i).number() == number && unknown.field(i).type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      values.push_back(unknown.field(i).length_delimited());
  return values;
}

std::string metadataProperty(const google::protobuf::Message& message, int number, const std::string& key) {
  for (const std::string& bytes : unknownStrings(message, number)) {
    onnx::StringStringEntryProto property;
    if (property.ParseFromString(bytes) && property.key() == key) return property.value();
  }
  return "";
}

}  // namespace cleave
