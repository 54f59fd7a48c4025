// Inference: runs a plan's "infer" program on inputs from .npy files and writes its outputs as .npy.
#pragma once

#include <string>
#include <vector>

#include "ir/status.h"
#include "runtime/executor.h"

namespace cleave::runtime {

// Reads DIR/<input>.npy for every input of "infer" (dtype and shape must match exactly; errors
// name the file and the expected type), runs the program once, and writes every output to
// OUT/<output>.npy (creating OUT). The parameters must already be set (initializers or a
// checkpoint). Returns the paths written.
Expected<std::vector<std::string>> runInference(RankExecutor& executor, const std::string& inputs_dir,
                                                const std::string& outputs_dir);

}  // namespace cleave::runtime
