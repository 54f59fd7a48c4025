// Checkpoints: every persistent tensor of a plan saved whole by name, atomically, and loaded back to resume.
#pragma once

#include <cstdint>
#include <string>

#include "ir/status.h"
#include "runtime/io/data_source.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/rank_group.h"

namespace cleave::runtime {

// What a checkpoint records besides the tensors: where training stood.
struct CheckpointState {
  int64_t step = 0;       // optimizer steps completed
  DataPosition position;  // the next training batch
  uint64_t seed = 0;      // the run's data seed
};

// A checkpoint holds whole tensors: a tensor split over ranks (a parameter with a full shape) is
// assembled from its blocks, a tensor several ranks hold (replicas) is saved once, and tensors are
// in name order; so every plan of a model, however it is split, writes the same file, and a
// checkpoint of one plan resumes into any other plan of the model.

// A hash of the whole persistent tensors' names, dtypes, shapes and kinds, in name order (hex
// text): a checkpoint resumes only into a plan with the same fingerprint. kInternal when ranks
// disagree about a tensor or its blocks do not tile it.
Expected<std::string> planFingerprint(const RankGroup& group);

// Saves every persistent tensor (weights and optimizer state) of the group, whole, into
// DIR/checkpoint-<step>.safetensors with the state as metadata, then points DIR/latest at it;
// both writes are atomic. Keeps the newest `keep` checkpoints and deletes older ones.
// Returns the path written.
Expected<std::string> saveCheckpoint(const std::string& dir, const RankGroup& group, const CheckpointState& state,
                                     int keep = 2);

// The path of the checkpoint of step `step` in `dir`: DIR/checkpoint-<step>.safetensors.
std::string checkpointPath(const std::string& dir, int64_t step);

// True when DIR/latest exists (there is a checkpoint to resume from).
bool hasCheckpoint(const std::string& dir);

// Loads the checkpoint DIR/latest names into every rank's persistent tensors (each block cut from
// its whole tensor) after checking every tensor's name, dtype and shape and the plan fingerprint
// (kBadInput naming the mismatch; nothing is loaded then). Returns the saved state.
Expected<CheckpointState> loadLatestCheckpoint(const std::string& dir, const RankGroup& group);

// A group that spans processes (RankGroup::createForProcess, an MPI run) checkpoints in shards:
// DIR/checkpoint-<step>/rank-<r>.safetensors holds rank r's own blocks, written by its process, and
// DIR/checkpoint-<step>/manifest.json, written by rank 0 once every rank's shard is on disk (a
// barrier), records the state and the shards; then DIR/latest names the manifest. Every file is
// written atomically (temporary file, fsync, rename), the manifest and `latest` last, so a crash
// leaves `latest` at the previous complete checkpoint. saveCheckpoint and loadLatestCheckpoint take
// this form for such groups; it resumes the same plan on as many processes, each rank checking its
// shard against its own tensors (names, dtypes, blocks). DIR must be one folder every process sees.

// The folder of the sharded checkpoint of step `step` in `dir`: DIR/checkpoint-<step>.
std::string shardedCheckpointPath(const std::string& dir, int64_t step);

// The same three on one executor (a single-device plan).
Expected<std::string> planFingerprint(RankExecutor& executor);
Expected<std::string> saveCheckpoint(const std::string& dir, RankExecutor& executor, const CheckpointState& state,
                                     int keep = 2);
Expected<CheckpointState> loadLatestCheckpoint(const std::string& dir, RankExecutor& executor);

}  // namespace cleave::runtime
