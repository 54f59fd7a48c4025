// Fuzz target: the safetensors reader (`cleave run --resume` loads checkpoints through it).
#include <cstdint>

#include "runtime/io/safetensors.h"
#include "tests/fuzz/fuzz_input_file.h"

// Any input must read or fail with an error; every tensor read must hold exactly its type's bytes.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = cleave::fuzz::writeInputFile(data, size, "checkpoint.safetensors");
  auto file = cleave::runtime::readSafetensors(path);
  if (!file) return 0;
  for (const auto& tensor : file->tensors)
    if (static_cast<int64_t>(tensor.data.size()) != tensor.type.bytes()) __builtin_trap();
  return 0;
}
