// Blocks of row-major tensors: copying a box of one tensor into a box of another (shards, gathers).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/tensor_type.h"

namespace cleave::runtime {

// True when a box of `extent` starting at `start` lies inside a tensor of `shape` (same ranks).
bool boxInside(const Shape& shape, const Shape& start, const Shape& extent);

// Calls `run(source_element, target_element, count)` for each contiguous run of a box of `extent`
// that starts at `source_start` in a row-major tensor of `source_shape` and at `target_start` in one
// of `target_shape` (element indices, not bytes). Runs come in row-major order of the box; trailing
// dimensions that both tensors cover whole are merged into one run.
template <class RunFn>
void forEachBoxRun(const Shape& source_shape, const Shape& source_start, const Shape& target_shape,
                   const Shape& target_start, const Shape& extent, RunFn&& run) {
  const size_t rank = extent.size();
  for (int64_t e : extent)
    if (e == 0) return;
  if (rank == 0) {
    run(int64_t{0}, int64_t{0}, int64_t{1});
    return;
  }
  // 1. The innermost dimension `k` a run spans from, and its length.
  size_t k = rank - 1;
  int64_t run_length = extent[k];
  while (k > 0 && extent[k] == source_shape[k] && extent[k] == target_shape[k]) {
    --k;
    run_length *= extent[k];
  }
  // 2. Row-major strides of both tensors.
  std::vector<int64_t> source_stride(rank, 1), target_stride(rank, 1);
  for (size_t d = rank - 1; d > 0; --d) {
    source_stride[d - 1] = source_stride[d] * source_shape[d];
    target_stride[d - 1] = target_stride[d] * target_shape[d];
  }
  // 3. An odometer over the dimensions before k.
  std::vector<int64_t> index(k, 0);
  while (true) {
    int64_t source_element = source_start[k] * source_stride[k];
    int64_t target_element = target_start[k] * target_stride[k];
    for (size_t d = 0; d < k; ++d) {
      source_element += (source_start[d] + index[d]) * source_stride[d];
      target_element += (target_start[d] + index[d]) * target_stride[d];
    }
    run(source_element, target_element, run_length);
    size_t d = k;
    while (d > 0) {
      --d;
      if (++index[d] < extent[d]) break;
      index[d] = 0;
      if (d == 0) return;
    }
    if (k == 0) return;
  }
}

// Copies a box of `extent` (elements of `element_bytes` bytes) from `source` (a tensor of
// `source_shape`, box at `source_start`) into `target` (`target_shape`, box at `target_start`).
void copyBox(const void* source, const Shape& source_shape, const Shape& source_start, void* target,
             const Shape& target_shape, const Shape& target_start, const Shape& extent, int64_t element_bytes);

}  // namespace cleave::runtime
