// One LLVM IR generator for fused nodes, for the host CPU (ORC JIT) and for NVIDIA GPUs (NVPTX).
// Only the .cpp files of runtime/codegen include LLVM headers; this header forward-declares.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/op_table.h"
#include "ir/ops/fused_body.h"
#include "ir/status.h"

namespace llvm {
class LLVMContext;
class Module;
class TargetMachine;
}  // namespace llvm

namespace cleave::runtime::codegen {

// A fused node ready for code generation: its body and types, and its iteration space, the result
// shape with size-1 dims dropped and neighbouring dims merged where every operand either steps
// through both or is broadcast along both.
struct FusedKernelSpec {
  FusedBody body;
  std::vector<TensorType> operands;
  std::vector<TensorType> steps;    // each step's result type
  std::vector<TensorType> results;  // the returned steps' types (all of one shape)
  std::vector<int64_t> dims;        // the collapsed iteration space (at least one dim)
  // Per operand, per collapsed dim: the operand's element stride (0 where it is broadcast).
  std::vector<std::vector<int64_t>> operand_strides;
  int64_t numel = 0;  // elements of the iteration space (fusedIterationShape)
  // The last step runs along the last axis (softmax): kernels work in whole rows of dims.back().
  bool along_last_axis = false;
  // The first step of the last statement: the row step's when along_last_axis (layer_norm_grad's
  // three results are three steps).
  size_t row_step = 0;
  // Per result: whether it holds one value per column (isPerColumn: a column sum, or
  // layer_norm_grad's dscale or dbias; on the host a total sum too), and for a column sum the result
  // it sums (else -1). With per-column results the last dim is kept apart too (dims.back() columns).
  std::vector<bool> per_column;
  std::vector<int> summed_result;  // per result: for a column sum of a returned step, that result; else -1
  // A lone column sum (isLoneColumnSum): the operand its one result sums, whose shape is the
  // iteration space (dims, numel); else -1.
  int summed_operand = -1;
  // A total sum (isTotalSum, the body's one result): the step it sums, whose shape is the iteration
  // space; else -1. On the host its pointer is a double[columns] like a per-column result's, each
  // element added into its column's double, and the caller sums the columns.
  int total_summed_step = -1;
  bool hasPerColumnResults() const;
};

// The spec of the fused node `ctx` (op fused); errors name the body's fault.
Expected<FusedKernelSpec> fusedKernelSpec(const OpContext& ctx);

// The text that identifies a fused kernel: its body and operand types (kernels are cached by it).
std::string fusedKernelKey(const OpContext& ctx);

enum class FusedTarget { kHostCpu, kNvptx };

// The threads of a GPU kernel that share one row along the last axis (a warp); its launcher gives
// each row this many threads, in blocks of a multiple of it.
inline constexpr int kWarpLanes = 32;

// The libdevice function a GPU kernel calls for a general pow (CUDA's own powf).
inline constexpr const char* kLibdevicePow = "__nv_powf";

// Builds the kernel of `spec` into a new module of `context`, as function `name`:
// - kHostCpu: void name(const void* const* operands, void* const* results, int64_t begin, int64_t end),
//   computing result elements [begin, end) (row-major; whole rows when along_last_axis or with
//   per-column results), vectorisable along the last collapsed dim; a per-column result's pointer
//   is a double[columns] that each row of the range is added into, in row order (the caller zeroes
//   it, and sums the ranges' doubles in a fixed order; a total sum's too, whose columns the caller
//   then adds up);
// - kNvptx: kernel name(operand pointers..., result pointers..., int64_t count), a grid-stride loop
//   over all `count` result elements (rows when along_last_axis: one warp of kWarpLanes threads
//   per row, which must all run the kernel: launch it with a multiple of kWarpLanes threads).
//   Column sums are not parameters: the launcher sums their returned inputs afterwards. A row
//   gradient step (layer_norm_grad, rms_norm_grad) has no GPU code yet, nor a lone column sum or a
//   total sum (errors: the launcher runs their ops' own kernels).
// On the host, `interleave` > 0 has the vectoriser run that many vector iterations of an element
// loop side by side when the body has a transcendental step (exp, erf, tanh, ...): their long
// chains of dependent multiply-adds leave the FMA units idle otherwise (0: LLVM's choice).
// Arithmetic is f32 in the order the unfused kernels use (their exp, tanh and erf polynomials); a
// bf16 step's result is rounded to bf16 as the unfused op would store it. A general pow calls powf
// (host) or libdevice's __nv_powf (GPU, which ptx_compiler.cpp links in).
Expected<std::unique_ptr<llvm::Module>> buildFusedKernelModule(const FusedKernelSpec& spec, FusedTarget target,
                                                               const std::string& name, llvm::LLVMContext& context,
                                                               int interleave = 0);

// Runs LLVM's -O3 pipeline over `module` for `machine` (whose vector width the vectoriser uses).
void optimizeModule(llvm::Module& module, llvm::TargetMachine& machine);

}  // namespace cleave::runtime::codegen
