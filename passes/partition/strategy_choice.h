// Strategy choice: compiles the fastest searched strategy that compiles, falling back to the next ones.
#pragma once

#include <functional>

#include "analysis/cost_model.h"
#include "ir/plan.pb.h"
#include "ir/status.h"
#include "passes/core/compile_pipeline.h"
#include "passes/partition/strategy_search.h"

namespace cleave {

// Called for each strategy that did not compile, before the next one is tried.
using StrategyFallbackNote = std::function<void(const ParallelStrategy& strategy, const Status& error)>;

// Compiles `model` with the search's best strategy, or, when it does not compile, with the next
// alternatives in order (each failure passed to `note`). The plan's strategy records the search:
// the cluster, the chosen estimate and every rejected one ("did not compile: <error>", "slower",
// or why it is over memory). `options` gives everything but the degrees, microbatches and schedule.
// When none compiles, the last strategy's error.
Expected<planpb::Plan> compileSearchedStrategy(const Graph& model, CompileOptions options,
                                               const StrategySearchResult& searched, const ClusterSpec& cluster,
                                               const StrategyFallbackNote& note = nullptr);

}  // namespace cleave
