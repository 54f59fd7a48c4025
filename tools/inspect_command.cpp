// `cleave inspect PLAN.cplan`: per-rank tables or JSON, a Graphviz drawing and a predicted timeline.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "ir/plan.h"
#include "ir/plan.pb.h"
#include "ir/shared_programs.h"
#include "analysis/cluster_json.h"
#include "analysis/cost_model.h"
#include "analysis/plan_dot.h"
#include "analysis/plan_fusion.h"
#include "analysis/plan_report.h"
#include "analysis/plan_timeline.h"
#include "tools/cli_common.h"
#include "tools/plan_commands.h"
#include "tools/units_text.h"

namespace cleave::cli {
namespace {

// The simulated end of `rank` in the timeline, or nullopt when there is none.
std::optional<double> rankEnd(const Expected<ProgramTimeline>& timeline, int32_t rank) {
  if (!timeline) return std::nullopt;
  for (const RankTimeline& ranked : timeline->ranks)
    if (ranked.rank == rank) return ranked.end_s;
  return std::nullopt;
}

// How many ranks hold programs of their own; the others run one of theirs (RankPlan.same_program_as).
int distinctPrograms(const planpb::Plan& plan) {
  int distinct = 0;
  for (const auto& rank : plan.ranks()) distinct += rank.has_same_program_as() ? 0 : 1;
  return distinct;
}

std::string headerText(const planpb::Plan& plan, const std::string& path) {
  const auto& strategy = plan.strategy();
  std::string text = path + ": model @" + plan.model_name() + ", " + std::to_string(plan.devices()) +
                     " device(s), dp " + std::to_string(strategy.dp()) + " x tp " + std::to_string(strategy.tp()) +
                     " x pp " + std::to_string(strategy.pp()) + ", " + std::to_string(strategy.microbatches()) +
                     " microbatch(es)";
  if (!strategy.schedule().empty())
    text += " (" + strategy.schedule() +
            (strategy.virtual_stages() > 1 ? ", interleaved: " + std::to_string(strategy.virtual_stages()) +
                                                 " virtual stages per rank"
                                           : "") +
            ")";
  if (strategy.zero() != 0) text += ", zero " + std::to_string(strategy.zero());
  if (strategy.sequence_parallel()) text += ", sequence parallel";
  text += ", batch " + std::to_string(plan.global_batch());
  if (plan.has_training())
    text += ", training (" + plan.training().loss() + ", " + plan.training().optimizer() +
            (plan.training().precision().empty() ? "" : ", " + plan.training().precision()) +
            (plan.training().recompute().empty() ? "" : ", recompute " + plan.training().recompute()) + ")";
  text += "\n";
  const int distinct = distinctPrograms(plan);
  if (distinct < plan.ranks_size())
    text += "SPMD: the file holds " + std::to_string(distinct) + " distinct rank programs for " +
            std::to_string(plan.ranks_size()) + " ranks (the others run the programs of their stage's first rank)\n";
  return text;
}

// "dp 4 x tp 2 x pp 1, 1 microbatch, 1f1b" for a searched candidate.
std::string candidateName(const planpb::StrategyCandidate& c) {
  return "dp " + std::to_string(c.dp()) + " x tp " + std::to_string(c.tp()) + " x pp " + std::to_string(c.pp()) + ", " +
         std::to_string(c.microbatches()) + (c.microbatches() == 1 ? " microbatch, " : " microbatches, ") + c.schedule() +
         (c.virtual_stages() > 1 ? " interleaved over " + std::to_string(c.virtual_stages()) + " virtual stages" : "") +
         (c.recompute().empty() ? "" : ", recompute " + c.recompute()) + (c.zero() ? ", zero " + std::to_string(c.zero()) : "") +
         (c.sequence_parallel() ? ", sequence parallel" : "");
}

// What --strategy auto chose and the best strategies it rejected (empty when it did not choose).
std::string searchText(const planpb::Strategy& strategy) {
  if (strategy.search_cluster().empty()) return "";
  std::ostringstream text;
  const planpb::StrategyCandidate& chosen = strategy.chosen();
  text << "\nstrategy chosen by --strategy auto for " << strategy.search_cluster() << ": " << candidateName(chosen)
       << ", predicted " << durationText(chosen.predicted_step_time_s()) << " per step, "
       << bytesText(static_cast<double>(chosen.memory_bytes())) << " per device\n";
  if (strategy.alternatives().empty()) return text.str();
  char line[512];
  std::snprintf(line, sizeof line, "%-44s %-11s %-11s %s\n", "rejected alternatives", "predicted", "memory", "why");
  text << line;
  for (const planpb::StrategyCandidate& c : strategy.alternatives()) {
    std::snprintf(line, sizeof line, "%-44s %-11s %-11s %s\n", candidateName(c).c_str(),
                  durationText(c.predicted_step_time_s()).c_str(), bytesText(static_cast<double>(c.memory_bytes())).c_str(),
                  c.note().c_str());
    text << line;
  }
  return text.str();
}

nlohmann::ordered_json candidateJson(const planpb::StrategyCandidate& c) {
  return {{"dp", c.dp()},
          {"tp", c.tp()},
          {"pp", c.pp()},
          {"microbatches", c.microbatches()},
          {"schedule", c.schedule()},
          {"virtual_stages", std::max(1, c.virtual_stages())},
          {"recompute", c.recompute().empty() ? "none" : c.recompute()},
          {"zero", c.zero()},
          {"sequence_parallel", c.sequence_parallel()},
          {"predicted_step_time_s", c.predicted_step_time_s()},
          {"memory_bytes", c.memory_bytes()},
          {"note", c.note()}};
}

std::string tablesText(const std::vector<RankReport>& reports, const std::string& program,
                       const Expected<ProgramTimeline>& timeline) {
  std::ostringstream text;
  char line[512];
  text << "\nmemory at the peak of " << program
       << " (peak: the planned arena; params, grads, optimizer state and activations: bytes live at that moment)\n";
  std::snprintf(line, sizeof line, "%-5s %-5s %-3s %-3s %-12s %-11s %-11s %-11s %-11s %s\n", "rank", "stage", "dp",
                "tp", "instructions", "peak", "params", "grads", "optimizer", "activations");
  text << line;
  for (const RankReport& r : reports) {
    std::snprintf(line, sizeof line, "%-5d %-5d %-3d %-3d %-12lld %-11s %-11s %-11s %-11s %s\n", r.rank, r.stage,
                  r.dp_index, r.tp_index, static_cast<long long>(r.instructions),
                  bytesText(static_cast<double>(r.peak_memory_bytes)).c_str(),
                  bytesText(static_cast<double>(r.param_bytes)).c_str(),
                  bytesText(static_cast<double>(r.grad_bytes)).c_str(),
                  bytesText(static_cast<double>(r.optimizer_state_bytes)).c_str(),
                  bytesText(static_cast<double>(r.activation_bytes)).c_str());
    text << line;
  }
  text << "\nbytes each rank moves in one run of " << program
       << " (ring all-reduce 2(n-1)/n of the buffer; all-gather, reduce-scatter, all-to-all (n-1)/n; send, recv all)\n";
  std::snprintf(line, sizeof line, "%-5s %-11s %-11s %-14s %-11s %-11s %-11s %-11s %s\n", "rank", "all_reduce",
                "all_gather", "reduce_scatter", "all_to_all", "send", "recv", "total", "finishes at");
  text << line;
  for (const RankReport& r : reports) {
    auto kind = [&](CommKind k) { return bytesText(r.comm_bytes_by_kind[static_cast<int>(k)]); };
    std::optional<double> end = rankEnd(timeline, r.rank);
    std::snprintf(line, sizeof line, "%-5d %-11s %-11s %-14s %-11s %-11s %-11s %-11s %s\n", r.rank,
                  kind(CommKind::kAllReduce).c_str(), kind(CommKind::kAllGather).c_str(),
                  kind(CommKind::kReduceScatter).c_str(), kind(CommKind::kAllToAll).c_str(),
                  kind(CommKind::kSend).c_str(), kind(CommKind::kRecv).c_str(), bytesText(r.commBytes()).c_str(),
                  end ? durationText(*end).c_str() : "-");
    text << line;
  }
  return text.str();
}

// Layer by layer, how each rank holds the model's weights: "split dim 1 over tp" (or "over dp" under
// ZeRO 3, "over tp and dp") with the block's shape, or "whole"; ranks holding the same weights alike (the dp replicas) are listed once.
std::string weightsText(const std::vector<const planpb::RankPlan*>& ranks) {
  std::ostringstream text;
  std::vector<std::string> seen;
  for (const planpb::RankPlan* rank : ranks) {
    std::ostringstream body;
    int split = 0, whole = 0;
    for (const WeightLayout& w : weightLayouts(*rank)) {
      std::string how = "whole";
      if (!w.split_dims.empty()) {
        how = "split dim";
        for (size_t i = 0; i < w.split_dims.size(); ++i) how += (i ? "," : " ") + std::to_string(w.split_dims[i]);
        how += " over ";
        for (size_t i = 0; i < w.split_axes.size(); ++i) how += (i ? " and " : "") + w.split_axes[i];
        how += ", holds " + shapeStr(w.shape);
        ++split;
      } else {
        ++whole;
      }
      const std::string held = w.model_shape == w.full_shape ? "" : " held as " + shapeStr(w.full_shape);
      body << "  " << w.name << " " << shapeStr(w.model_shape) << held << ": " << how << "\n";
    }
    if (std::find(seen.begin(), seen.end(), body.str()) != seen.end()) continue;
    seen.push_back(body.str());
    text << "\nweights of rank " << rank->rank() << " (stage " << rank->stage() << "): " << split << " split, " << whole
         << " whole\n"
         << body.str();
  }
  return text.str();
}

nlohmann::ordered_json weightsJson(const planpb::RankPlan& rank) {
  nlohmann::ordered_json weights = nlohmann::ordered_json::array();
  for (const WeightLayout& w : weightLayouts(rank))
    weights.push_back({{"name", w.name}, {"shape", w.shape}, {"full_shape", w.full_shape}, {"split_dims", w.split_dims},
                       {"split_axes", w.split_axes}, {"model_shape", w.model_shape}});
  return weights;
}

// The fused nodes of `program` on the first of `ranks` (all ranks of a data-parallel plan fuse
// alike), with what each saves; nothing when the program has none.
Expected<std::string> fusionText(const std::vector<const planpb::RankPlan*>& ranks, const std::string& program) {
  if (ranks.empty()) return std::string();
  CLEAVE_ASSIGN_OR_RETURN(std::vector<FusedNodeReport> nodes, fusedNodes(*ranks[0], program));
  if (nodes.empty()) return std::string();
  double moved = 0, saved = 0;
  for (const FusedNodeReport& node : nodes) {
    moved += node.bytes;
    saved += node.bytes_saved;
  }
  std::string text = "\nfused nodes of " + program + " on rank " + std::to_string(ranks[0]->rank()) + ": " +
                     std::to_string(nodes.size()) + ", moving " + bytesText(moved) + " per run, " + bytesText(saved) +
                     " less than their steps as separate kernels\n";
  char line[96];
  std::snprintf(line, sizeof line, "%-6s %-12s %-12s %s\n", "instr", "moves", "saves", "body (source)");
  text += line;
  for (const FusedNodeReport& node : nodes) {
    std::snprintf(line, sizeof line, "%-6d %-12s %-12s ", node.instruction, bytesText(node.bytes).c_str(),
                  bytesText(node.bytes_saved).c_str());
    const std::string what =
        node.body.empty() ? node.op + ": the weight gradient op(a)·op(b) summed into its SGD update" : node.body;
    text += line + what + " (" + node.source + ")\n";
  }
  return text;
}

nlohmann::ordered_json fusedNodesJson(const std::vector<FusedNodeReport>& nodes) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const FusedNodeReport& node : nodes)
    list.push_back({{"instruction", node.instruction},
                    {"op", node.op},
                    {"body", node.body},
                    {"source", node.source},
                    {"bytes", std::llround(node.bytes)},
                    {"bytes_saved", std::llround(node.bytes_saved)}});
  return list;
}

nlohmann::ordered_json rankJson(const RankReport& r, const planpb::RankPlan& rank, const planpb::RankPlan& running,
                                const std::string& program, const Expected<ProgramTimeline>& timeline) {
  nlohmann::ordered_json by_kind;
  for (int k = 0; k < kNumCommKinds; ++k)
    by_kind[std::string(commKindName(static_cast<CommKind>(k)))] = std::llround(r.comm_bytes_by_kind[k]);
  nlohmann::ordered_json programs = nlohmann::ordered_json::array();
  for (const auto& program : running.programs())
    programs.push_back({{"name", program.name()},
                        {"instructions", program.instructions_size()},
                        {"peak_memory_bytes", program.peak_bytes()}});
  std::optional<double> end = rankEnd(timeline, r.rank);
  auto fused = fusedNodes(running, program);
  auto kernel_bytes = kernelBytes(running, program);
  return {{"rank", r.rank},
          {"stage", r.stage},
          {"dp_index", r.dp_index},
          {"tp_index", r.tp_index},
          {"same_program_as", rank.has_same_program_as() ? nlohmann::ordered_json(rank.same_program_as())
                                                         : nlohmann::ordered_json(nullptr)},
          {"instructions", r.instructions},
          {"peak_memory_bytes", r.peak_memory_bytes},
          {"param_bytes", r.param_bytes},
          {"grad_bytes", r.grad_bytes},
          {"optimizer_state_bytes", r.optimizer_state_bytes},
          {"activation_bytes", r.activation_bytes},
          {"comm_bytes", std::llround(r.commBytes())},
          {"comm_bytes_by_kind", by_kind},
          {"predicted_step_time_s", end ? nlohmann::ordered_json(*end) : nlohmann::ordered_json(nullptr)},
          {"programs", programs},
          {"weights", weightsJson(running)},
          {"kernel_bytes", kernel_bytes ? nlohmann::ordered_json(std::llround(*kernel_bytes)) : nlohmann::ordered_json(nullptr)},
          {"fused_nodes", fused ? fusedNodesJson(*fused) : nlohmann::ordered_json::array()}};
}

}  // namespace

int runInspectPlan(const InspectPlanFlags& flags) {
  // 1. Read the plan; --rank must name one of its ranks.
  auto read = readPlanFile(flags.path, SharedRanks::kKeep);  // reports read shared programs
  if (!read) return reportError(read.status());
  const planpb::Plan& plan = **read;
  if (flags.rank >= 0) {
    bool known = false;
    for (const auto& rank : plan.ranks()) known = known || rank.rank() == flags.rank;
    if (!known)
      return reportError(Status::badInput("--rank " + std::to_string(flags.rank) + ": " + flags.path +
                                          " has ranks 0.." + std::to_string(plan.ranks_size() - 1)));
  }

  // 2. Figures per rank, and the predicted run of the main program on the built-in cluster.
  const std::string program = mainProgramName(plan);
  auto cluster = loadCluster(flags.cluster);
  if (!cluster) return reportError(cluster.status());
  const CostModel model(*cluster);
  Expected<ProgramTimeline> timeline = simulateProgram(plan, program, model);
  std::vector<RankReport> reports;
  std::vector<const planpb::RankPlan*> listed, ranks;  // the ranks listed, and whose programs each runs
  std::map<int32_t, RankReport> report_of_running;  // each program is reported once
  for (const auto& rank : plan.ranks()) {
    if (flags.rank >= 0 && rank.rank() != flags.rank) continue;
    // A rank that runs another's programs reports them, under its own number and coordinates.
    const planpb::RankPlan& running = rankRunning(plan, rank);
    auto [known, fresh] = report_of_running.try_emplace(running.rank());
    if (fresh) known->second = reportRank(running, program);
    RankReport report = known->second;
    report.rank = rank.rank();
    report.dp_index = rank.dp_index();
    report.tp_index = rank.tp_index();
    reports.push_back(report);
    listed.push_back(&rank);
    ranks.push_back(&running);
  }

  // 3. The files asked for: the drawing always, the timeline when the simulation succeeded.
  if (!flags.dot.empty()) {
    DotOptions options;
    options.only_rank = flags.rank;
    options.detail = flags.dot_full ? DotOptions::Detail::kFull : DotOptions::Detail::kSummary;
    planpb::Plan drawn = plan;  // the drawing shows every rank's own program
    if (Status derived = expandSharedPrograms(drawn); !derived) return reportError(derived.withContext(flags.path + ": "));
    Status written = writeOutput(flags.dot, planDot(drawn, program, options));
    if (!written) return reportError(written);
  }
  if (!flags.timeline.empty() && timeline) {
    Status written = writeOutput(flags.timeline, chromeTraceJson(*timeline, flags.rank));
    if (!written) return reportError(written);
  }

  // 4. The tables or the JSON object.
  std::string output;
  if (flags.json) {
    nlohmann::ordered_json json;
    json["plan"] = flags.path;
    json["model"] = plan.model_name();
    json["devices"] = plan.devices();
    json["global_batch"] = plan.global_batch();
    json["distinct_programs"] = distinctPrograms(plan);
    json["strategy"] = {{"dp", plan.strategy().dp()},
                        {"tp", plan.strategy().tp()},
                        {"pp", plan.strategy().pp()},
                        {"microbatches", plan.strategy().microbatches()},
                        {"schedule", plan.strategy().schedule()}};
    if (!plan.strategy().search_cluster().empty()) {
      nlohmann::ordered_json alternatives = nlohmann::ordered_json::array();
      for (const auto& c : plan.strategy().alternatives()) alternatives.push_back(candidateJson(c));
      json["strategy"]["search"] = {{"cluster", plan.strategy().search_cluster()},
                                    {"chosen", candidateJson(plan.strategy().chosen())},
                                    {"alternatives", alternatives}};
    }
    if (plan.has_training())
      json["training"] = {{"loss", plan.training().loss()}, {"optimizer", plan.training().optimizer()}};
    json["program"] = program;
    json["cluster"] = cluster->name;
    json["predicted_step_time_s"] =
        timeline ? nlohmann::ordered_json(timeline->step_time_s) : nlohmann::ordered_json(nullptr);
    json["ranks"] = nlohmann::ordered_json::array();
    for (size_t k = 0; k < reports.size(); ++k) json["ranks"].push_back(rankJson(reports[k], *listed[k], *ranks[k], program, timeline));
    output = json.dump(2) + "\n";
  } else {
    output = headerText(plan, flags.path);
    output += "predicted step time of " + program + ": " +
              (timeline ? durationText(timeline->step_time_s) : std::string("- (see the error below)")) +
              " (cost model: " + cluster->name + ")\n";
    output += tablesText(reports, program, timeline);
    auto fusion = fusionText(ranks, program);
    if (!fusion) return reportError(fusion.status().withContext(flags.path + ": "));
    output += *fusion;
    output += searchText(plan.strategy());
    if (flags.weights) output += weightsText(ranks);
  }
  Status written = writeOutput("", output);
  if (!written) return reportError(written);

  // 5. A plan whose ranks cannot run together (unmatched communication, a deadlock) is an error.
  if (!timeline) return reportError(timeline.status().withContext(flags.path + ": "));
  return 0;
}

}  // namespace cleave::cli
