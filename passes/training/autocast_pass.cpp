// The autocast pass: matmul, gemm and conv2d in bf16 between casts (see passes/training/autocast.h).
#include "passes/core/pass_manager.h"
#include "passes/training/autocast.h"

namespace cleave {
namespace {

Status autocast(Graph& graph, const PassOptions& options) {
  CLEAVE_ASSIGN_OR_RETURN(Precision precision, parsePrecision(options.getString("precision")));
  if (precision == Precision::kF32) return Status::ok();
  return autocastToBf16(graph).status();
}

}  // namespace

PassInfo makeAutocastPass() {
  return PassInfo{
      .name = "autocast",
      .summary = "run matmul, gemm and conv2d on bf16 casts of their f32 operands, their results cast back to f32 "
                 "(torch.autocast(dtype=torch.bfloat16))",
      .options = {{"precision", std::string("bf16"), "bf16, or f32 (no change)"}},
      .run = autocast,
  };
}

}  // namespace cleave
