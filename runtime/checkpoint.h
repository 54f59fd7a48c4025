// Checkpoints: every persistent tensor of a rank saved by name, atomically, and loaded back to resume.
#pragma once

#include <cstdint>
#include <string>

#include "ir/status.h"
#include "runtime/data_source.h"
#include "runtime/executor.h"

namespace cleave::runtime {

// What a checkpoint records besides the tensors: where training stood.
struct CheckpointState {
  int64_t step = 0;       // optimizer steps completed
  DataPosition position;  // the next training batch
  uint64_t seed = 0;      // the run's data seed
};

// A hash of the executor's persistent tensors' names, dtypes and shapes, in plan order (hex text):
// a checkpoint resumes only into a plan with the same fingerprint.
std::string planFingerprint(const RankExecutor& executor);

// Saves every persistent tensor (weights and optimizer state) of `executor` into
// DIR/checkpoint-<step>.safetensors with the state as metadata, then points DIR/latest at it;
// both writes are atomic. Keeps the newest `keep` checkpoints and deletes older ones.
// Returns the path written.
Expected<std::string> saveCheckpoint(const std::string& dir, const RankExecutor& executor,
                                     const CheckpointState& state, int keep = 2);

// The path of the checkpoint of step `step` in `dir`: DIR/checkpoint-<step>.safetensors.
std::string checkpointPath(const std::string& dir, int64_t step);

// True when DIR/latest exists (there is a checkpoint to resume from).
bool hasCheckpoint(const std::string& dir);

// Loads the checkpoint DIR/latest names into `executor`'s persistent tensors after checking every
// tensor's name, dtype and shape and the plan fingerprint (kBadInput naming the mismatch).
// Returns the saved state.
Expected<CheckpointState> loadLatestCheckpoint(const std::string& dir, const RankExecutor& executor);

}  // namespace cleave::runtime
