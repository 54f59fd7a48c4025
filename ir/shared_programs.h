// SPMD plans: a rank that runs another rank's programs (RankPlan.same_program_as), and how its
// own programs are derived from them.
//
// The ranks of one pipeline stage run the same instructions over the same buffers; they differ
// only in their coordinates: the ranks they talk to, the rows of the batch they read and the
// blocks of split tensors they hold. A plan stores such a program once, at the rank with the
// lowest number, and the others name it. Deriving a rank's programs moves everything that depends
// on the coordinates to the rank's own:
//   - a collective group keeps its members' coordinates along the axes it spans and takes the
//     rank's along the others; a send/recv peer keeps the coordinates it differs from the named
//     rank's in and takes the rank's elsewhere;
//   - batch-split inputs and outputs start at dp_index * rows;
//   - a slice of the rank's block (Instruction.shard_axis) starts at its index on that axis times
//     the block; a parameter's shard_offset moves by its shard_steps.
#pragma once

#include "ir/status.h"

namespace cleave {
namespace planpb {
class Plan;
class RankPlan;
}  // namespace planpb

// True when `rank` names another rank's programs and holds none itself (the plan-file form).
bool isSharedRank(const planpb::RankPlan& rank);

// Checks every same_program_as reference: the named rank exists, holds its own programs, and lies
// at the same stage; every rank's (dp, tp, stage) coordinates are distinct and inside
// the strategy's mesh. Errors name the rank (kBadInput).
Status validateSharedPrograms(const planpb::Plan& plan);

// `rank`'s programs derived from the rank it names (a copy of that rank's buffers, parameters
// and programs, moved to `rank`'s coordinates); a rank with its own programs is returned as it is.
// The plan must have passed validateSharedPrograms. Errors name the rank and instruction whose
// group or peer has no counterpart at `rank`'s coordinates.
Expected<planpb::RankPlan> derivedRankPlan(const planpb::Plan& plan, int rank);

// The rank whose programs `rank` runs: the one it names when it is shared (isSharedRank), else
// itself (a plan that passed validateSharedPrograms names ranks it has).
const planpb::RankPlan& rankRunning(const planpb::Plan& plan, const planpb::RankPlan& rank);

// Derives the programs of every shared rank in place (same_program_as stays set, as a record of
// where they came from). A plan without shared ranks is left as it is.
Status expandSharedPrograms(planpb::Plan& plan);

}  // namespace cleave
