// Fuzz target: the .npy reader (`cleave run --inputs` and `--data npy:DIR` read every array through it).
#include <cstdint>

#include "runtime/io/npy.h"
#include "tests/fuzz/fuzz_input_file.h"

// Any input must read or fail with an error; an array read must hold exactly its type's bytes.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = cleave::fuzz::writeInputFile(data, size, "array.npy");
  auto array = cleave::runtime::readNpy(path);
  if (array && static_cast<int64_t>(array->data.size()) != array->type.bytes()) __builtin_trap();
  return 0;
}
