#include "runtime/device/fused_matmul_steps.h"

#include <vector>

#include "ir/ops/op_rules.h"

namespace cleave::runtime {
namespace {

// One transpose kernel call from `from` (of type `from_type`) into `to`.
Status transposeInto(const TensorType& from_type, const void* from, const TensorType& to_type, void* to,
                     const std::vector<int64_t>& perm, int threads,
                     const std::function<Status(OpId, const KernelCall&)>& run) {
  const AttrMap attrs{{"perm", perm}};
  const void* inputs[] = {from};
  void* outputs[] = {to};
  const KernelCall call{OpContext{opDef(OpId::transpose), {&from_type, 1}, {&to_type, 1}, attrs}, inputs, outputs, threads};
  return run(OpId::transpose, call);
}

}  // namespace

Status runFusedMatmulStepwise(const KernelCall& fused, const std::function<Expected<void*>(int64_t bytes)>& temporary,
                              const std::function<Status(OpId op, const KernelCall& call)>& run) {
  CLEAVE_ASSIGN_OR_RETURN(ops::FusedMatmulLayout layout, ops::fusedMatmulLayout(fused.op));
  // 1. Each permuted operand into a temporary in its matmul layout.
  const void* operands[2] = {fused.inputs[0], fused.inputs[1]};
  const std::vector<int64_t>* perms[2] = {&layout.perm_a, &layout.perm_b};
  for (int i = 0; i < 2; ++i) {
    if (ops::isIdentityPermutation(*perms[i])) continue;
    CLEAVE_ASSIGN_OR_RETURN(void* copy, temporary(layout.operands[i].bytes()));
    CLEAVE_TRY(transposeInto(fused.op.operands[i], fused.inputs[i], layout.operands[i], copy, *perms[i], fused.threads, run));
    operands[i] = copy;
  }
  // 2. The plain matmul, into the result when nothing follows it; 3. + the bias row.
  const bool permutes_result = !ops::isIdentityPermutation(layout.perm_result);
  const bool adds_bias = fused.op.operands.size() == 3;
  void* product = fused.outputs[0];
  if (permutes_result || adds_bias) {
    CLEAVE_ASSIGN_OR_RETURN(product, temporary(layout.product.bytes()));
  }
  AttrMap matmul_attrs;
  for (const char* flag : {"transpose_a", "transpose_b"}) matmul_attrs.emplace(flag, fused.op.getInt(flag));
  void* products[] = {product};
  const KernelCall matmul{OpContext{opDef(OpId::matmul), layout.operands, {&layout.product, 1}, matmul_attrs}, operands,
                          products, fused.threads};
  CLEAVE_TRY(run(OpId::matmul, matmul));
  if (adds_bias) {
    void* biased = fused.outputs[0];
    if (permutes_result) {
      CLEAVE_ASSIGN_OR_RETURN(biased, temporary(layout.product.bytes()));
    }
    const TensorType add_operands[] = {layout.product, fused.op.operands[2]};
    const void* add_inputs[] = {product, fused.inputs[2]};
    void* add_outputs[] = {biased};
    const AttrMap no_attrs;
    const KernelCall add{OpContext{opDef(OpId::add), add_operands, {&layout.product, 1}, no_attrs}, add_inputs,
                         add_outputs, fused.threads};
    CLEAVE_TRY(run(OpId::add, add));
    product = biased;
  }
  // 4. The product transposed into the result.
  if (!permutes_result) return Status::ok();
  return transposeInto(layout.product, product, fused.op.results[0], fused.outputs[0], layout.perm_result, fused.threads,
                       run);
}

}  // namespace cleave::runtime
