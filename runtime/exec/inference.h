// Inference: runs a plan's "infer" program on inputs from .npy files and writes its outputs as .npy.
#pragma once

#include <string>
#include <vector>

#include "ir/status.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/rank_group.h"

namespace cleave::runtime {

// Reads DIR/<input>.npy for every input of "infer" (the global batch: dtype and shape must match
// exactly; errors name the file and the expected type), gives every rank its rows, runs the
// program on every rank once, and writes every output, assembled from the ranks that output it,
// to OUT/<output>.npy (creating OUT). The parameters must already be set (initializers or a
// checkpoint). Returns the paths written.
Expected<std::vector<std::string>> runInference(RankGroup& group, const std::string& inputs_dir,
                                                const std::string& outputs_dir);

// The same on one executor (a single-device plan).
Expected<std::vector<std::string>> runInference(RankExecutor& executor, const std::string& inputs_dir,
                                                const std::string& outputs_dir);

}  // namespace cleave::runtime
