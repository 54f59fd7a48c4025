// Interleaved 1F1B's plans: the ranks of a plan compiled for pp x V pipeline stages merged into pp
// ranks that each hold V of them (virtual stages), their training steps in interleaved order.
#pragma once

#include "ir/plan.pb.h"
#include "ir/status.h"

namespace cleave {

// Merges `virtual_plan`, a plan whose pipeline has num_stages x num_chunks stages (rank = (stage x
// dp + d) x tp + t) and whose "train" steps of virtual stage c are in virtualStageSchedule order,
// into a plan of num_stages stages: rank (s, d, t) holds virtual stages s, s + num_stages, ... of
// (d, t) as chunks 0, 1, ... A rank whose virtual stages all share their first rank's programs
// (RankPlan.same_program_as) shares the merged first rank's; other shared ones are derived first.
//   - buffers and parameters are concatenated, and the merged rank's memory planned again
//     (planMemory): persistent bytes first, the chunks' temporaries sharing bytes where their
//     lifetimes in the interleaved order do not meet;
//   - send/recv peers and collective groups move to the merged ranks;
//   - "train" runs each chunk's steps in interleavedSchedule order, after every chunk's
//     instructions before the first step and before every chunk's instructions after the last;
//     other programs run chunk after chunk;
//   - buffers two chunks name alike get "@" and the virtual stage after the name in the later
//     chunk; every chunk keeps its step counter, but only the first chunk's is a parameter (saved
//     in checkpoints): the others copy it at the start of every step.
// Errors (kBadInput) name what cannot be merged: a message between two virtual stages of one rank,
// a collective two of whose members land on one rank (a norm or a tied weight summed over the
// pipeline), a parameter two chunks of a rank both hold (a weight tied across layers).
Expected<planpb::Plan> mergeVirtualStages(const planpb::Plan& virtual_plan, int num_stages, int num_chunks);

}  // namespace cleave
