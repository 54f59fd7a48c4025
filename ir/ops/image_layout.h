// The memory order of conv2d's and max_pool2d's 4-D images, set by their "layout" attribute: NCHW
// (ONNX's, the default) or NHWC (channels last: what oneDNN's CPU convolutions read and write without
// a reorder; the channels-last pass sets it). Weights stay OIHW in both.
#pragma once

#include <string_view>
#include <vector>

#include "ir/tensor_type.h"

namespace cleave {

struct OpContext;

inline constexpr std::string_view kChannelsFirst = "NCHW";
inline constexpr std::string_view kChannelsLast = "NHWC";

// True when the op has a layout attribute and its images are NHWC.
bool isChannelsLast(const OpContext& op);
// A 4-D image shape in the op's layout, as NCHW.
Shape asNchw(const Shape& shape, bool channels_last);
// An NCHW shape as NHWC.
Shape asNhwc(const Shape& nchw);
// transpose's perm from NCHW to NHWC, and back.
const std::vector<int64_t>& toChannelsLastPerm();
const std::vector<int64_t>& toChannelsFirstPerm();

}  // namespace cleave
