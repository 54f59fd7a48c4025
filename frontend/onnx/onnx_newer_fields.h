// Fields newer than Debian's libonnx 1.12 schema (IR versions 9 and 10), which its protobuf classes
// keep as unknown fields: read here by number.
#pragma once

#include <string>
#include <vector>

#include <google/protobuf/message.h>

namespace cleave {

inline constexpr int kNodeOverloadField = 8;              // NodeProto.overload
inline constexpr int kFunctionOverloadField = 13;         // FunctionProto.overload
inline constexpr int kFunctionAttributeProtoField = 11;   // FunctionProto.attribute_proto
inline constexpr int kValueInfoMetadataPropsField = 4;    // ValueInfoProto.metadata_props
inline constexpr int kNodeMetadataPropsField = 9;         // NodeProto.metadata_props

// The length-delimited unknown fields numbered `number` of `message`, in order.
std::vector<std::string> unknownStrings(const google::protobuf::Message& message, int number);

// The value of metadata property `key` among the StringStringEntryProto fields numbered `number`
// of `message` (metadata_props), or "" when it has none.
std::string metadataProperty(const google::protobuf::Message& message, int number, const std::string& key);

}  // namespace cleave
