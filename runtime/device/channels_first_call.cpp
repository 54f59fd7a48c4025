#include "runtime/device/channels_first_call.h"

#include <string>

#include "ir/ops/image_layout.h"

namespace cleave::runtime {

LayoutTransposeCall::LayoutTransposeCall(const TensorType& from_type, const void* from, void* to, bool to_channels_last,
                                         int threads)
    : from_type_(from_type),
      to_type_{from_type.dtype, to_channels_last ? asNhwc(from_type.shape) : asNchw(from_type.shape, true)},
      attrs_{{"perm", to_channels_last ? toChannelsLastPerm() : toChannelsFirstPerm()}},
      inputs_{from},
      outputs_{to},
      call_{OpContext{opDef(OpId::transpose), {&from_type_, 1}, {&to_type_, 1}, attrs_}, inputs_, outputs_, threads} {}

ChannelsFirstCall::ChannelsFirstCall(const KernelCall& nhwc, const void* image, void* result)
    : operands_(nhwc.op.operands.begin(), nhwc.op.operands.end()),
      results_(nhwc.op.results.begin(), nhwc.op.results.end()),
      attrs_(nhwc.op.attrs),
      inputs_(nhwc.inputs.begin(), nhwc.inputs.end()),
      outputs_(nhwc.outputs.begin(), nhwc.outputs.end()),
      call_{OpContext{nhwc.op.def, {}, {}, attrs_}, {}, {}, nhwc.threads, nhwc.constant_operands,
            nhwc.constants_generation} {
  operands_[0].shape = asNchw(operands_[0].shape, true);
  results_[0].shape = asNchw(results_[0].shape, true);
  attrs_["layout"] = std::string(kChannelsFirst);
  inputs_[0] = image;
  outputs_[0] = result;
  call_.op.operands = operands_;
  call_.op.results = results_;
  call_.inputs = inputs_;
  call_.outputs = outputs_;
}

}  // namespace cleave::runtime
