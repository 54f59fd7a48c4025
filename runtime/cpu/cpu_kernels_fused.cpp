// The CPU kernel of fused nodes: the node's JIT-compiled function (runtime/codegen/cpu_jit.h) over
// ranges of result elements, one per thread.
#include <algorithm>
#include <vector>

#include "runtime/codegen/cpu_jit.h"
#include "runtime/cpu/cpu_kernel_support.h"
#include "runtime/cpu/cpu_kernels.h"

namespace cleave::runtime::cpu {
namespace {

// A body with per-column results (column sums, a row gradient's dscale and dbias) or a total sum:
// rows in at most 16 fixed blocks, each block adding its rows into its own doubles per such result;
// then the blocks' doubles summed in block order (a total sum's columns then in column order) and
// rounded to f32, so results do not depend on the thread count. (More blocks cost more than they
// bring: each block's doubles are written and read once more.)
Status withPerColumnResults(const KernelCall& call, const codegen::HostFusedKernel& kernel, int64_t work_per_element) {
  constexpr int64_t kMaxBlocks = 16;
  const int64_t columns = kernel.columns;
  if (columns == 0) {  // no columns: every per-column result is empty, a total sum is 0
    if (kernel.total_sum) *call.out<float>(0) = 0.0f;
    return Status::ok();
  }
  const int64_t rows = kernel.numel / columns;
  const int64_t rows_per_block = std::max<int64_t>(1, (rows + kMaxBlocks - 1) / kMaxBlocks);
  const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  std::vector<size_t> sums;  // the per-column results
  for (size_t r = 0; r < kernel.per_column.size(); ++r)
    if (kernel.per_column[r]) sums.push_back(r);
  const int64_t block_doubles = static_cast<int64_t>(sums.size()) * columns;
  std::vector<double> partial(static_cast<size_t>(blocks * block_doubles), 0.0);
  parallelFor(blocks, threadCount(call), rows_per_block * columns * work_per_element, [&](int64_t first, int64_t last) {
    std::vector<void*> outputs(call.outputs.begin(), call.outputs.end());
    for (int64_t block = first; block < last; ++block) {
      for (size_t s = 0; s < sums.size(); ++s)
        outputs[sums[s]] = partial.data() + block * block_doubles + static_cast<int64_t>(s) * columns;
      const int64_t begin = block * rows_per_block, end = std::min(rows, begin + rows_per_block);
      kernel.function(call.inputs.data(), outputs.data(), begin * columns, end * columns);
    }
  });
  // Block by block over contiguous columns (the loop vectorises; each column's sum still runs in
  // block order): column by column, each sum strode through the blocks' doubles.
  std::vector<double> total(static_cast<size_t>(columns));
  for (size_t s = 0; s < sums.size(); ++s) {
    std::fill(total.begin(), total.end(), 0.0);
    for (int64_t block = 0; block < blocks; ++block) {
      const double* block_sums = partial.data() + block * block_doubles + static_cast<int64_t>(s) * columns;
      for (int64_t c = 0; c < columns; ++c) total[c] += block_sums[c];
    }
    float* result = call.out<float>(static_cast<int>(sums[s]));
    if (kernel.total_sum) {
      double sum = 0;
      for (int64_t c = 0; c < columns; ++c) sum += total[c];
      result[0] = static_cast<float>(sum);
      continue;
    }
    for (int64_t c = 0; c < columns; ++c) result[c] = static_cast<float>(total[c]);
  }
  return Status::ok();
}

Status fusedKernel(const KernelCall& call) {
  CLEAVE_ASSIGN_OR_RETURN(codegen::HostFusedKernel kernel, codegen::hostFusedKernel(call.op));
  const std::string& body = call.op.getString("body");
  // Work per element: about four operations per step (a transcendental step does more).
  const int64_t steps = std::max<int64_t>(1, std::count(body.begin(), body.end(), ';'));
  const void* const* inputs = call.inputs.data();
  void* const* outputs = call.outputs.data();
  const int64_t numel = kernel.numel;
  if (kernel.columns > 0) return withPerColumnResults(call, kernel, 4 * steps);
  if (kernel.row_length > 0) {  // whole rows: the body ends along the last axis
    const int64_t row = kernel.row_length;
    parallelFor(numel / row, threadCount(call), 4 * steps * row,
                [&](int64_t begin, int64_t end) { kernel.function(inputs, outputs, begin * row, end * row); });
    return Status::ok();
  }
  parallelFor(numel, threadCount(call), 4 * steps,
              [&](int64_t begin, int64_t end) { kernel.function(inputs, outputs, begin, end); });
  return Status::ok();
}

}  // namespace

void registerFusedKernels(CpuKernelTable& table) { table[static_cast<int>(OpId::fused)] = fusedKernel; }

}  // namespace cleave::runtime::cpu
