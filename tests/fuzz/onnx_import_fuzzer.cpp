// Fuzz target: ONNX import (protobuf, libonnx's checks and shape inference, conversion), as `cleave import` runs it.
#include <cstdint>

#include "frontend/onnx/onnx_importer.h"
#include "tests/fuzz/fuzz_input_file.h"

// Any input must import or fail with an error; both the import and the support check are run.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = cleave::fuzz::writeInputFile(data, size, "model.onnx");
  (void)cleave::checkOnnxSupport(path);
  cleave::OnnxImportOptions options;
  options.batch = 2;
  (void)cleave::importOnnxModel(path, options);
  return 0;
}
