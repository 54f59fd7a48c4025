// Whether microbatches compute what the whole batch computes: they do while no value is computed
// across the batch's rows and then used with them.
#pragma once

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Microbatching runs `graph` (a forward graph, the loss included, whose inputs have the batch rows in
// dim 0) once per microbatch. That computes what the whole batch computes while each row's values
// depend on that row alone. A value summed across rows (an op whose sharding rule reduces the rows'
// dim: BatchNorm's batch mean and variance in training, a product contracting the batch) would
// instead be computed per microbatch, from its rows alone. That is harmless for a graph output
// (the loss: a mean per microbatch, averaged), but not when the value is then used with the rows, or
// kept as state: a bad-input error names the value and where it is used.
// Rows are followed through the ops' sharding rules (pass-through factors) and through reshapes that
// keep them the leading dim of a group. Where a view scatters them, or a rule needs their dim whole
// (an op reading other rows' elements without summing them, such as a softmax over the batch), the
// check stops following them: it finds sums over the rows, not every way of mixing them.
Status checkMicrobatchesComputeTheBatch(const Graph& graph, int num_microbatches);

}  // namespace cleave
