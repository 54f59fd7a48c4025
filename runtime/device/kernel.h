// Kernels: the per-device implementations of ops, keyed by op id.
#pragma once

#include <cstdint>
#include <span>

#include "ir/op_table.h"
#include "ir/status.h"

namespace cleave::runtime {

// One kernel invocation: the op's context (types, attributes with defaults) and data pointers.
// Results may alias operands of the same shape for elementwise, elementwise-gradient and
// optimizer ops (parameters are updated in place); other kernels never see aliasing.
struct KernelCall {
  OpContext op;                          // op.operands / op.results are the tensor types
  std::span<const void* const> inputs;   // one pointer per operand
  std::span<void* const> outputs;        // one pointer per result
  int threads = 1;                       // parallelism to use (from --threads)
  // Bit i set: operand i is a parameter that no instruction of the plan writes (an inference plan's
  // weights). A kernel may keep a prepared copy of it (reordered or packed for a library) keyed by its
  // address and constants_generation, which changes whenever the parameters may have been written
  // from outside the plan (initialized, loaded from a checkpoint); 0: keep nothing.
  uint32_t constant_operands = 0;
  uint64_t constants_generation = 0;

  template <class T>
  const T* in(int i) const { return static_cast<const T*>(inputs[i]); }
  template <class T>
  T* out(int i) const { return static_cast<T*>(outputs[i]); }
};

// A CPU kernel. Returns an error only for data-dependent failures (e.g. an index out of range).
using CpuKernel = Status (*)(const KernelCall& call);

// The CPU kernel for `op`, or nullptr when there is none.
CpuKernel findCpuKernel(OpId op);

}  // namespace cleave::runtime
