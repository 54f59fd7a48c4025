// The absorb-transposes pass: matmul and gemm read transposed operands themselves (see
// passes/cleanup/absorb_transposes.h).
#include "passes/cleanup/absorb_transposes.h"
#include "passes/core/pass_manager.h"

namespace cleave {
namespace {

Status absorb(Graph& graph, const PassOptions&) { return absorbTransposesIntoProducts(graph).status(); }

}  // namespace

PassInfo makeAbsorbTransposesPass() {
  return PassInfo{
      .name = "absorb-transposes",
      .summary = "a matmul or gemm operand that transposes its input's last two dims reads the input with "
                 "transpose_a/transpose_b flipped (a transpose also moving other dims keeps that part alone)",
      .options = {},
      .run = absorb,
  };
}

}  // namespace cleave
