// A model's graph at any batch: the shape arithmetic that depends on the batch evaluated again for
// the rows a program sees (the global batch, a microbatch, a profile's rows).
#pragma once

#include <cstdint>
#include <functional>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Builds the model's graph with `batch` rows: an ONNX model is imported again, so the shapes its
// exporter computed from the input's dims (Shape -> Gather -> Concat -> Reshape, Expand targets,
// masks, BatchNorm's count) are folded at that batch rather than at the export's.
using ModelBuilder = std::function<Expected<Graph>(int64_t batch)>;

// `model` with dim 0 of every input set to `batch` (0 keeps the model's): built by `builder` when
// there is one (unless `model`'s inputs have that batch already), else re-inferred by the infer-shapes pass (a text-IR model, whose reshapes use 0
// and -1 for the batch). Errors name the node whose shape rule fails at that batch.
Expected<Graph> modelAtBatch(const Graph& model, const ModelBuilder& builder, int64_t batch);

}  // namespace cleave
