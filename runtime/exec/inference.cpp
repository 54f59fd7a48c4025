// Inference: runs a plan's "infer" program on inputs from .npy files and writes its outputs as .npy.
#include "runtime/exec/inference.h"

#include <algorithm>
#include <filesystem>

#include "runtime/io/file_io.h"
#include "runtime/io/npy.h"

namespace cleave::runtime {

// Steps: read and check every input file before running anything, scatter, run, assemble and write
// every output.
Expected<std::vector<std::string>> runInference(RankGroup& group, const std::string& inputs_dir,
                                                const std::string& outputs_dir) {
  constexpr const char* kProgram = "infer";
  CLEAVE_ASSIGN_OR_RETURN(std::unique_ptr<GlobalBatch> batch, GlobalBatch::create(group, kProgram));

  // 1. Inputs, whole, then each rank's rows.
  for (size_t i = 0; i < batch->inputs().size(); ++i) {
    const NamedTensor& input = batch->inputs()[i];
    std::string path = (std::filesystem::path(inputs_dir) / (input.name + ".npy")).string();
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      return Status::badInput("missing '" + path + "' for input '" + input.name + "' (" + input.view.type.str() + ")");
    CLEAVE_ASSIGN_OR_RETURN(NpyArray array, readNpy(path));
    CLEAVE_TRY(checkNpyType(array, input.view.type, path).withContext("input '" + input.name + "': "));
    CLEAVE_TRY(batch->write(i, array.data.data()));
  }
  CLEAVE_TRY(batch->scatter());

  // 2. Run.
  CLEAVE_TRY(group.run(kProgram));

  // 3. Outputs by name, in order of first appearance rank by rank.
  std::vector<std::string> names;
  for (int rank = 0; rank < group.size(); ++rank) {
    CLEAVE_ASSIGN_OR_RETURN(std::span<const NamedTensor> outputs, group.executor(rank).outputs(kProgram));
    for (const auto& output : outputs)
      if (std::find(names.begin(), names.end(), output.name) == names.end()) names.push_back(output.name);
  }
  CLEAVE_TRY(ensureDirectory(outputs_dir));
  std::vector<std::string> written;
  for (const auto& name : names) {
    CLEAVE_ASSIGN_OR_RETURN(HostTensor output, gatherOutput(group, kProgram, name));
    std::string path = (std::filesystem::path(outputs_dir) / (name + ".npy")).string();
    CLEAVE_TRY(writeNpy(path, output.type, output.bytes.data()));
    written.push_back(path);
  }
  return written;
}

Expected<std::vector<std::string>> runInference(RankExecutor& executor, const std::string& inputs_dir,
                                                const std::string& outputs_dir) {
  return runInference(*RankGroup::wrap(executor), inputs_dir, outputs_dir);
}

}  // namespace cleave::runtime
