// The model at any batch: rebuilt by the frontend, or re-inferred by the infer-shapes pass.
#include "passes/core/model_at_batch.h"

#include <string>

#include "passes/core/pass_manager.h"

namespace cleave {

namespace {

// Whether every input of rank >= 1 already has `batch` rows (the model was built at that batch).
bool hasBatch(const Graph& model, int64_t batch) {
  for (ValueId input : model.inputs) {
    const Shape& shape = model.values[input].type.shape;
    if (!shape.empty() && shape[0] != batch) return false;
  }
  return true;
}

}  // namespace

Expected<Graph> modelAtBatch(const Graph& model, const ModelBuilder& builder, int64_t batch) {
  if (builder && batch > 0) {
    if (hasBatch(model, batch)) return model;  // built at this batch already: the build would repeat it
    return builder(batch);
  }
  Graph graph = model;
  // The pass manager verifies the graph after every pass.
  CLEAVE_ASSIGN_OR_RETURN(Pipeline passes, parsePipeline("infer-shapes{batch=" + std::to_string(batch) + "}"));
  CLEAVE_TRY(PassManager(std::move(passes)).run(graph));
  return graph;
}

}  // namespace cleave
