// The model at any batch: rebuilt by the frontend, or re-inferred by the infer-shapes pass.
#include "passes/core/model_at_batch.h"

#include <string>

#include "passes/core/pass_manager.h"

namespace cleave {

Expected<Graph> modelAtBatch(const Graph& model, const ModelBuilder& builder, int64_t batch) {
  if (builder && batch > 0) return builder(batch);
  Graph graph = model;
  // The pass manager verifies the graph after every pass.
  CLEAVE_ASSIGN_OR_RETURN(Pipeline passes, parsePipeline("infer-shapes{batch=" + std::to_string(batch) + "}"));
  CLEAVE_TRY(PassManager(std::move(passes)).run(graph));
  return graph;
}

}  // namespace cleave
