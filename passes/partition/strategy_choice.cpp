// Strategy choice: compiling the searched strategies in order of speed and recording the search in the plan.
#include "passes/partition/strategy_choice.h"

#include <string>
#include <vector>

#include "passes/lowering/pipeline_schedule.h"

namespace cleave {
namespace {

// The search's estimate of one strategy as the plan records it; `note` says why it was not chosen.
planpb::StrategyCandidate candidateProto(const StrategyEstimate& estimate, const std::string& note) {
  planpb::StrategyCandidate candidate;
  candidate.set_dp(estimate.strategy.dp);
  candidate.set_tp(estimate.strategy.tp);
  candidate.set_pp(estimate.strategy.pp);
  candidate.set_microbatches(estimate.strategy.microbatches);
  candidate.set_schedule(std::string(pipelineScheduleName(estimate.strategy.schedule)));
  candidate.set_predicted_step_time_s(estimate.step_time_s);
  candidate.set_memory_bytes(estimate.memory_bytes);
  candidate.set_note(note);
  candidate.set_virtual_stages(estimate.strategy.virtual_stages);
  candidate.set_sequence_parallel(estimate.strategy.sequence_parallel);
  candidate.set_zero(estimate.strategy.zero);
  if (estimate.strategy.recompute != RecomputeMode::kNone)
    candidate.set_recompute(std::string(recomputeModeName(estimate.strategy.recompute)));
  return candidate;
}

// Records the search in the plan's strategy: the cluster, the chosen estimate (ranked[chosen]) and
// the rejected ones: those ranked before it did not compile (`errors`, in order), those after it
// are slower, and those over memory do not fit.
void recordSearch(planpb::Plan& plan, const ClusterSpec& cluster, const std::vector<const StrategyEstimate*>& ranked,
                  size_t chosen, const std::vector<std::string>& errors, const std::vector<StrategyEstimate>& over_memory) {
  planpb::Strategy& strategy = *plan.mutable_strategy();
  strategy.set_search_cluster(cluster.name);
  *strategy.mutable_chosen() = candidateProto(*ranked[chosen], "");
  for (size_t k = 0; k < ranked.size(); ++k)
    if (k != chosen)
      *strategy.add_alternatives() = candidateProto(*ranked[k], k < chosen ? "did not compile: " + errors[k] : "slower");
  for (const StrategyEstimate& over : over_memory) *strategy.add_alternatives() = candidateProto(over, over.infeasible);
}

}  // namespace

Expected<planpb::Plan> compileSearchedStrategy(const Graph& model, CompileOptions options,
                                               const StrategySearchResult& searched, const ClusterSpec& cluster,
                                               const StrategyFallbackNote& note) {
  std::vector<const StrategyEstimate*> ranked = {&searched.best};
  for (const StrategyEstimate& alternative : searched.alternatives) ranked.push_back(&alternative);
  Expected<planpb::Plan> plan = Status::internal("compile: no strategy was compiled");
  std::vector<std::string> errors;
  for (size_t k = 0; k < ranked.size(); ++k) {
    const ParallelStrategy& strategy = ranked[k]->strategy;
    options.dp = strategy.dp;
    options.tp = strategy.tp;
    options.pp = strategy.pp;
    options.microbatches = strategy.microbatches;
    options.schedule = std::string(pipelineScheduleName(strategy.schedule));
    options.training.recompute = strategy.recompute;
    options.zero = strategy.zero;
    options.virtual_stages = strategy.virtual_stages;
    options.sequence_parallel = strategy.sequence_parallel;
    options.stage_start_nodes = ranked[k]->stage_start_nodes;
    plan = compileModel(model, options);
    if (plan) {
      recordSearch(*plan, cluster, ranked, k, errors, searched.over_memory);
      return plan;
    }
    errors.push_back(plan.status().message());
    if (note) note(strategy, plan.status());
  }
  return plan;
}

}  // namespace cleave
