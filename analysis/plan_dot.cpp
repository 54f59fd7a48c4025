// Graphviz drawing of a plan: clusters per rank, nodes per instruction (or per run of kernels), comm edges.
#include "analysis/plan_dot.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "analysis/cost_model.h"
#include "analysis/plan_timeline.h"

namespace cleave {
namespace {

// Pastel fills and strong outlines per pipeline stage (Tableau 10), cycling past ten stages.
constexpr const char* kStageFill[] = {"#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5",
                                      "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5", "#c7c7c7"};
constexpr const char* kStageLine[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#7f7f7f"};
constexpr int kNumStageColours = 10;

int colourIndex(int stage) { return ((stage % kNumStageColours) + kNumStageColours) % kNumStageColours; }

// `text` as a DOT string literal.
std::string quoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

bool isCompute(const planpb::Instruction& instruction) {
  return instruction.kind() == planpb::KERNEL || instruction.kind() == planpb::COPY;
}

// One drawn node: an instruction, or (collapsed) a run of consecutive compute instructions.
struct DotNode {
  std::string id;
  std::string label;
  bool communication = false;
};

// A rank's nodes and which node draws each instruction.
struct RankNodes {
  std::vector<DotNode> nodes;
  std::vector<int32_t> node_of_instruction;
};

// "12 instructions (3..14): matmul x5, add x4, relu x3".
std::string segmentLabel(const planpb::Program& program, int32_t first, int32_t last) {
  std::map<std::string, int> counts;
  for (int32_t i = first; i <= last; ++i) {
    const planpb::Instruction& instruction = program.instructions(i);
    ++counts[instruction.kind() == planpb::COPY ? "copy" : instruction.op()];
  }
  std::vector<std::pair<std::string, int>> sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string label = std::to_string(last - first + 1) + " instructions (" + std::to_string(first) + ".." +
                      std::to_string(last) + ")\n";
  for (size_t k = 0; k < sorted.size() && k < 3; ++k)
    label += (k ? ", " : "") + sorted[k].first + " x" + std::to_string(sorted[k].second);
  if (sorted.size() > 3) label += ", ...";
  return label;
}

RankNodes rankNodes(const planpb::RankPlan& rank, const planpb::Program& program, int rank_index, bool collapse) {
  RankNodes out;
  out.node_of_instruction.assign(program.instructions_size(), -1);
  const std::string prefix = "r" + std::to_string(rank_index) + "_";
  for (int32_t i = 0; i < program.instructions_size(); ++i) {
    const planpb::Instruction& instruction = program.instructions(i);
    if (collapse && isCompute(instruction)) {
      int32_t last = i;
      while (last + 1 < program.instructions_size() && isCompute(program.instructions(last + 1))) ++last;
      for (int32_t k = i; k <= last; ++k) out.node_of_instruction[k] = static_cast<int32_t>(out.nodes.size());
      out.nodes.push_back({prefix + std::to_string(i), segmentLabel(program, i, last), false});
      i = last;
      continue;
    }
    out.node_of_instruction[i] = static_cast<int32_t>(out.nodes.size());
    out.nodes.push_back({prefix + std::to_string(i), instructionLabel(rank, instruction), !isCompute(instruction)});
  }
  return out;
}

// The opening of a drawing: its title (what it shows, then `notes`, each on a line of its own) and
// the default node and edge styles; `graph_attributes` adds to the graph's.
std::string dotOpening(const planpb::Plan& plan, std::string_view program_name, const std::string& notes,
                       const std::string& graph_attributes) {
  std::string title = "model @" + plan.model_name() + ", program " + std::string(program_name) + ", " +
                      std::to_string(plan.ranks_size()) + " rank(s), dp " + std::to_string(plan.strategy().dp()) +
                      " x tp " + std::to_string(plan.strategy().tp()) + " x pp " +
                      std::to_string(plan.strategy().pp()) + notes;
  std::string out = "digraph plan {\n";
  out += "  graph [label=" + quoted(title) + ", labelloc=t, fontname=Helvetica, newrank=true" + graph_attributes +
         "];\n";
  out += "  node [shape=box, style=\"rounded,filled\", fontname=Helvetica, fontsize=10];\n";
  out += "  edge [color=\"#555555\", arrowsize=0.6];\n";
  return out;
}

// One phase of a stage's program in the summary: the consecutive instructions of one microbatch's
// forward or backward (pipeline plans mark them; gradient sums placed between them join them), what
// comes before the first and after the last; in a plan without microbatches, the forward, backward
// and optimizer step (split at the first gradient kernel and the first update).
struct Phase {
  std::string id;
  std::string title;  // "forward of microbatch 2"
  int32_t first = 0, last = 0;
};

// sgd_matmul_update computes a weight's gradient in the backward pass and updates the weight there.
bool isOptimizerUpdate(const planpb::Instruction& instruction) {
  return instruction.kind() == planpb::KERNEL && instruction.op().size() > 7 &&
         instruction.op().compare(instruction.op().size() - 7, 7, "_update") == 0 &&
         instruction.op() != "sgd_matmul_update";
}

bool isGradientKernel(const planpb::Instruction& instruction) {
  return instruction.kind() == planpb::KERNEL &&
         (instruction.backward() || instruction.op().find("_grad") != std::string::npos ||
          instruction.op() == "sgd_matmul_update");
}

std::vector<Phase> programPhases(const planpb::Program& program, int rank) {
  int32_t first_microbatch = -1, last_microbatch = -1;
  for (int32_t i = 0; i < program.instructions_size(); ++i)
    if (program.instructions(i).microbatch() >= 0) {
      if (first_microbatch < 0) first_microbatch = i;
      last_microbatch = i;
    }
  std::vector<Phase> phases;
  int unpipelined = 0;  // without microbatches: 0 forward, 1 backward, 2 optimizer step
  for (int32_t i = 0; i < program.instructions_size(); ++i) {
    const planpb::Instruction& instruction = program.instructions(i);
    std::string title;
    if (first_microbatch < 0) {
      if (unpipelined < 1 && isGradientKernel(instruction)) unpipelined = 1;
      if (isOptimizerUpdate(instruction)) unpipelined = 2;
      title = unpipelined == 0 ? "forward" : unpipelined == 1 ? "backward" : "optimizer step";
    } else if (i < first_microbatch) {
      title = "before the microbatches";
    } else if (i > last_microbatch) {
      title = "after the microbatches (gradients, optimizer)";
    } else if (instruction.microbatch() < 0 && !phases.empty()) {
      title = phases.back().title;
    } else {
      title = std::string(instruction.backward() ? "backward" : "forward") + " of microbatch " +
              std::to_string(instruction.microbatch());
    }
    if (!phases.empty() && phases.back().title == title) {
      phases.back().last = i;
      continue;
    }
    phases.push_back({"s" + std::to_string(rank) + "_" + std::to_string(i), title, i, i});
  }
  return phases;
}

// A phase's label: its title and what it runs, e.g. "forward of microbatch 0\n42 kernels, 4
// all_reduce (0.26 MB), 2 send to rank 2 (16.4 KB)".
std::string phaseLabel(const planpb::RankPlan& rank, const planpb::Program& program, const Phase& phase) {
  int kernels = 0;
  std::map<std::string, std::pair<int, int64_t>> transfers;  // "all_reduce", "send to rank 2" -> (count, bytes)
  for (int32_t i = phase.first; i <= phase.last; ++i) {
    const planpb::Instruction& instruction = program.instructions(i);
    if (isCompute(instruction)) {
      ++kernels;
      continue;
    }
    std::string what;
    if (instruction.kind() == planpb::SEND) what = "send to rank " + std::to_string(instruction.peer());
    else if (instruction.kind() == planpb::RECV) what = "recv from rank " + std::to_string(instruction.peer());
    else if (std::optional<CommKind> kind = commKindOf(instruction.kind())) what = std::string(commKindName(*kind));
    else what = "barrier";
    auto& entry = transfers[what];
    ++entry.first;
    entry.second += commFullBytes(rank, instruction);
  }
  std::string label = phase.title + "\n" + std::to_string(kernels) + (kernels == 1 ? " kernel" : " kernels");
  for (const auto& [what, entry] : transfers)
    label += ", " + std::to_string(entry.first) + " " + what + " (" +
             formatDecimalBytes(static_cast<double>(entry.second)) + ")";
  return label;
}

// The summary drawing (DotOptions::Detail::kSummary).
std::string planSummaryDot(const planpb::Plan& plan, std::string_view program_name, const DotOptions& options) {
  // 1. Each stage's ranks; the first one (or the one asked for) is drawn.
  std::map<int, std::vector<int>> stage_ranks;  // stage -> rank indices
  for (int r = 0; r < plan.ranks_size(); ++r)
    if (findProgram(plan.ranks(r), program_name)) stage_ranks[plan.ranks(r).stage()].push_back(r);
  std::map<int, int> drawn;  // rank index -> stage
  for (const auto& [stage, ranks] : stage_ranks) {
    int chosen = ranks.front();
    for (int r : ranks)
      if (plan.ranks(r).rank() == options.only_rank) chosen = r;
    if (options.only_rank < 0 || plan.ranks(chosen).rank() == options.only_rank) drawn[chosen] = stage;
  }

  std::string out = dotOpening(plan, program_name,
                               "\nsummary: one rank per stage, its phases in program order (--dot-detail full "
                               "draws every instruction)",
                               ", rankdir=TB");

  // 2. A cluster per stage: its phases, chained in program order.
  std::map<std::pair<int, int32_t>, std::string> node_of;  // (rank index, instruction) -> phase node
  for (const auto& [r, stage] : drawn) {
    const planpb::RankPlan& rank = plan.ranks(r);
    const planpb::Program& program = *findProgram(rank, program_name);
    const int colour = colourIndex(stage);
    std::string members;
    for (int m : stage_ranks[stage]) members += (members.empty() ? "" : ",") + std::to_string(plan.ranks(m).rank());
    out += "  subgraph cluster_stage" + std::to_string(stage) + " {\n";
    out += "    label=" +
           quoted("stage " + std::to_string(stage) + ": ranks {" + members + "}, drawn: rank " +
                  std::to_string(rank.rank()) + " (" + std::to_string(program.instructions_size()) +
                  " instructions)") +
           "; style=\"rounded\"; color=\"" + kStageLine[colour] + "\"; penwidth=2;\n";
    std::vector<Phase> phases = programPhases(program, rank.rank());
    for (const Phase& phase : phases) {
      for (int32_t i = phase.first; i <= phase.last; ++i) node_of[{r, i}] = phase.id;
      out += "    " + phase.id + " [label=" + quoted(phaseLabel(rank, program, phase)) + ", fillcolor=\"" +
             kStageFill[colour] + "\"];\n";
    }
    for (size_t k = 1; k < phases.size(); ++k) out += "    " + phases[k - 1].id + " -> " + phases[k].id + ";\n";
    out += "  }\n";
  }

  // 3. From the phase that sends to the phase that receives, between the drawn ranks (once per pair).
  ProgramCommunication comm = matchCommunication(plan, program_name);
  std::set<std::pair<std::string, std::string>> transfers;
  for (const auto& [r, stage] : drawn) {
    const planpb::Program& program = *findProgram(plan.ranks(r), program_name);
    for (int32_t i = 0; i < program.instructions_size(); ++i) {
      if (program.instructions(i).kind() != planpb::SEND) continue;
      InstructionRef partner = comm.partner_of[r][i];
      auto to = node_of.find({partner.rank_index, partner.instruction});
      if (to != node_of.end()) transfers.insert({node_of[{r, i}], to->second});
    }
  }
  for (const auto& [from, to] : transfers)
    out += "  " + from + " -> " + to + " [style=dashed, color=\"#1f77b4\", penwidth=1.5, constraint=false];\n";
  out += "}\n";
  return out;
}

}  // namespace

std::string planDot(const planpb::Plan& plan, std::string_view program_name, const DotOptions& options) {
  if (options.detail == DotOptions::Detail::kSummary) return planSummaryDot(plan, program_name, options);
  // 1. The ranks to draw and their programs; collapse runs of kernels when there are too many nodes.
  std::vector<int> candidates;
  int64_t instructions = 0;
  for (int r = 0; r < plan.ranks_size(); ++r) {
    if (options.only_rank >= 0 && plan.ranks(r).rank() != options.only_rank) continue;
    const planpb::Program* program = findProgram(plan.ranks(r), program_name);
    if (!program) continue;
    candidates.push_back(r);
    instructions += program->instructions_size();
  }
  const bool collapse = instructions > options.max_nodes;

  // 2. Nodes per rank, keeping ranks while they fit under the node limit (the first always).
  std::map<int, RankNodes> drawn;  // by rank index
  int64_t node_count = 0;
  std::vector<int32_t> left_out;
  for (int r : candidates) {
    RankNodes nodes = rankNodes(plan.ranks(r), *findProgram(plan.ranks(r), program_name), r, collapse);
    if (!drawn.empty() && node_count + static_cast<int64_t>(nodes.nodes.size()) > options.max_nodes) {
      left_out.push_back(plan.ranks(r).rank());
      continue;
    }
    node_count += static_cast<int64_t>(nodes.nodes.size());
    drawn.emplace(r, std::move(nodes));
  }

  // 3. The title says what is drawn and what was simplified.
  std::string notes;
  if (collapse)
    notes += "\n" + std::to_string(instructions) + " instructions are over the " + std::to_string(options.max_nodes) +
             "-node limit: each run of consecutive compute instructions is one node";
  if (!left_out.empty())
    notes += "\n" + std::to_string(left_out.size()) + " rank(s) left out to stay under the limit (ranks " +
             std::to_string(left_out.front()) + ".." + std::to_string(left_out.back()) + "); use --rank R";
  std::string out = dotOpening(plan, program_name, notes, "");

  // 4. One cluster per rank, its nodes filled with the stage's colour.
  for (const auto& [r, nodes] : drawn) {
    const planpb::RankPlan& rank = plan.ranks(r);
    const int colour = colourIndex(rank.stage());
    out += "  subgraph cluster_rank" + std::to_string(rank.rank()) + " {\n";
    out += "    label=" +
           quoted("rank " + std::to_string(rank.rank()) + " | stage " + std::to_string(rank.stage()) + " | dp " +
                  std::to_string(rank.dp_index()) + " | tp " + std::to_string(rank.tp_index())) +
           "; style=\"rounded\"; color=\"" + kStageLine[colour] + "\"; penwidth=2;\n";
    for (const DotNode& node : nodes.nodes) {
      out += "    " + node.id + " [label=" + quoted(node.label) + ", fillcolor=\"" + kStageFill[colour] + "\"";
      if (node.communication) out += ", shape=ellipse, penwidth=2, color=\"" + std::string(kStageLine[colour]) + "\"";
      out += "];\n";
    }
    out += "  }\n";
  }

  // 5. Data dependencies within each rank (once per pair of nodes).
  for (const auto& [r, nodes] : drawn) {
    const planpb::RankPlan& rank = plan.ranks(r);
    const planpb::Program& program = *findProgram(rank, program_name);
    std::set<std::pair<int32_t, int32_t>> edges;
    std::vector<std::vector<int32_t>> dependencies = instructionDependencies(rank, program);
    for (int32_t i = 0; i < program.instructions_size(); ++i)
      for (int32_t dependency : dependencies[i]) {
        int32_t from = nodes.node_of_instruction[dependency], to = nodes.node_of_instruction[i];
        if (from != to) edges.insert({from, to});
      }
    for (const auto& [from, to] : edges) out += "  " + nodes.nodes[from].id + " -> " + nodes.nodes[to].id + ";\n";
  }

  // 6. Communication between ranks: send -> recv, and the members of each collective joined in group order.
  ProgramCommunication comm = matchCommunication(plan, program_name);
  auto nodeId = [&](InstructionRef ref) -> const std::string* {
    auto found = drawn.find(ref.rank_index);
    if (ref.rank_index < 0 || found == drawn.end()) return nullptr;
    return &found->second.nodes[found->second.node_of_instruction[ref.instruction]].id;
  };
  for (const auto& [r, nodes] : drawn) {
    const planpb::Program& program = *findProgram(plan.ranks(r), program_name);
    for (int32_t i = 0; i < program.instructions_size(); ++i) {
      if (program.instructions(i).kind() != planpb::SEND) continue;
      const std::string* from = nodeId({r, i});
      const std::string* to = nodeId(comm.partner_of[r][i]);
      if (from && to) out += "  " + *from + " -> " + *to + " [style=dashed, color=\"#1f77b4\", penwidth=1.5];\n";
    }
  }
  for (const auto& members : comm.collectives) {
    const std::string* previous = nullptr;
    for (InstructionRef member : members) {
      const std::string* id = nodeId(member);
      if (!id) continue;
      if (previous)
        out += "  " + *previous + " -> " + *id +
               " [style=dotted, dir=none, color=\"#d62728\", penwidth=1.5, constraint=false];\n";
      previous = id;
    }
  }
  out += "}\n";
  return out;
}

}  // namespace cleave
