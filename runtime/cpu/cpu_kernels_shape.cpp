// CPU kernels of the shape and data-movement ops: reshape, flatten, squeeze, unsqueeze, transpose,
// concat, split, slice, gather, expand, trilu and constant. They move elements of any dtype by size.
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/cpu/cpu_kernel_support.h"
#include "runtime/cpu/cpu_kernels.h"

namespace cleave::runtime::cpu {
namespace {

// Work per element moved (for parallelFor): a copy costs about a simple operation.
constexpr int64_t kMoveWork = 1;

// reshape, flatten, squeeze, unsqueeze: the same row-major elements under a new shape.
Status relabelKernel(const KernelCall& call) {
  parallelCopy(call.outputs[0], call.inputs[0], call.op.results[0].bytes(), threadCount(call));
  return Status::ok();
}

// ---- transpose ----

// A permutation with size-1 input dims dropped and input dims that stay neighbours merged.
struct CompactPermutation {
  Shape in_dims;              // merged input dims
  std::vector<int64_t> perm;  // result dim k reads merged input dim perm[k]
};

CompactPermutation compactPermutation(const Shape& in, const std::vector<int64_t>& perm) {
  // 1. Drop size-1 input dims and renumber the rest.
  std::vector<int64_t> renumbered(in.size(), -1);
  Shape dims;
  for (size_t d = 0; d < in.size(); ++d)
    if (in[d] != 1) {
      renumbered[d] = static_cast<int64_t>(dims.size());
      dims.push_back(in[d]);
    }
  std::vector<int64_t> kept;
  for (int64_t p : perm)
    if (renumbered[p] >= 0) kept.push_back(renumbered[p]);
  // 2. Merge runs k, k+1, ... of the permutation that read consecutive input dims.
  CompactPermutation result;
  std::vector<std::vector<int64_t>> runs;
  for (int64_t p : kept) {
    if (!runs.empty() && runs.back().back() + 1 == p)
      runs.back().push_back(p);
    else
      runs.push_back({p});
  }
  // Merged input dims are numbered in input order of their runs' heads.
  std::vector<size_t> order(runs.size());
  for (size_t r = 0; r < runs.size(); ++r) order[r] = r;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return runs[a][0] < runs[b][0]; });
  std::vector<int64_t> merged_of_run(runs.size());
  for (size_t i = 0; i < order.size(); ++i) {
    merged_of_run[order[i]] = static_cast<int64_t>(i);
    int64_t size = 1;
    for (int64_t d : runs[order[i]]) size *= dims[d];
    result.in_dims.push_back(size);
  }
  for (size_t r = 0; r < runs.size(); ++r) result.perm.push_back(merged_of_run[r]);
  return result;
}

template <class E>
void transposeElements(const KernelCall& call, const CompactPermutation& cp) {
  const E* x = call.in<E>(0);
  E* y = call.out<E>(0);
  const int threads = threadCount(call);
  const size_t rank = cp.in_dims.size();
  const int64_t n = call.op.results[0].numel();
  std::vector<int64_t> in_strides(rank, 1);
  for (size_t d = rank; d-- > 1;) in_strides[d - 1] = in_strides[d] * cp.in_dims[d];
  Shape out_dims(rank);
  std::vector<int64_t> read_strides(rank);  // input stride of each result dim
  for (size_t k = 0; k < rank; ++k) {
    out_dims[k] = cp.in_dims[cp.perm[k]];
    read_strides[k] = in_strides[cp.perm[k]];
  }
  const int64_t inner = out_dims[rank - 1];
  if (cp.perm[rank - 1] == static_cast<int64_t>(rank) - 1) {
    // 1. The innermost dim stays innermost: copy rows of `inner` elements.
    const BroadcastLayout rows{Shape(out_dims.begin(), out_dims.end() - 1),
                               {std::vector<int64_t>(read_strides.begin(), read_strides.end() - 1)}};
    parallelFor(n / inner, threads, inner * kMoveWork, [&](int64_t begin, int64_t end) {
      forEachSegment<1>(rows, begin, end, [&](int64_t at, const std::array<int64_t, 1>& from, int64_t length) {
        const int64_t step = rows.strides[0].back();
        for (int64_t r = 0; r < length; ++r)
          std::memcpy(y + (at + r) * inner, x + from[0] + r * step, static_cast<size_t>(inner) * sizeof(E));
      });
    });
    return;
  }
  // 2. Otherwise tile the two dims that are innermost in x (result dim a) and in y (result dim
  //    rank-1), so that both the reads and the writes stay within a few cache lines.
  constexpr int64_t kTile = 32;
  size_t a = 0;
  while (cp.perm[a] != static_cast<int64_t>(rank) - 1) ++a;
  std::vector<int64_t> out_strides(rank, 1);
  for (size_t d = rank; d-- > 1;) out_strides[d - 1] = out_strides[d] * out_dims[d];
  Shape outer_dims;
  std::vector<int64_t> outer_read, outer_write;
  for (size_t k = 0; k + 1 < rank; ++k)
    if (k != a) {
      outer_dims.push_back(out_dims[k]);
      outer_read.push_back(read_strides[k]);
      outer_write.push_back(out_strides[k]);
    }
  const int64_t rows = out_dims[a], cols = inner;  // tile over (x's innermost, y's innermost)
  const int64_t row_write = out_strides[a], col_read = read_strides[rank - 1];
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  const int64_t outer_count = n / (rows * cols);
  parallelFor(outer_count * row_tiles * col_tiles, threads, kTile * kTile * kMoveWork, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      // The outer index's read and write offsets, then one tile.
      int64_t rest = item / (row_tiles * col_tiles), read = 0, write = 0;
      for (size_t d = outer_dims.size(); d-- > 0;) {
        const int64_t index = rest % outer_dims[d];
        rest /= outer_dims[d];
        read += index * outer_read[d];
        write += index * outer_write[d];
      }
      const int64_t r0 = item / col_tiles % row_tiles * kTile, c0 = item % col_tiles * kTile;
      const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (int64_t r = r0; r < r1; ++r) {
        const E* in = x + read + r;
        E* out = y + write + r * row_write;
        for (int64_t c = c0; c < c1; ++c) out[c] = in[c * col_read];
      }
    }
  });
}

Status transposeKernel(const KernelCall& call) {
  const Shape& in = call.op.operands[0].shape;
  std::vector<int64_t> perm = call.op.getInts("perm");
  const int64_t rank = static_cast<int64_t>(in.size());
  if (perm.empty())
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  for (int64_t& p : perm) p = normalizeAxis(p, rank);
  const CompactPermutation cp = compactPermutation(in, perm);
  bool identity = true;
  for (size_t k = 0; k < cp.perm.size(); ++k) identity = identity && cp.perm[k] == static_cast<int64_t>(k);
  if (identity || call.op.results[0].numel() == 0) return relabelKernel(call);
  return visitBySize(call.op.results[0].dtype, [&]<class E>(E) {
    transposeElements<E>(call, cp);
    return Status::ok();
  });
}

// ---- concat, split ----

// Moves bytes between a tensor cut along an axis and its pieces: in each of `outer` rows of the
// whole tensor, piece i holds piece_bytes[i] consecutive bytes. kJoin copies pieces into the whole
// (concat), else the whole into the pieces (split).
template <bool kJoin>
void movePieces(std::conditional_t<kJoin, uint8_t*, const uint8_t*> whole,
                const std::vector<std::conditional_t<kJoin, const uint8_t*, uint8_t*>>& pieces,
                const std::vector<int64_t>& piece_bytes, int64_t outer, int threads) {
  int64_t row_bytes = 0;
  for (int64_t b : piece_bytes) row_bytes += b;
  // Copies piece i's part of row o, on `copy_threads` threads.
  auto move = [&](int64_t o, size_t i, int64_t offset, int copy_threads) {
    auto* row = whole + o * row_bytes + offset;
    auto* piece = pieces[i] + o * piece_bytes[i];
    if constexpr (kJoin) parallelCopy(row, piece, piece_bytes[i], copy_threads);
    else parallelCopy(piece, row, piece_bytes[i], copy_threads);
  };
  // Many rows: one thread per range of rows. Few long rows: parallelise inside each copy.
  const bool rows_in_parallel = outer >= threads;
  auto moveRows = [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      int64_t offset = 0;
      for (size_t i = 0; i < pieces.size(); ++i) {
        move(o, i, offset, rows_in_parallel ? 1 : threads);
        offset += piece_bytes[i];
      }
    }
  };
  if (rows_in_parallel)
    parallelFor(outer, threads, row_bytes / 8, moveRows);
  else
    moveRows(0, outer);
}

Status concatKernel(const KernelCall& call) {
  const Shape& out = call.op.results[0].shape;
  const size_t axis = static_cast<size_t>(normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(out.size())));
  const int64_t inner = dimsProduct(out, axis + 1, out.size()) * dtypeSize(call.op.results[0].dtype);
  std::vector<const uint8_t*> pieces;
  std::vector<int64_t> piece_bytes;
  for (size_t i = 0; i < call.op.operands.size(); ++i) {
    pieces.push_back(call.in<uint8_t>(static_cast<int>(i)));
    piece_bytes.push_back(call.op.operands[i].shape[axis] * inner);
  }
  movePieces<true>(call.out<uint8_t>(0), pieces, piece_bytes, dimsProduct(out, 0, axis), threadCount(call));
  return Status::ok();
}

Status splitKernel(const KernelCall& call) {
  const Shape& in = call.op.operands[0].shape;
  const size_t axis = static_cast<size_t>(normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(in.size())));
  const int64_t inner = dimsProduct(in, axis + 1, in.size()) * dtypeSize(call.op.operands[0].dtype);
  std::vector<uint8_t*> pieces;
  std::vector<int64_t> piece_bytes;
  for (size_t i = 0; i < call.op.results.size(); ++i) {
    pieces.push_back(call.out<uint8_t>(static_cast<int>(i)));
    piece_bytes.push_back(call.op.results[i].shape[axis] * inner);
  }
  movePieces<false>(call.in<uint8_t>(0), pieces, piece_bytes, dimsProduct(in, 0, axis), threadCount(call));
  return Status::ok();
}

// ---- slice ----

Status sliceKernel(const KernelCall& call) {
  const Shape& in = call.op.operands[0].shape;
  const Shape& out = call.op.results[0].shape;
  CLEAVE_ASSIGN_OR_RETURN(const std::vector<SliceDim> dims, resolveSliceDims(call, in, out));
  const int64_t n = call.op.results[0].numel();
  if (n == 0) return Status::ok();
  // Result element idx reads input element base + Σ idx[d]·step[d]·in_stride[d].
  std::vector<int64_t> in_strides(in.size(), 1);
  for (size_t d = in.size(); d-- > 1;) in_strides[d - 1] = in_strides[d] * in[d];
  BroadcastLayout walk{out.empty() ? Shape{1} : out, {std::vector<int64_t>(std::max<size_t>(1, in.size()), 0)}};
  int64_t base = 0;
  for (size_t d = 0; d < in.size(); ++d) {
    base += dims[d].start * in_strides[d];
    walk.strides[0][d] = dims[d].step * in_strides[d];
  }
  return visitBySize(call.op.results[0].dtype, [&]<class E>(E) {
    const E* x = call.in<E>(0) + base;
    E* y = call.out<E>(0);
    const int64_t step = walk.strides[0].back();
    parallelFor(n, threadCount(call), kMoveWork, [&](int64_t begin, int64_t end) {
      forEachSegment<1>(walk, begin, end, [&](int64_t at, const std::array<int64_t, 1>& from, int64_t length) {
        if (step == 1) {
          std::memcpy(y + at, x + from[0], static_cast<size_t>(length) * sizeof(E));
        } else {
          for (int64_t i = 0; i < length; ++i) y[at + i] = x[from[0] + i * step];
        }
      });
    });
    return Status::ok();
  });
}

// ---- gather ----

// gather: result[o, j, k] = data[o, indices[j], k]; negative indices count from the end of the axis.
Status gatherKernel(const KernelCall& call) {
  const Shape& data_shape = call.op.operands[0].shape;
  const int64_t axis = normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(data_shape.size()));
  const AxisView view = axisView(data_shape, axis);
  const int64_t count = call.op.operands[1].numel();
  const int64_t row_bytes = view.inner * dtypeSize(call.op.operands[0].dtype);
  return visitIndex(call, call.op.operands[1].dtype, [&]<class I>(I) -> Status {
    const I* indices = call.in<I>(1);
    // 1. Check every index before writing anything.
    for (int64_t j = 0; j < count; ++j) {
      const int64_t index = indices[j];
      if (index < -view.length || index >= view.length)
        return Status::badInput("gather: index " + std::to_string(index) + " (element " + std::to_string(j) +
                                " of the indices) is out of range for axis " + std::to_string(axis) + " of size " +
                                std::to_string(view.length));
    }
    // 2. Copy one row of `inner` elements per (outer, index) pair.
    const auto* data = call.in<uint8_t>(0);
    auto* out = call.out<uint8_t>(0);
    parallelFor(view.outer * count, threadCount(call), row_bytes / 8, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        const int64_t o = item / count;
        int64_t index = indices[item % count];
        if (index < 0) index += view.length;
        std::memcpy(out + item * row_bytes, data + (o * view.length + index) * row_bytes,
                    static_cast<size_t>(row_bytes));
      }
    });
    return Status::ok();
  });
}

// ---- gather_elements ----

// result[i] = data[i's coordinates with the axis one replaced by indices[i]]; negative indices count
// from the end of the axis; every index is checked before anything is written.
Status gatherElementsKernel(const KernelCall& call) {
  const Shape &data_shape = call.op.operands[0].shape, &index_shape = call.op.operands[1].shape;
  const int64_t axis = normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(data_shape.size()));
  const ElementsAddressing addressing(data_shape, index_shape, axis);
  const int64_t n = call.op.operands[1].numel();
  return visitIndex(call, call.op.operands[1].dtype, [&]<class I>(I) -> Status {
    const I* indices = call.in<I>(1);
    for (int64_t i = 0; i < n; ++i)
      if (indices[i] < -addressing.length() || indices[i] >= addressing.length())
        return Status::badInput("gather_elements: index " + std::to_string(indices[i]) + " (element " + std::to_string(i) +
                                " of the indices) is out of range for axis " + std::to_string(axis) + " of size " +
                                std::to_string(addressing.length()));
    return visitBySize(call.op.results[0].dtype, [&]<class E>(E) -> Status {
      const E* data = call.in<E>(0);
      E* out = call.out<E>(0);
      parallelFor(n, threadCount(call), kMoveWork * 4, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const int64_t index = indices[i] < 0 ? indices[i] + addressing.length() : indices[i];
          out[i] = data[addressing.offset(i, index)];
        }
      });
      return Status::ok();
    });
  });
}

// ---- gather_nd ----

// Each index tuple copies one slice of data's trailing dims; every index is checked first.
Status gatherNdKernel(const KernelCall& call) {
  const NdAddressing addressing(call.op.operands[0].shape, call.op.operands[1].shape, call.op.getInt("batch_dims"));
  const int64_t slice_bytes = addressing.sliceSize() * dtypeSize(call.op.operands[0].dtype);
  return visitIndex(call, call.op.operands[1].dtype, [&]<class I>(I) -> Status {
    const I* indices = call.in<I>(1);
    std::vector<int64_t> offsets(static_cast<size_t>(addressing.rows()));
    for (int64_t row = 0; row < addressing.rows(); ++row) {
      int64_t bad = 0;
      offsets[row] = addressing.offset(row, indices + row * addressing.tupleSize(), bad);
      if (offsets[row] < 0) {
        const int64_t element = row * addressing.tupleSize() + bad;
        return Status::badInput("gather_nd: index " + std::to_string(indices[element]) + " (element " +
                                std::to_string(element) + " of the indices) is out of range for dim " +
                                std::to_string(call.op.getInt("batch_dims") + bad) + " of " + call.op.operands[0].str());
      }
    }
    const auto* data = call.in<uint8_t>(0);
    auto* out = call.out<uint8_t>(0);
    const int64_t element_bytes = dtypeSize(call.op.operands[0].dtype);
    parallelFor(addressing.rows(), threadCount(call), std::max<int64_t>(1, slice_bytes / 8), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row)
        std::memcpy(out + row * slice_bytes, data + offsets[row] * element_bytes, static_cast<size_t>(slice_bytes));
    });
    return Status::ok();
  });
}

// ---- scatter_elements, scatter_nd ----

// The data offset each update element lands on (scatter_elements: its coordinates with the axis one
// replaced by its index; scatter_nd: its index tuple's slice), every index checked.
template <class I>
Status scatterTargets(const KernelCall& call, std::vector<int64_t>& targets) {
  const Shape &data_shape = call.op.operands[0].shape, &index_shape = call.op.operands[1].shape;
  const I* indices = call.in<I>(1);
  const std::string op = std::string(call.op.def.name);
  targets.resize(static_cast<size_t>(call.op.operands[2].numel()));
  if (call.op.def.id == OpId::scatter_elements) {
    const int64_t axis = normalizeAxis(call.op.getInt("axis"), static_cast<int64_t>(data_shape.size()));
    const ElementsAddressing addressing(data_shape, index_shape, axis);
    for (size_t i = 0; i < targets.size(); ++i) {
      const int64_t index = indices[i];
      if (index < -addressing.length() || index >= addressing.length())
        return Status::badInput(op + ": index " + std::to_string(index) + " (element " + std::to_string(i) +
                                " of the indices) is out of range for axis " + std::to_string(axis) + " of size " +
                                std::to_string(addressing.length()));
      targets[i] = addressing.offset(static_cast<int64_t>(i), index < 0 ? index + addressing.length() : index);
    }
    return Status::ok();
  }
  const NdAddressing addressing(data_shape, index_shape, 0);
  for (int64_t row = 0; row < addressing.rows(); ++row) {
    int64_t bad = 0;
    const int64_t base = addressing.offset(row, indices + row * addressing.tupleSize(), bad);
    if (base < 0)
      return Status::badInput(op + ": index " + std::to_string(indices[row * addressing.tupleSize() + bad]) + " (element " +
                              std::to_string(row * addressing.tupleSize() + bad) + " of the indices) is out of range for " +
                              call.op.operands[0].str());
    for (int64_t e = 0; e < addressing.sliceSize(); ++e) targets[row * addressing.sliceSize() + e] = base + e;
  }
  return Status::ok();
}

// result = data, then each update combined into its target in order (none: replaced; add, mul, max, min).
Status scatterKernel(const KernelCall& call) {
  std::vector<int64_t> targets;
  CLEAVE_TRY(visitIndex(call, call.op.operands[1].dtype, [&]<class I>(I) { return scatterTargets<I>(call, targets); }));
  if (call.outputs[0] != call.inputs[0])
    std::memmove(call.outputs[0], call.inputs[0], static_cast<size_t>(call.op.results[0].bytes()));
  const std::string& reduction = call.op.getString("reduction");
  if (reduction == "none") {
    return visitBySize(call.op.results[0].dtype, [&]<class E>(E) -> Status {
      const E* updates = call.in<E>(2);
      E* out = call.out<E>(0);
      for (size_t i = 0; i < targets.size(); ++i) out[targets[i]] = updates[i];
      return Status::ok();
    });
  }
  return visitNumeric(call, call.op.results[0].dtype, [&]<class T>(T) -> Status {
    const T* updates = call.in<T>(2);
    T* out = call.out<T>(0);
    for (size_t i = 0; i < targets.size(); ++i) {
      T& slot = out[targets[i]];
      if (reduction == "add") slot = static_cast<T>(slot + updates[i]);
      else if (reduction == "mul") slot = static_cast<T>(slot * updates[i]);
      else if (reduction == "max") slot = std::max(slot, updates[i]);
      else slot = std::min(slot, updates[i]);
    }
    return Status::ok();
  });
}

// ---- expand, trilu, constant ----

Status expandKernel(const KernelCall& call) {
  const int64_t n = call.op.results[0].numel();
  if (n == 0) return Status::ok();
  const BroadcastLayout layout = makeBroadcastLayout(call.op.results[0].shape, {&call.op.operands[0].shape});
  return visitBySize(call.op.results[0].dtype, [&]<class E>(E) {
    const E* x = call.in<E>(0);
    E* y = call.out<E>(0);
    const bool steps = layout.steps(0);
    parallelFor(n, threadCount(call), kMoveWork, [&](int64_t begin, int64_t end) {
      forEachSegment<1>(layout, begin, end, [&](int64_t at, const std::array<int64_t, 1>& from, int64_t length) {
        if (steps)
          std::memcpy(y + at, x + from[0], static_cast<size_t>(length) * sizeof(E));
        else
          std::fill_n(y + at, length, x[from[0]]);
      });
    });
    return Status::ok();
  });
}

// trilu on the last two dims (row i, column j): upper keeps j − i ≥ k, lower keeps j − i ≤ k.
Status triluKernel(const KernelCall& call) {
  const Shape& shape = call.op.operands[0].shape;
  const int64_t rows = shape[shape.size() - 2], cols = shape[shape.size() - 1];
  const int64_t n = call.op.results[0].numel();
  if (n == 0) return Status::ok();
  const bool upper = call.op.getInt("upper") != 0;
  // k beyond ±(rows + cols) keeps everything or nothing; clamping avoids overflow in i + k.
  const int64_t k = std::clamp<int64_t>(call.op.getInt("k"), -(rows + cols), rows + cols);
  return visitBySize(call.op.results[0].dtype, [&]<class E>(E) {
    const E* x = call.in<E>(0);
    E* y = call.out<E>(0);
    parallelFor(n / cols, threadCount(call), cols * kMoveWork, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t i = r % rows;
        // The kept columns are [keep_first, keep_last).
        const int64_t keep_first = upper ? std::clamp<int64_t>(i + k, 0, cols) : 0;
        const int64_t keep_last = upper ? cols : std::clamp<int64_t>(i + k + 1, 0, cols);
        const E* in = x + r * cols;
        E* out = y + r * cols;
        std::fill_n(out, keep_first, E{0});
        if (keep_last > keep_first) std::copy(in + keep_first, in + keep_last, out + keep_first);
        std::fill(out + std::max(keep_first, keep_last), out + cols, E{0});
      }
    });
    return Status::ok();
  });
}

Status constantKernel(const KernelCall& call) {
  const TensorData* value = call.op.getTensor("value");
  const int64_t bytes = call.op.results[0].bytes();
  if (!value || static_cast<int64_t>(value->bytes.size()) != bytes)
    return Status::internal("constant: the value attribute does not hold " + call.op.results[0].str());
  parallelCopy(call.outputs[0], value->bytes.data(), bytes, threadCount(call));
  return Status::ok();
}

}  // namespace

void registerShapeKernels(CpuKernelTable& table) {
  auto set = [&](OpId id, CpuKernel kernel) { table[static_cast<int>(id)] = kernel; };
  set(OpId::reshape, relabelKernel);
  set(OpId::flatten, relabelKernel);
  set(OpId::squeeze, relabelKernel);
  set(OpId::unsqueeze, relabelKernel);
  set(OpId::transpose, transposeKernel);
  set(OpId::concat, concatKernel);
  set(OpId::split, splitKernel);
  set(OpId::slice, sliceKernel);
  set(OpId::gather, gatherKernel);
  set(OpId::gather_elements, gatherElementsKernel);
  set(OpId::gather_nd, gatherNdKernel);
  set(OpId::scatter_elements, scatterKernel);
  set(OpId::scatter_nd, scatterKernel);
  set(OpId::expand, expandKernel);
  set(OpId::trilu, triluKernel);
  set(OpId::constant, constantKernel);
}

}  // namespace cleave::runtime::cpu
