// Tests that inputs the fuzzers found crashing, and other bad input, are clean errors: IDX, ONNX, plans, memory limits.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "frontend/model_generators.h"
#include "frontend/onnx/onnx_importer.h"
#include "ir/plan.h"
#include "ir/plan.pb.h"
#include "passes/core/compile_pipeline.h"
#include "runtime/io/idx.h"
#include "tests/unit/temp_dir.h"

namespace cleave {
namespace {

// A committed fuzz seed (tests/fuzz/corpus/TARGET/NAME); the regression-* ones once crashed.
std::string corpusFile(const std::string& target, const std::string& name) {
  return std::string(CLEAVE_SOURCE_DIR) + "/tests/fuzz/corpus/" + target + "/" + name;
}

void expectBadInput(const Status& status, const std::string& part) {
  EXPECT_EQ(status.kind(), ErrorKind::kBadInput) << status.message();
  EXPECT_NE(status.message().find(part), std::string::npos) << status.message();
}

TEST(BadInput, IdxDimsWhoseProductOverflowsAreTooLarge) {
  auto array = runtime::readIdx(corpusFile("idx", "regression-dims-overflow"));
  ASSERT_FALSE(array);
  expectBadInput(array.status(), "are too large");
}

TEST(BadInput, IdxHeaderAnnouncingGigabytesOfMissingDataIsTruncated) {
  auto array = runtime::readIdx(corpusFile("idx", "regression-huge-claim"));
  ASSERT_FALSE(array);
  expectBadInput(array.status(), "truncated data: dimensions [4294967295] need 4294967295 bytes");
}

TEST(BadInput, OnnxModelsThatCrashedTheImporterAreErrors) {
  const std::pair<const char*, const char*> cases[] = {
      // libonnx's version converter crashed on an output nothing computes.
      {"regression-undefined-output.onnx", "graph output 'z' is not computed by any node"},
      // libonnx's shape inference crashed (now in a child process) on a conv of a rank-3 input.
      {"regression-conv-rank-mismatch.onnx", "libonnx's shape inference crashed on it (signal"},
      // Negating the pad overflowed.
      {"regression-pad-int64-min.onnx", "pad -9223372036854775808 is out of range"},
      // Folded constants of unbounded size.
      {"regression-range-huge.onnx", "elements, over cleave's limit of 67108864"},
      {"regression-constant-of-shape-huge.onnx", "is too large to compute (over 67108864 elements)"},
  };
  for (const auto& [name, message] : cases) {
    SCOPED_TRACE(name);
    auto graph = importOnnxModel(corpusFile("onnx_import", name), {});
    ASSERT_FALSE(graph);
    expectBadInput(graph.status(), message);
  }
}

TEST(BadInput, AnEmptyOnnxFileHasNoGraph) {
  test::TempDir dir;
  std::ofstream(dir.file("empty.onnx")).close();
  auto graph = importOnnxModel(dir.file("empty.onnx"), {});
  ASSERT_FALSE(graph);
  expectBadInput(graph.status(), "not a valid ONNX model (it has no graph)");
}

TEST(BadInput, APlanFileWithOnlyItsHeaderIsTruncated) {
  test::TempDir dir;
  std::ofstream(dir.file("empty.cplan"), std::ios::binary) << "CLVPLAN\n";
  auto plan = readPlanFile(dir.file("empty.cplan"));
  ASSERT_FALSE(plan);
  expectBadInput(plan.status(), "truncated or corrupt (it has no format version)");
}

TEST(BadInput, APlanWithAMisalignedBufferIsRejected) {
  // The plan fuzzer found a plan whose f32 buffer started at an odd offset; kernels then read
  // misaligned floats.
  auto model = generateMlp(MlpSpec{8, {16}, 4, 2, 0});
  ASSERT_TRUE(model) << model.status().message();
  auto plan = compileModel(*model, CompileOptions{});
  ASSERT_TRUE(plan) << plan.status().message();
  planpb::Buffer& buffer = *plan->mutable_ranks(0)->mutable_buffers(0);
  ASSERT_EQ(buffer.type().dtype(), "f32");
  buffer.set_offset(buffer.offset() + 2);
  Status status = validatePlan(*plan);
  expectBadInput(status, "offset " + std::to_string(buffer.offset()) + " is not a multiple of 4 bytes, the size of f32");
}

TEST(BadInput, APlanOverTheMemoryLimitIsRejectedWithTheNumbers) {
  MlpSpec spec;
  spec.input = 64;
  spec.hidden = {256};
  spec.classes = 10;
  spec.batch = 32;
  auto model = generateMlp(spec);
  ASSERT_TRUE(model) << model.status().message();
  CompileOptions options;
  options.model_file = "mlp.cir";
  options.train = true;
  auto fits = compileModel(*model, options);
  ASSERT_TRUE(fits) << fits.status().message();
  const int64_t arena = fits->ranks(0).arena_bytes();

  // A limit of exactly the arena fits; one byte less does not, and the error gives both sizes.
  options.memory_limit_bytes = arena;
  EXPECT_TRUE(compileModel(*model, options));
  options.memory_limit_bytes = arena - 1;
  auto over = compileModel(*model, options);
  ASSERT_FALSE(over);
  expectBadInput(over.status(), "mlp.cir: the plan needs " + std::to_string(arena) + " bytes");
  expectBadInput(over.status(), "over the memory limit of " + std::to_string(arena - 1) + " bytes");

  // Split over two data-parallel ranks, each rank's arena is checked and the fullest is named.
  options.dp = 2;
  options.memory_limit_bytes = 1000;
  auto split = compileModel(*model, options);
  ASSERT_FALSE(split);
  expectBadInput(split.status(), "(the fullest of 2 ranks over the limit)");
}

}  // namespace
}  // namespace cleave
