// Schedule simulation of a plan: when each rank runs each instruction, as the cost model predicts it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/plan.pb.h"
#include "ir/status.h"
#include "analysis/cost_model.h"

namespace cleave {

// The program inspect and simulate predict: "train" when rank 0 has it, else "infer", else its first.
std::string mainProgramName(const planpb::Plan& plan);
// The program named `name` of `rank`, or nullptr.
const planpb::Program* findProgram(const planpb::RankPlan& rank, std::string_view name);

// A short name of an instruction for timelines and graphs: "matmul fc1.out", "all_reduce 25.0 MB",
// "send 1.2 MB to rank 3", "recv 1.2 MB from rank 0", "copy w.snapshot".
std::string instructionLabel(const planpb::RankPlan& rank, const planpb::Instruction& instruction);
// Bytes with a decimal unit and one decimal: "512 B", "12.3 KB", "25.0 MB", "1.5 GB".
std::string formatDecimalBytes(double bytes);

// For each instruction of `program`, the earlier instructions it reads from: for each operand, the
// last instruction before it (in program order) that wrote the operand's storage. Sorted, unique.
std::vector<std::vector<int32_t>> instructionDependencies(const planpb::RankPlan& rank, const planpb::Program& program);

// One instruction of one rank: the rank's index in Plan.ranks and the instruction's index in its program.
struct InstructionRef {
  int32_t rank_index = -1;
  int32_t instruction = -1;
};

// The communication of one program across all ranks, matched up. The k-th collective a rank
// issues over a group meets the k-th one every other member issues over the same group; the k-th
// send from rank a to rank b with a tag meets the k-th recv on b from a with that tag.
struct ProgramCommunication {
  std::vector<std::vector<InstructionRef>> collectives;  // each instance's members, in group order
  std::vector<std::vector<int32_t>> collective_of;       // [rank index][instruction] -> instance, or -1
  std::vector<std::vector<InstructionRef>> partner_of;   // [rank index][instruction] -> matching send/recv
  std::vector<std::string> unmatched;                    // one line per instruction left without its partners
};

// Matches the collectives and sends/receives of program `program` over every rank of `plan`.
ProgramCommunication matchCommunication(const planpb::Plan& plan, std::string_view program);

// One instruction as the simulation runs it.
struct TimelineEvent {
  int32_t instruction = 0;  // index in the program
  int32_t stream = 0;       // 0 compute, 1 communication
  std::string name;         // instructionLabel
  double start_s = 0;
  double duration_s = 0;
  int32_t microbatch = 0;
  bool backward = false;
};

// One rank's events, ordered by start time.
struct RankTimeline {
  int32_t rank = 0;
  int32_t stage = 0;
  std::vector<TimelineEvent> events;
  double end_s = 0;  // when the rank's last instruction ends
  // A rank that runs another rank's programs (RankPlan.same_program_as, kept shared): that rank's
  // number. Its events are that rank's and are not repeated here; its end_s is that rank's.
  int32_t same_program_as = -1;
};

// A simulated run of one program on every rank.
struct ProgramTimeline {
  std::string program;
  std::string cluster;
  std::vector<RankTimeline> ranks;  // in Plan.ranks order
  double step_time_s = 0;           // when the last rank finishes
};

// Simulates one run of `program` on every rank of `plan`:
//   - each rank runs each stream's instructions in program order, one at a time;
//   - each instruction takes the cost model's time, its cache misses (cacheMissBytes) included on a
//     device with a cache model;
//   - an instruction also waits for the instructions that write its operands (on any stream);
//   - a collective starts when every member has reached it and ends its alpha-beta time later on all;
//   - a send takes its transfer time; the matching recv ends when the send's data has arrived.
// Ranks that run another's programs and were kept shared (RankPlan.same_program_as) are not
// simulated: such a rank runs the same instructions at the same times as the rank it names (the
// ranks of a stage wait for the same collectives), so collectives count only the ranks that hold
// programs, and its timeline is that rank's.
// Errors (kBadInput) name unmatched communication and the instructions a deadlocked plan waits at.
Expected<ProgramTimeline> simulateProgram(const planpb::Plan& plan, std::string_view program, const CostModel& model);

// The timeline whose events `rank` has: the one of the rank it names when it was kept shared
// (RankTimeline.same_program_as), else its own.
const RankTimeline& runningTimeline(const ProgramTimeline& timeline, const RankTimeline& rank);

// The timeline as a Chrome trace (JSON: traceEvents of ph "X", pid = rank, tid = stream, times in
// microseconds), viewable in Perfetto or chrome://tracing. `only_rank` >= 0 keeps that rank only.
// A rank kept shared (RankTimeline.same_program_as) shows the events of the rank it names.
std::string chromeTraceJson(const ProgramTimeline& timeline, int only_rank = -1);

}  // namespace cleave
