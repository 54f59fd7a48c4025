// CommKind: what a communication moves (all-reduce, all-gather, ...), as ops, plans and the cost model name it.
#pragma once

#include <string_view>

namespace cleave {

// What a communication op or instruction does.
enum class CommKind { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kSend, kRecv };
constexpr int kNumCommKinds = 6;

// "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "recv".
constexpr std::string_view commKindName(CommKind kind) {
  switch (kind) {
    case CommKind::kAllReduce: return "all_reduce";
    case CommKind::kAllGather: return "all_gather";
    case CommKind::kReduceScatter: return "reduce_scatter";
    case CommKind::kAllToAll: return "all_to_all";
    case CommKind::kSend: return "send";
    case CommKind::kRecv: return "recv";
  }
  return "unknown";
}

}  // namespace cleave
