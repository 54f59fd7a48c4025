// Inference: runs a plan's "infer" program on inputs from .npy files and writes its outputs as .npy.
#include "runtime/inference.h"

#include <filesystem>

#include "runtime/file_io.h"
#include "runtime/npy.h"

namespace cleave::runtime {

// Steps: read and check every input file before running anything, run, write every output.
Expected<std::vector<std::string>> runInference(RankExecutor& executor, const std::string& inputs_dir,
                                                const std::string& outputs_dir) {
  constexpr const char* kProgram = "infer";
  CLEAVE_ASSIGN_OR_RETURN(std::span<const NamedTensor> inputs, executor.inputs(kProgram));
  CLEAVE_ASSIGN_OR_RETURN(std::span<const NamedTensor> outputs, executor.outputs(kProgram));
  Device& device = executor.device();

  // 1. Inputs.
  for (const auto& input : inputs) {
    std::string path = (std::filesystem::path(inputs_dir) / (input.name + ".npy")).string();
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      return Status::badInput("missing '" + path + "' for input '" + input.name + "' (" + input.view.type.str() + ")");
    CLEAVE_ASSIGN_OR_RETURN(NpyArray array, readNpy(path));
    CLEAVE_TRY(checkNpyType(array, input.view.type, path).withContext("input '" + input.name + "': "));
    CLEAVE_TRY(device.copyFromHost(input.view.data, array.data.data(), input.view.type.bytes()));
  }

  // 2. Run.
  CLEAVE_TRY(executor.run(kProgram));

  // 3. Outputs, through a host copy when the device needs one.
  CLEAVE_TRY(ensureDirectory(outputs_dir));
  std::vector<std::string> written;
  for (const auto& output : outputs) {
    std::string path = (std::filesystem::path(outputs_dir) / (output.name + ".npy")).string();
    std::vector<uint8_t> host;
    const void* data = output.view.data;
    if (!device.hostAccessible()) {
      host.resize(static_cast<size_t>(output.view.type.bytes()));
      CLEAVE_TRY(device.copyToHost(host.data(), output.view.data, output.view.type.bytes()));
      data = host.data();
    }
    CLEAVE_TRY(writeNpy(path, output.view.type, data));
    written.push_back(path);
  }
  return written;
}

}  // namespace cleave::runtime
