// Schedule simulation of a plan: matching communication across ranks, stream-ordered event times, Chrome traces.
#include "analysis/plan_timeline.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

#include "analysis/cache_reuse.h"
#include "ir/parallel_tasks.h"
#include "ir/plan_storage.h"
#include "ir/shared_programs.h"

namespace cleave {
namespace {

bool validBuffer(const planpb::RankPlan& rank, int32_t id) { return id >= 0 && id < rank.buffers_size(); }

bool isCollective(planpb::InstructionKind kind) {
  return kind == planpb::ALL_REDUCE || kind == planpb::ALL_GATHER || kind == planpb::REDUCE_SCATTER ||
         kind == planpb::ALL_TO_ALL || kind == planpb::BARRIER;
}

std::string groupText(const std::vector<int32_t>& group) {
  std::string text = "[";
  for (size_t i = 0; i < group.size(); ++i) text += (i ? "," : "") + std::to_string(group[i]);
  return text + "]";
}

// The members a collective instruction names: its group, or every rank of the plan for a barrier without one.
std::vector<int32_t> collectiveGroup(const planpb::Plan& plan, const planpb::Instruction& instruction) {
  std::vector<int32_t> group(instruction.group().begin(), instruction.group().end());
  if (group.empty() && instruction.kind() == planpb::BARRIER)
    for (const auto& rank : plan.ranks()) group.push_back(rank.rank());
  return group;
}

// Appends `text` to `out` as a JSON string literal.
void appendJsonString(std::string& out, std::string_view text) {
  out += '"';
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += escaped;
    } else {
      out += c;
    }
  }
  out += '"';
}

std::string microseconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", seconds * 1e6);
  return text;
}

}  // namespace

std::string mainProgramName(const planpb::Plan& plan) {
  if (plan.ranks_size() == 0) return "";
  const planpb::RankPlan& rank = plan.ranks(0);
  for (std::string_view preferred : {"train", "infer"})
    if (findProgram(rank, preferred)) return std::string(preferred);
  return rank.programs_size() > 0 ? rank.programs(0).name() : "";
}

const planpb::Program* findProgram(const planpb::RankPlan& rank, std::string_view name) {
  for (const auto& program : rank.programs())
    if (program.name() == name) return &program;
  return nullptr;
}

std::string formatDecimalBytes(double bytes) {
  char text[32];
  if (bytes < 1e3)
    std::snprintf(text, sizeof text, "%.0f B", bytes);
  else if (bytes < 1e6)
    std::snprintf(text, sizeof text, "%.1f KB", bytes / 1e3);
  else if (bytes < 1e9)
    std::snprintf(text, sizeof text, "%.1f MB", bytes / 1e6);
  else
    std::snprintf(text, sizeof text, "%.1f GB", bytes / 1e9);
  return text;
}

std::string instructionLabel(const planpb::RankPlan& rank, const planpb::Instruction& instruction) {
  auto bufferName = [&](const google::protobuf::RepeatedField<int32_t>& ids) -> std::string {
    return !ids.empty() && validBuffer(rank, ids[0]) ? rank.buffers(ids[0]).name() : "";
  };
  const std::string bytes = formatDecimalBytes(static_cast<double>(commFullBytes(rank, instruction)));
  switch (instruction.kind()) {
    case planpb::KERNEL: {
      std::string name = bufferName(instruction.results());
      if (name.empty()) name = bufferName(instruction.operands());
      return name.empty() ? instruction.op() : instruction.op() + " " + name;
    }
    case planpb::COPY: return "copy " + bufferName(instruction.results());
    case planpb::SEND: return "send " + bytes + " to rank " + std::to_string(instruction.peer());
    case planpb::RECV: return "recv " + bytes + " from rank " + std::to_string(instruction.peer());
    case planpb::BARRIER: return "barrier";
    default: {
      std::optional<CommKind> kind = commKindOf(instruction.kind());
      return kind ? std::string(commKindName(*kind)) + " " + bytes : planpb::InstructionKind_Name(instruction.kind());
    }
  }
}

std::vector<std::vector<int32_t>> instructionDependencies(const planpb::RankPlan& rank,
                                                          const planpb::Program& program) {
  std::vector<int32_t> last_writer(rank.buffers_size(), -1);  // by storage root
  std::vector<std::vector<int32_t>> dependencies(program.instructions_size());
  for (int32_t i = 0; i < program.instructions_size(); ++i) {
    const planpb::Instruction& instruction = program.instructions(i);
    for (int32_t id : instruction.operands()) {
      if (!validBuffer(rank, id)) continue;
      int32_t writer = last_writer[storageRoot(rank, id)];
      if (writer >= 0) dependencies[i].push_back(writer);
    }
    std::sort(dependencies[i].begin(), dependencies[i].end());
    dependencies[i].erase(std::unique(dependencies[i].begin(), dependencies[i].end()), dependencies[i].end());
    for (int32_t id : instruction.results())
      if (validBuffer(rank, id)) last_writer[storageRoot(rank, id)] = i;
  }
  return dependencies;
}

ProgramCommunication matchCommunication(const planpb::Plan& plan, std::string_view program_name) {
  ProgramCommunication comm;
  const int num_ranks = plan.ranks_size();
  std::map<int32_t, int32_t> index_of_rank;
  for (int r = 0; r < num_ranks; ++r) index_of_rank[plan.ranks(r).rank()] = r;
  comm.collective_of.resize(num_ranks);
  comm.partner_of.resize(num_ranks);

  auto describe = [&](InstructionRef ref) {
    const planpb::RankPlan& rank = plan.ranks(ref.rank_index);
    const planpb::Program* program = findProgram(rank, program_name);
    return "rank " + std::to_string(rank.rank()) + ": instruction " + std::to_string(ref.instruction) + " (" +
           instructionLabel(rank, program->instructions(ref.instruction)) + ")";
  };

  // 1. Walk every rank's program, numbering collectives per group and queueing sends and recvs.
  std::map<std::pair<std::vector<int32_t>, int>, int32_t> instance_of;                        // (group, k) -> instance
  std::map<std::tuple<int32_t, int32_t, int32_t>, std::vector<InstructionRef>> sends, recvs;  // (from, to, tag)
  for (int r = 0; r < num_ranks; ++r) {
    const planpb::RankPlan& rank = plan.ranks(r);
    const planpb::Program* program = findProgram(rank, program_name);
    if (!program) continue;
    comm.collective_of[r].assign(program->instructions_size(), -1);
    comm.partner_of[r].assign(program->instructions_size(), InstructionRef{});
    std::map<std::vector<int32_t>, int> issued;  // collectives this rank issued so far, per group
    for (int32_t i = 0; i < program->instructions_size(); ++i) {
      const planpb::Instruction& instruction = program->instructions(i);
      if (instruction.kind() == planpb::SEND) {
        sends[{rank.rank(), instruction.peer(), instruction.tag()}].push_back({r, i});
      } else if (instruction.kind() == planpb::RECV) {
        recvs[{instruction.peer(), rank.rank(), instruction.tag()}].push_back({r, i});
      } else if (isCollective(instruction.kind())) {
        std::vector<int32_t> group = collectiveGroup(plan, instruction);
        auto position = std::find(group.begin(), group.end(), rank.rank());
        if (position == group.end()) {
          comm.unmatched.push_back(describe({r, i}) + ": its group " + groupText(group) + " lacks rank " +
                                   std::to_string(rank.rank()));
          continue;
        }
        // Shared replicas mirror the rank whose programs they run: only ranks with programs meet.
        std::erase_if(group, [&](int32_t member) {
          auto index = index_of_rank.find(member);
          return index != index_of_rank.end() && isSharedRank(plan.ranks(index->second));
        });
        position = std::find(group.begin(), group.end(), rank.rank());
        auto [found, added] = instance_of.try_emplace({group, issued[group]++}, int32_t(comm.collectives.size()));
        if (added) comm.collectives.emplace_back(group.size());
        comm.collectives[found->second][position - group.begin()] = {r, i};
        comm.collective_of[r][i] = found->second;
      }
    }
  }

  // 2. Every collective instance needs every member of its group.
  for (const auto& [key, instance] : instance_of) {
    const auto& [group, k] = key;
    const auto& members = comm.collectives[instance];
    auto present = std::find_if(members.begin(), members.end(), [](InstructionRef m) { return m.rank_index >= 0; });
    for (size_t p = 0; p < members.size(); ++p) {
      if (members[p].rank_index >= 0) continue;
      bool known = index_of_rank.count(group[p]) > 0;
      comm.unmatched.push_back(describe(*present) + ": collective #" + std::to_string(k) + " over ranks " +
                               groupText(group) + (known ? " has no counterpart on rank " : " names rank ") +
                               std::to_string(group[p]) + (known ? "" : ", which the plan lacks"));
    }
  }

  // 3. The k-th send from a to b with a tag meets the k-th recv on b from a with that tag.
  for (const auto& [key, queued] : sends) {
    auto found = recvs.find(key);
    size_t matched = found == recvs.end() ? 0 : std::min(queued.size(), found->second.size());
    for (size_t k = 0; k < matched; ++k) {
      InstructionRef send = queued[k], recv = found->second[k];
      comm.partner_of[send.rank_index][send.instruction] = recv;
      comm.partner_of[recv.rank_index][recv.instruction] = send;
    }
    for (size_t k = matched; k < queued.size(); ++k)
      comm.unmatched.push_back(describe(queued[k]) + ": no matching recv on rank " + std::to_string(std::get<1>(key)) +
                               " with tag " + std::to_string(std::get<2>(key)));
  }
  for (const auto& [key, queued] : recvs) {
    auto found = sends.find(key);
    size_t matched = found == sends.end() ? 0 : std::min(queued.size(), found->second.size());
    for (size_t k = matched; k < queued.size(); ++k)
      comm.unmatched.push_back(describe(queued[k]) + ": no matching send on rank " + std::to_string(std::get<0>(key)) +
                               " with tag " + std::to_string(std::get<2>(key)));
  }
  return comm;
}

Expected<ProgramTimeline> simulateProgram(const planpb::Plan& plan, std::string_view program_name,
                                          const CostModel& model) {
  const std::string where = "program '" + std::string(program_name) + "': ";
  ProgramCommunication comm = matchCommunication(plan, program_name);
  if (!comm.unmatched.empty()) {
    std::string more = comm.unmatched.size() > 1 ? " (and " + std::to_string(comm.unmatched.size() - 1) + " more)" : "";
    return Status::badInput(where + comm.unmatched.front() + more);
  }

  // 1. Per rank: its program, each instruction's duration and dependencies, and its streams' queues.
  struct RankState {
    const planpb::Program* program = nullptr;
    std::vector<double> duration, start, end;  // end < 0: not yet scheduled
    std::vector<std::vector<int32_t>> dependencies;
    std::vector<bool> arrived;  // collectives: this rank has reached it
    std::map<int32_t, std::vector<int32_t>> queue_of_stream;
    std::map<int32_t, size_t> cursor_of_stream;
    std::map<int32_t, double> free_at_stream;
  };
  const int num_ranks = plan.ranks_size();
  std::vector<RankState> states(num_ranks);
  CLEAVE_TRY(runParallelTasks(num_ranks, [&](size_t r) -> Status {
    const planpb::RankPlan& rank = plan.ranks(r);
    RankState& state = states[r];
    state.program = findProgram(rank, program_name);
    if (!state.program) return Status::ok();
    const int n = state.program->instructions_size();
    state.start.assign(n, -1.0);
    state.end.assign(n, -1.0);
    state.arrived.assign(n, false);
    state.dependencies = instructionDependencies(rank, *state.program);
    const std::vector<double> missed = cacheMissBytes(rank, *state.program, model.cluster().device.cache_bytes);
    for (int32_t i = 0; i < n; ++i) {
      const planpb::Instruction& instruction = state.program->instructions(i);
      auto time = model.instructionTime(rank, instruction, missed[i]);
      if (!time) return time.status().withContext(where);
      state.duration.push_back(*time);
      state.queue_of_stream[instruction.stream()].push_back(i);
    }
    return Status::ok();
  }));
  int64_t pending = 0;
  for (const RankState& state : states) pending += static_cast<int64_t>(state.duration.size());
  std::vector<int> arrivals(comm.collectives.size(), 0);
  std::vector<double> last_arrival(comm.collectives.size(), 0.0);

  auto schedule = [&](int r, int32_t i, double start, double end) {
    RankState& state = states[r];
    state.start[i] = start;
    state.end[i] = end;
    state.free_at_stream[state.program->instructions(i).stream()] = end;
    --pending;
  };

  // 2. Advance every stream of every rank as far as its dependencies allow, until all is scheduled.
  while (pending > 0) {
    bool progressed = false;
    for (int r = 0; r < num_ranks; ++r) {
      RankState& state = states[r];
      for (auto& [stream, queue] : state.queue_of_stream) {
        size_t& cursor = state.cursor_of_stream[stream];
        while (cursor < queue.size()) {
          const int32_t i = queue[cursor];
          if (state.end[i] >= 0) {  // a collective another member's arrival completed
            ++cursor;
            continue;
          }
          double ready = state.free_at_stream[stream];
          bool blocked = false;
          for (int32_t dependency : state.dependencies[i]) {
            if (state.end[dependency] < 0) blocked = true;
            ready = std::max(ready, state.end[dependency]);
          }
          if (blocked) break;
          const planpb::Instruction& instruction = state.program->instructions(i);
          if (int32_t instance = comm.collective_of[r][i]; instance >= 0) {
            // A collective: record the arrival; the last member to arrive starts it on all.
            if (!state.arrived[i]) {
              state.arrived[i] = true;
              progressed = true;
              last_arrival[instance] = std::max(last_arrival[instance], ready);
              const auto& members = comm.collectives[instance];
              if (++arrivals[instance] == static_cast<int>(members.size())) {
                double duration = 0;
                for (InstructionRef m : members)
                  duration = std::max(duration, states[m.rank_index].duration[m.instruction]);
                for (InstructionRef m : members)
                  schedule(m.rank_index, m.instruction, last_arrival[instance], last_arrival[instance] + duration);
              }
            }
            if (state.end[i] < 0) break;
            ++cursor;
            continue;
          }
          double end = ready + state.duration[i];
          if (instruction.kind() == planpb::RECV) {
            // A recv ends when the matching send's data has arrived (or at once, if it already has).
            InstructionRef send = comm.partner_of[r][i];
            const RankState& sender = states[send.rank_index];
            if (sender.start[send.instruction] < 0) break;
            end = std::max(ready, sender.start[send.instruction] + sender.duration[send.instruction]);
          }
          schedule(r, i, ready, end);
          progressed = true;
          ++cursor;
        }
      }
    }
    if (progressed) continue;
    // 3. Nothing could move: name the instruction each stuck rank waits at.
    std::string stuck;
    int listed = 0;
    for (int r = 0; r < num_ranks && listed < 3; ++r) {
      const RankState& state = states[r];
      int32_t first = -1;
      for (const auto& [stream, queue] : state.queue_of_stream) {
        size_t cursor = state.cursor_of_stream.at(stream);
        if (cursor < queue.size() && (first < 0 || queue[cursor] < first)) first = queue[cursor];
      }
      if (first < 0) continue;
      const planpb::RankPlan& rank = plan.ranks(r);
      stuck += std::string(listed++ ? "; " : "") + "rank " + std::to_string(rank.rank()) + " waits at instruction " +
               std::to_string(first) + " (" + instructionLabel(rank, state.program->instructions(first)) + ")";
    }
    return Status::badInput(where + "the ranks deadlock: " + stuck);
  }

  // 4. Collect the events, each rank's in time order.
  ProgramTimeline timeline;
  timeline.program = std::string(program_name);
  timeline.cluster = model.cluster().name;
  for (int r = 0; r < num_ranks; ++r) {
    const planpb::RankPlan& rank = plan.ranks(r);
    const RankState& state = states[r];
    RankTimeline ranked;
    ranked.rank = rank.rank();
    ranked.stage = rank.stage();
    for (int32_t i = 0; state.program && i < state.program->instructions_size(); ++i) {
      const planpb::Instruction& instruction = state.program->instructions(i);
      ranked.events.push_back(TimelineEvent{i, instruction.stream(), instructionLabel(rank, instruction),
                                            state.start[i], state.end[i] - state.start[i], instruction.microbatch(),
                                            instruction.backward()});
      ranked.end_s = std::max(ranked.end_s, state.end[i]);
    }
    std::stable_sort(ranked.events.begin(), ranked.events.end(),
                     [](const TimelineEvent& a, const TimelineEvent& b) { return a.start_s < b.start_s; });
    timeline.step_time_s = std::max(timeline.step_time_s, ranked.end_s);
    if (isSharedRank(rank)) ranked.same_program_as = rank.same_program_as();
    timeline.ranks.push_back(std::move(ranked));
  }
  for (RankTimeline& ranked : timeline.ranks) ranked.end_s = runningTimeline(timeline, ranked).end_s;
  return timeline;
}

const RankTimeline& runningTimeline(const ProgramTimeline& timeline, const RankTimeline& rank) {
  if (rank.same_program_as < 0) return rank;
  for (const RankTimeline& named : timeline.ranks)
    if (named.rank == rank.same_program_as) return named;
  return rank;
}

std::string chromeTraceJson(const ProgramTimeline& timeline, int only_rank) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"program\": ";
  appendJsonString(out, timeline.program);
  out += ", \"cluster\": ";
  appendJsonString(out, timeline.cluster);
  char step_time[32];
  std::snprintf(step_time, sizeof step_time, "%.17g", timeline.step_time_s);
  out += ", \"step_time_s\": " + std::string(step_time) + "},\n\"traceEvents\": [";
  bool first = true;
  auto begin = [&]() {
    out += first ? "\n" : ",\n";
    first = false;
  };
  for (const RankTimeline& listed : timeline.ranks) {
    if (only_rank >= 0 && listed.rank != only_rank) continue;
    const RankTimeline& rank = runningTimeline(timeline, listed);  // a shared rank shows its events
    const std::string pid = std::to_string(listed.rank);
    // Metadata: the process is the rank, its threads the streams.
    begin();
    out += "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " + pid + ", \"args\": {\"name\": ";
    appendJsonString(out, "rank " + pid + " (stage " + std::to_string(listed.stage) + ")");
    out += "}}";
    begin();
    out += "{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": " + pid + ", \"args\": {\"sort_index\": " + pid +
           "}}";
    std::vector<int32_t> streams;
    for (const TimelineEvent& event : rank.events)
      if (std::find(streams.begin(), streams.end(), event.stream) == streams.end()) streams.push_back(event.stream);
    for (int32_t stream : streams) {
      begin();
      out += "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " + pid + ", \"tid\": " + std::to_string(stream) +
             ", \"args\": {\"name\": ";
      appendJsonString(out, stream == 0   ? "compute"
                            : stream == 1 ? "communication"
                                          : "stream " + std::to_string(stream));
      out += "}}";
    }
    for (const TimelineEvent& event : rank.events) {
      begin();
      out += "{\"ph\": \"X\", \"name\": ";
      appendJsonString(out, event.name);
      out += std::string(", \"cat\": \"") + (event.stream == 0 ? "compute" : "communication") + "\", \"pid\": " + pid +
             ", \"tid\": " + std::to_string(event.stream) + ", \"ts\": " + microseconds(event.start_s) +
             ", \"dur\": " + microseconds(event.duration_s) +
             ", \"args\": {\"instruction\": " + std::to_string(event.instruction) +
             ", \"microbatch\": " + std::to_string(event.microbatch) +
             ", \"backward\": " + (event.backward ? "true" : "false") + "}}";
    }
  }
  out += "\n]}\n";
  return out;
}

}  // namespace cleave
