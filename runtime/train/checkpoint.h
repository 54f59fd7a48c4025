// Checkpoints: every persistent tensor of a plan saved as blocks of its whole shape, one file per
// rank plus a manifest, atomically; loaded back under any plan of the model (resharded).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

// The layout of a checkpoint (format "cleave-checkpoint-2"), as torch.distributed.checkpoint and
// Megatron's distributed checkpoints keep it: the folder DIR/checkpoint-<step>/ holds
//   rank-<r>.safetensors  the blocks rank r is the first to hold (a replica is saved once, by the
//                         lowest rank that has it), each under its tensor's name, with the block's
//                         offset in the whole tensor and a CRC-32 of its bytes in the metadata;
//   manifest.json         the state, and every tensor's dtype, whole shape, kind (weight or
//                         optimizer state) and blocks (file, offset, shape);
// and DIR/latest names the manifest. Every file is written atomically (temporary file, fsync,
// rename), the shards first, then (after a barrier, in a multi-process run) the manifest, then
// `latest`: a crash leaves `latest` at the previous complete checkpoint. A load cuts each rank's
// blocks out of whichever saved blocks overlap them, so a checkpoint of any plan of a model (any
// dp/tp/pp mix and rank count, one process or many) loads under any other plan of it. The
// single-file checkpoints of older cleaves (DIR/checkpoint-<step>.safetensors of whole tensors)
// still load.

// Saves every persistent tensor (weights and optimizer state) of the group into
// DIR/checkpoint-<step>/ as above, points DIR/latest at it, and prunes: keeps the newest `keep`
// complete checkpoints (never the one just written) and deletes older ones, folders that crashed
// saves left without a manifest, and temporary files of interrupted writes. In a group that spans
// processes each process writes its own rank's shard and rank 0 the rest. Returns the folder.
Expected<std::string> saveCheckpoint(const std::string& dir, const RankGroup& group, const CheckpointState& state,
                                     int keep = 2);

// The folder of the checkpoint of step `step` in `dir`: DIR/checkpoint-<step>.
std::string checkpointPath(const std::string& dir, int64_t step);

// The checkpoint DIR/latest names: its folder (or file, for an older single-file checkpoint).
// kBadInput naming `latest` when it is missing or names no checkpoint.
Expected<std::string> latestCheckpointPath(const std::string& dir);

// Loads the checkpoint DIR/latest names into every rank's persistent tensors, each block cut from
// the saved blocks that overlap it. Checked first, and nothing is loaded when a check fails
// (kBadInput naming the file and tensor): every persistent tensor of the plan is in the checkpoint
// with its dtype and whole shape; every weight of the checkpoint is in the plan; its optimizer
// state is in the plan too, unless the plan has none (an inference plan ignores it); each block
// read matches its CRC-32. Returns the saved state.
Expected<CheckpointState> loadLatestCheckpoint(const std::string& dir, const RankGroup& group);

// One whole tensor of a checkpoint, merged from its blocks.
struct CheckpointTensor {
  std::string name;
  TensorType type;
  bool optimizer_state = false;
  std::vector<uint8_t> data;  // type.bytes() bytes, row-major
};

// A checkpoint read whole (for export and inspection): its path, state and tensors in name order.
struct Checkpoint {
  std::string path;
  CheckpointState state;
  std::vector<CheckpointTensor> tensors;
};

// Reads the checkpoint DIR/latest names, every tensor merged whole (checksums verified); with
// `weights_only`, the optimizer state is left out.
Expected<Checkpoint> readLatestCheckpoint(const std::string& dir, bool weights_only = false);

// The same on one executor (a single-device plan).
Expected<std::string> saveCheckpoint(const std::string& dir, RankExecutor& executor, const CheckpointState& state,
                                     int keep = 2);
Expected<CheckpointState> loadLatestCheckpoint(const std::string& dir, RankExecutor& executor);

}  // namespace cleave::runtime
