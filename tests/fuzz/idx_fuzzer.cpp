// Fuzz target: the IDX reader, plain and gzip-compressed (the Fashion-MNIST files `cleave run` trains on).
#include <cstdint>

#include "runtime/io/idx.h"
#include "tests/fuzz/fuzz_input_file.h"

// Any input must read or fail with an error; an array read must hold exactly its dims' bytes.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = cleave::fuzz::writeInputFile(data, size, "images-idx3-ubyte");
  auto array = cleave::runtime::readIdx(path);
  if (!array) return 0;
  int64_t elements = 1;
  for (int64_t dim : array->dims) elements *= dim;
  if (static_cast<int64_t>(array->data.size()) != elements) __builtin_trap();
  return 0;
}
