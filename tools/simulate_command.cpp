// `cleave simulate PLAN --cluster C`: a plan's predicted step time, throughput, MFU and memory per device on a cluster.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ir/plan.h"
#include "ir/plan.pb.h"
#include "analysis/cluster_json.h"
#include "analysis/plan_prediction.h"
#include "tools/cli_common.h"
#include "tools/cost_commands.h"
#include "tools/units_text.h"

namespace cleave::cli {
namespace {

// A rate with an SI prefix: "12.3 GFLOP/s".
std::string rateText(double value, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P", "E"};
  int p = 0;
  while (value >= 1000 && p < 6) {
    value /= 1000;
    ++p;
  }
  char text[48];
  std::snprintf(text, sizeof text, "%.1f %s%s", value, prefixes[p], unit);
  return text;
}

std::string clusterText(const ClusterSpec& cluster) {
  char text[512];
  std::snprintf(text, sizeof text,
                "cluster %s: %d host(s) x %d %s (f32 peak %s, memory %s, %s); %s %s, %.1f us within a host",
                cluster.name.c_str(), cluster.hosts, cluster.devices_per_host, cluster.device.name.c_str(),
                rateText(cluster.device.peakFlops(DType::kF32), "FLOP/s").c_str(),
                rateText(cluster.device.memory_bandwidth, "B/s").c_str(),
                bytesText(static_cast<double>(cluster.device.memory_bytes)).c_str(), cluster.intra_host.name.c_str(),
                rateText(cluster.intra_host.bandwidth, "B/s").c_str(), cluster.intra_host.latency * 1e6);
  std::string line = text;
  if (cluster.hosts > 1) {
    std::snprintf(text, sizeof text, "; %s %s, %.1f us between hosts", cluster.inter_host.name.c_str(),
                  rateText(cluster.inter_host.bandwidth, "B/s").c_str(), cluster.inter_host.latency * 1e6);
    line += text;
  }
  return line + "\n";
}

std::string predictionText(const planpb::Plan& plan, const std::string& path, const ClusterSpec& cluster,
                           const PlanPrediction& p) {
  std::ostringstream out;
  const auto& s = plan.strategy();
  out << path << ": model @" << plan.model_name() << ", " << plan.devices() << " device(s), dp " << s.dp() << " x tp "
      << s.tp() << " x pp " << s.pp() << ", " << s.microbatches() << " microbatch(es)"
      << (s.schedule().empty() ? "" : " (" + s.schedule() + ")") << ", batch " << plan.global_batch() << "\n";
  out << clusterText(cluster);
  out << "predicted step time of " << p.program << ": " << durationText(p.step_time_s) << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "throughput: %.1f samples/s (global batch %lld)\n", p.samples_per_s,
                static_cast<long long>(plan.global_batch()));
  out << line;
  std::snprintf(line, sizeof line, "model FLOPs: %s per step; MFU %.1f%% of %d x %s (%s)\n",
                rateText(p.model_flops, "FLOP").c_str(), 100 * p.mfu, plan.ranks_size(),
                rateText(p.peak_flops_per_device, "FLOP/s").c_str(), std::string(dtypeName(p.dtype)).c_str());
  out << line;
  out << "memory per device: largest " << bytesText(static_cast<double>(p.max_memory_bytes)) << " of "
      << bytesText(static_cast<double>(p.memory_limit_bytes)) << (p.fits_memory ? " (fits)" : " (DOES NOT FIT)") << "\n\n";
  std::snprintf(line, sizeof line, "%-5s %-5s %-12s %-11s %s\n", "rank", "stage", "peak memory", "busy", "finishes at");
  out << line;
  for (const RankPrediction& r : p.ranks) {
    std::snprintf(line, sizeof line, "%-5d %-5d %-12s %-11s %s\n", r.rank, r.stage,
                  bytesText(static_cast<double>(r.peak_memory_bytes)).c_str(), durationText(r.busy_s).c_str(),
                  durationText(r.end_s).c_str());
    out << line;
  }
  return out.str();
}

nlohmann::ordered_json predictionJson(const planpb::Plan& plan, const std::string& path, const ClusterSpec& cluster,
                                      const PlanPrediction& p) {
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const RankPrediction& r : p.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"stage", r.stage},
                     {"peak_memory_bytes", r.peak_memory_bytes},
                     {"busy_s", r.busy_s},
                     {"end_s", r.end_s}});
  const auto& s = plan.strategy();
  return {{"plan", path},
          {"model", plan.model_name()},
          {"cluster", cluster.name},
          {"devices", plan.devices()},
          {"strategy",
           {{"dp", s.dp()}, {"tp", s.tp()}, {"pp", s.pp()}, {"microbatches", s.microbatches()}, {"schedule", s.schedule()}}},
          {"program", p.program},
          {"global_batch", plan.global_batch()},
          {"step_time_s", p.step_time_s},
          {"samples_per_s", p.samples_per_s},
          {"model_flops", p.model_flops},
          {"dtype", std::string(dtypeName(p.dtype))},
          {"peak_flops_per_device", p.peak_flops_per_device},
          {"mfu", p.mfu},
          {"memory_limit_bytes", p.memory_limit_bytes},
          {"max_memory_bytes", p.max_memory_bytes},
          {"fits_memory", p.fits_memory},
          {"ranks", ranks}};
}

}  // namespace

int runSimulate(const SimulateFlags& flags) {
  auto cluster = loadCluster(flags.cluster);
  if (!cluster) return reportError(cluster.status());
  auto read = readPlanFile(flags.plan, SharedRanks::kKeep);  // the simulation reads shared programs
  if (!read) return reportError(read.status());
  const planpb::Plan& plan = **read;
  if (plan.ranks_size() > cluster->deviceCount())
    std::cerr << "cleave: note: " << flags.plan << " has " << plan.ranks_size() << " ranks and cluster " << cluster->name
              << " " << cluster->deviceCount() << " devices; the simulation places the others on further hosts\n";

  auto prediction = predictPlan(plan, CostModel(*cluster));
  if (!prediction) return reportError(prediction.status().withContext(flags.plan + ": "));
  if (!flags.timeline.empty()) {
    Status written = writeOutput(flags.timeline, chromeTraceJson(prediction->timeline));
    if (!written) return reportError(written);
  }
  std::string output = flags.json ? predictionJson(plan, flags.plan, *cluster, *prediction).dump(2) + "\n"
                                  : predictionText(plan, flags.plan, *cluster, *prediction);
  Status written = writeOutput("", output);
  return written.isOk() ? 0 : reportError(written);
}

}  // namespace cleave::cli
