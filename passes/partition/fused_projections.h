// Fused projections as batched products, so tensor parallelism splits each part the way Megatron
// splits attention: by heads. GPT-2's c_attn (and any Linear whose output is cut into equal parts,
// a fused QKV) computes q, k and v with one weight [in, 3·out]; a column split of that weight gives
// rank 0 all of q and half of k, which the heads after it cannot use, so the partitioner gathered
// the whole product and ran attention whole on every rank. Written as a batch of 3 products over
// the weight held as [3, in, out], each rank holds out/tp columns of each part: its heads of q, k
// and v, and attention and the output projection (a row split) follow Megatron's layout.
#pragma once

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Rewrites each
//   p = gemm(x, W, [b]) (alpha 1, beta 1, a not transposed) or p = matmul(x, W) [+ b],
//   [r = reshape(p) keeping the last dim], cut along the last axis into S >= 2 equal parts of N:
//   one split, or slices (step 1) that together read it all ([:N], [N:2N], ..., Phi-3's q, k, v);
//   or r = reshape(p) splitting the last dim into [S, ...] (ModernBERT's [.., 3, heads, head dim]),
//   cut the same way along that S axis into S parts of 1,
// whose weight W ([K, S·N], or [S·N, K] transposed) and bias b ([S·N]) are parameters with stored
// data (an imported model's) that this product alone reads, and whose intermediate values only the
// next step reads, into
//   x3 = reshape(x, [1, M, K]);  Y = matmul(x3, transpose(reshape(W, [K, S, N]), [1, 0, 2]))
//   (or matmul(x3, reshape(W, [S, N, K]), transpose_b)) [+ reshape(b, [S, 1, N])] : [S, M, N];
//   part s = reshape(split(Y, axis 0)[s], the part's shape),
// the parts keeping their values (and names), written where the first cut was. The same numbers in another order of
// sums: each part is its own product. The partitioner holds W and b in the reshaped shapes
// (Param::model) and splits N over tp.
// With `groups` G >= 2 (the tp degree), parts of unequal sizes along the last axis, each dividing by
// G (q, k and v of grouped-query attention: 4 query heads, 2 key/value heads), are held grouped
// (ir/held_layout.h): W becomes [G, K, S·N / G] (or [G, S·N / G, K] transposed) and b [G, S·N / G],
// group g holding block g of each part, and
//   Y = matmul(reshape(x, [1, M, K]), W) [+ reshape(b, [G, 1, S·N / G])] : [G, M, S·N / G];
//   part s = reshape(transpose(slice(Y, last axis, the part's columns of a group), [1, 0, 2]), its shape).
// A tp split of the groups then gives each rank its block of q and the k and v blocks its query
// heads read. Returns the number of projections rewritten.
Expected<int> batchFusedProjections(Graph& graph, int64_t groups = 1);

}  // namespace cleave
