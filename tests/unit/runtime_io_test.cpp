// Tests of the runtime's file formats and data: .npy, safetensors, IDX, initializers, data sources.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "runtime/io/data_source.h"
#include "runtime/device/element_access.h"
#include "runtime/io/idx.h"
#include "runtime/train/initializers.h"
#include "runtime/io/npy.h"
#include "runtime/train/random.h"
#include "runtime/io/safetensors.h"
#include "tests/unit/temp_dir.h"

namespace cleave::runtime {
namespace {

// A fresh folder under the system's temporary folder, removed when the test ends.
// Temporary directories named after this test file.
class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("cleave-runtime-io") {}
};

void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string readBytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

// Fills `count` bytes with a recognisable pattern.
std::vector<uint8_t> patternBytes(int64_t count, uint8_t start = 1) {
  std::vector<uint8_t> bytes(static_cast<size_t>(count));
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(start + 7 * i);
  return bytes;
}

// A .npy version 1.0 file with the given header dict and data, padded as NumPy pads.
std::string npyFile(const std::string& dict, const std::string& data, int major = 1) {
  std::string header = dict;
  size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string file = "\x93NUMPY";
  file += static_cast<char>(major);
  file += '\0';
  for (size_t i = 0; i < prefix - 8; ++i) file += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return file + header + data;
}

// ---- .npy ----

TEST(NpyTest, RoundTripsEveryDType) {
  TempDir dir;
  const std::vector<TensorType> types = {
      {DType::kF32, {2, 3}}, {DType::kF64, {4}},   {DType::kF16, {3, 1, 2}}, {DType::kI64, {5}},
      {DType::kI32, {2, 2}}, {DType::kI8, {7}},    {DType::kU8, {2, 5}},     {DType::kBool, {3}},
      {DType::kF32, {}},     {DType::kI64, {0, 3}},
  };
  for (const auto& type : types) {
    std::vector<uint8_t> data = patternBytes(type.bytes());
    if (type.dtype == DType::kBool)
      for (auto& b : data) b &= 1;
    std::string path = dir.file("a.npy");
    ASSERT_TRUE(writeNpy(path, type, data.data()).isOk()) << type.str();
    EXPECT_EQ(readBytes(path).size() % 64, static_cast<size_t>(type.bytes()) % 64) << "data starts at a 64-byte boundary";
    auto array = readNpy(path);
    ASSERT_TRUE(array.hasValue()) << array.status().message();
    EXPECT_EQ(array->type, type);
    EXPECT_EQ(array->data, data) << type.str();
  }
}

TEST(NpyTest, WritesNumPysHeader) {
  TempDir dir;
  float values[3] = {1.0f, 2.0f, 3.0f};
  ASSERT_TRUE(writeNpy(dir.file("v.npy"), TensorType{DType::kF32, {3}}, values).isOk());
  std::string bytes = readBytes(dir.file("v.npy"));
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_NE(bytes.find("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"), std::string::npos);
  EXPECT_EQ(bytes.size(), 128u + 12u);  // the header pads to a multiple of 64 bytes, as NumPy's
  EXPECT_EQ(bytes[127], '\n');
}

TEST(NpyTest, ReadsVersion2HeadersAndPythonLongs) {
  TempDir dir;
  int32_t values[4] = {1, -2, 3, -4};
  std::string data(reinterpret_cast<const char*>(values), sizeof values);
  writeBytes(dir.file("v2.npy"), npyFile("{'descr': '<i4', 'fortran_order': False, 'shape': (2L, 2L), }", data, 2));
  auto array = readNpy(dir.file("v2.npy"));
  ASSERT_TRUE(array.hasValue()) << array.status().message();
  EXPECT_EQ(array->type, (TensorType{DType::kI32, {2, 2}}));
  EXPECT_EQ(std::memcmp(array->data.data(), values, sizeof values), 0);
}

TEST(NpyTest, RejectsWhatItCannotRead) {
  TempDir dir;
  std::string four_floats(16, '\0');
  struct Case {
    std::string file;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {npyFile("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", four_floats), "Fortran order"},
      {npyFile("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", four_floats), "big-endian"},
      {npyFile("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", four_floats), "unsupported dtype '<c8'"},
      {npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", four_floats), "truncated data"},
      {npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", four_floats), "unexpected bytes"},
      {npyFile("{'descr': '<f4', 'shape': (4,), }", four_floats), "lacks"},
      {npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'extra': 1, }", four_floats), "unexpected key"},
      {npyFile("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }", four_floats), "structured"},
      {npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }", four_floats), "shape"},
      {std::string("\x93NUMPY\x01\x00\xff\x00{", 11), "truncated header"},
      {"PK\x03\x04 not numpy at all", "not a .npy file"},
  };
  for (const auto& c : cases) {
    std::string path = dir.file("bad.npy");
    writeBytes(path, c.file);
    auto array = readNpy(path);
    ASSERT_FALSE(array.hasValue()) << c.expected;
    EXPECT_EQ(array.status().kind(), ErrorKind::kBadInput);
    EXPECT_NE(array.status().message().find(c.expected), std::string::npos) << array.status().message();
    EXPECT_NE(array.status().message().find(path), std::string::npos) << array.status().message();
  }
  auto missing = readNpy(dir.file("missing.npy"));
  ASSERT_FALSE(missing.hasValue());
  EXPECT_NE(missing.status().message().find("missing.npy"), std::string::npos);
}

TEST(NpyTest, TruncatedFilesAtEveryLengthFailCleanly) {
  TempDir dir;
  std::vector<uint8_t> data = patternBytes(24);
  ASSERT_TRUE(writeNpy(dir.file("full.npy"), TensorType{DType::kF64, {3}}, data.data()).isOk());
  std::string full = readBytes(dir.file("full.npy"));
  for (size_t length = 0; length < full.size(); ++length) {
    writeBytes(dir.file("cut.npy"), full.substr(0, length));
    auto array = readNpy(dir.file("cut.npy"));
    EXPECT_FALSE(array.hasValue()) << "length " << length;
  }
}

TEST(NpyTest, ChecksTheExpectedType) {
  NpyArray array{TensorType{DType::kF32, {2, 3}}, std::vector<uint8_t>(24)};
  EXPECT_TRUE(checkNpyType(array, TensorType{DType::kF32, {2, 3}}, "x.npy").isOk());
  Status wrong = checkNpyType(array, TensorType{DType::kF32, {3, 2}}, "x.npy");
  EXPECT_EQ(wrong.message(), "'x.npy' holds f32[2,3], expected f32[3,2]");
  EXPECT_FALSE(checkNpyType(array, TensorType{DType::kF64, {2, 3}}, "x.npy").isOk());
}

TEST(NpyTest, RefusesToWriteBfloat16) {
  TempDir dir;
  uint16_t value = 0x3f80;
  Status status = writeNpy(dir.file("b.npy"), TensorType{DType::kBF16, {1}}, &value);
  EXPECT_EQ(status.kind(), ErrorKind::kBadInput);
  EXPECT_NE(status.message().find("bf16"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.file("b.npy")));
}

// ---- safetensors ----

TEST(SafetensorsTest, RoundTripsTensorsAndMetadata) {
  TempDir dir;
  std::vector<uint8_t> w = patternBytes(4 * 6), b = patternBytes(8 * 3, 5), h = patternBytes(2 * 2, 9);
  uint8_t flags[2] = {1, 0};
  std::vector<SafetensorsEntry> entries = {
      {"fc.weight", {DType::kF32, {2, 3}}, w.data()},
      {"step", {DType::kI64, {3}}, b.data()},
      {"half", {DType::kBF16, {2}}, h.data()},
      {"mask", {DType::kBool, {2}}, flags},
      {"empty", {DType::kF32, {0, 4}}, nullptr},
  };
  std::string path = dir.file("t.safetensors");
  ASSERT_TRUE(writeSafetensors(path, entries, {{"step", "12"}, {"note", "hello"}}).isOk());
  std::string bytes = readBytes(path);
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  EXPECT_EQ(header_length % 8, 0u);

  auto file = readSafetensors(path);
  ASSERT_TRUE(file.hasValue()) << file.status().message();
  EXPECT_EQ(file->metadata.at("step"), "12");
  EXPECT_EQ(file->metadata.at("note"), "hello");
  ASSERT_EQ(file->tensors.size(), 5u);
  ASSERT_NE(file->find("fc.weight"), nullptr);
  EXPECT_EQ(file->find("fc.weight")->type, (TensorType{DType::kF32, {2, 3}}));
  EXPECT_EQ(file->find("fc.weight")->data, w);
  EXPECT_EQ(file->find("step")->data, b);
  EXPECT_EQ(file->find("half")->type.dtype, DType::kBF16);
  EXPECT_EQ(file->find("half")->data, h);
  EXPECT_EQ(file->find("mask")->data, std::vector<uint8_t>({1, 0}));
  EXPECT_EQ(file->find("empty")->type, (TensorType{DType::kF32, {0, 4}}));
  EXPECT_EQ(file->find("nothing"), nullptr);
}

// A safetensors file from a header text and a data section.
std::string safetensorsFile(const std::string& header, const std::string& data) {
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return length + header + data;
}

TEST(SafetensorsTest, RejectsCorruptHeaders) {
  TempDir dir;
  std::string data(16, '\0');
  struct Case {
    std::string file;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"abc", "too short"},
      {std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) + "{}", "header length"},
      {safetensorsFile("{\"a\": {", data), "not valid JSON"},
      {safetensorsFile("[1, 2]", data), "not a JSON object"},
      {safetensorsFile(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, )"
                       R"("b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", data),
       "overlaps"},
      {safetensorsFile(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", data), "gap"},
      {safetensorsFile(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", data), "cover 8"},
      {safetensorsFile(R"({"a": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})", data), "reach past"},
      {safetensorsFile(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", data), "needs 12 bytes"},
      {safetensorsFile(R"({"a": {"dtype": "C64", "shape": [2], "data_offsets": [0, 16]}})", data), "unsupported dtype"},
      {safetensorsFile(R"({"a": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})", data), "shape"},
      {safetensorsFile(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}})", data), "byte range"},
      {safetensorsFile(R"({"a": {"dtype": "F32", "shape": [4]}})", data), "lacks"},
      {safetensorsFile(R"({"a": {"dtype": "U8", "shape": [4611686018427387904, 8], "data_offsets": [0, 16]}})", data),
       "shape"},
      {safetensorsFile(R"({"__metadata__": {"step": 3}, "a": {"dtype": "U8", "shape": [16], "data_offsets": [0, 16]}})",
                       data),
       "not a string"},
  };
  for (const auto& c : cases) {
    std::string path = dir.file("bad.safetensors");
    writeBytes(path, c.file);
    auto file = readSafetensors(path);
    ASSERT_FALSE(file.hasValue()) << c.expected;
    EXPECT_EQ(file.status().kind(), ErrorKind::kBadInput);
    EXPECT_NE(file.status().message().find(c.expected), std::string::npos) << file.status().message();
    EXPECT_NE(file.status().message().find(path), std::string::npos) << file.status().message();
  }
}

TEST(SafetensorsTest, DamagedFilesNeverCrash) {
  TempDir dir;
  std::vector<uint8_t> w = patternBytes(40);
  std::vector<SafetensorsEntry> entries = {{"w", {DType::kF32, {10}}, w.data()}};
  ASSERT_TRUE(writeSafetensors(dir.file("good.safetensors"), entries, {{"k", "v"}}).isOk());
  std::string good = readBytes(dir.file("good.safetensors"));
  // Every truncation fails; flipping any one byte either fails or still reads a consistent file.
  for (size_t length = 0; length < good.size(); ++length) {
    writeBytes(dir.file("cut.safetensors"), good.substr(0, length));
    EXPECT_FALSE(readSafetensors(dir.file("cut.safetensors")).hasValue()) << "length " << length;
  }
  Random random(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::string damaged = good;
    size_t at = random.below(good.size() - 40);  // in the length or header
    damaged[at] = static_cast<char>(random.below(256));
    writeBytes(dir.file("damaged.safetensors"), damaged);
    auto file = readSafetensors(dir.file("damaged.safetensors"));
    if (file.hasValue()) {
      for (const auto& tensor : file->tensors) EXPECT_EQ(static_cast<int64_t>(tensor.data.size()), tensor.type.bytes());
    }
  }
}

// ---- IDX ----

// Writes an IDX file of unsigned bytes, gzip-compressed when `gzip`.
void writeIdx(const std::string& path, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data, bool gzip,
              uint8_t type_code = 0x08) {
  std::string bytes = {0, 0, static_cast<char>(type_code), static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) bytes += static_cast<char>((d >> shift) & 0xff);
  bytes.append(data.begin(), data.end());
  if (!gzip) {
    writeBytes(path, bytes);
    return;
  }
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(file);
}

TEST(IdxTest, ReadsGzipAndPlainFiles) {
  TempDir dir;
  std::vector<uint8_t> pixels = patternBytes(3 * 4 * 5);
  writeIdx(dir.file("images.gz"), {3, 4, 5}, pixels, true);
  writeIdx(dir.file("images"), {3, 4, 5}, pixels, false);
  for (const auto& name : {"images.gz", "images"}) {
    auto array = readIdx(dir.file(name));
    ASSERT_TRUE(array.hasValue()) << array.status().message();
    EXPECT_EQ(array->dims, (Shape{3, 4, 5}));
    EXPECT_EQ(array->data, pixels);
  }
}

TEST(IdxTest, RejectsBadFiles) {
  TempDir dir;
  writeIdx(dir.file("floats.gz"), {2}, std::vector<uint8_t>(8), true, 0x0d);
  writeIdx(dir.file("short.gz"), {10}, std::vector<uint8_t>(9), true);
  writeIdx(dir.file("long.gz"), {10}, std::vector<uint8_t>(11), true);
  writeBytes(dir.file("magic"), std::string("\x01\x02\x08\x01\x00\x00\x00\x01\x05", 9));
  std::string gz = readBytes(dir.file("floats.gz"));
  writeBytes(dir.file("corrupt.gz"), gz.substr(0, gz.size() / 2));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"floats.gz", "element type 0x0d"}, {"short.gz", "truncated data"}, {"long.gz", "past the 10 bytes"},
      {"magic", "bad magic"},             {"corrupt.gz", "'"},           {"absent.gz", "cannot open"},
  };
  for (const auto& [name, expected] : cases) {
    auto array = readIdx(dir.file(name));
    ASSERT_FALSE(array.hasValue()) << name;
    EXPECT_NE(array.status().message().find(expected), std::string::npos) << array.status().message();
    EXPECT_NE(array.status().message().find(dir.file(name)), std::string::npos) << array.status().message();
  }
}

TEST(IdxTest, ReadsTheInstalledFashionMnistLabels) {
  std::string path = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto labels = readIdx(path);
  ASSERT_TRUE(labels.hasValue()) << labels.status().message();
  EXPECT_EQ(labels->dims, Shape{10000});
  std::vector<int> counts(10, 0);
  for (uint8_t label : labels->data) {
    ASSERT_LT(label, 10);
    ++counts[label];
  }
  for (int count : counts) EXPECT_EQ(count, 1000);  // the test split is balanced
}

// ---- element conversions and random streams ----

TEST(ElementAccessTest, ConvertsHalfAndBfloat16) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);             // rounds past the largest half
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // a tie rounds to even
  EXPECT_EQ(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(floatToHalf(INFINITY), 0x7c00);
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(NAN))));
  for (uint32_t bits = 0; bits < 0x7c00; ++bits)  // every finite half survives a round trip
    ASSERT_EQ(floatToHalf(halfToFloat(static_cast<uint16_t>(bits))), bits);
  EXPECT_EQ(floatToBfloat16(1.0f), 0x3f80);
  EXPECT_EQ(bfloat16ToFloat(0xc000), -2.0f);
  EXPECT_EQ(floatToBfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBfloat16(NAN))));
  int64_t ints[2] = {0, 0};
  storeElement(DType::kI64, ints, 1, -3.0);
  EXPECT_EQ(ints[1], -3);
  EXPECT_EQ(loadElement(DType::kI64, ints, 1), -3.0);
}

TEST(RandomTest, IsDeterministicAndWellSpread) {
  Random a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.nextBits(), b.nextBits());
  EXPECT_NE(Random(42).nextBits(), c.nextBits());
  // The stream is fixed by the algorithm: a change here changes every seeded run.
  EXPECT_EQ(Random(0).nextBits(), 0x99ec5f36cb75f2b4ull);
  Random r(1);
  double sum = 0, sum_sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double z = r.normal();
    sum += z;
    sum_sq += z * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.015);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) ++counts[r.below(7)];
  for (int count : counts) EXPECT_NEAR(count, 10000, 400);
}

// ---- initializers ----

struct Stats {
  double mean = 0, std_dev = 0, min = INFINITY, max = -INFINITY;
};

Stats statsOf(const std::vector<float>& values) {
  Stats s;
  double sum = 0, sum_sq = 0;
  for (float v : values) {
    sum += v;
    s.min = std::min<double>(s.min, v);
    s.max = std::max<double>(s.max, v);
  }
  s.mean = sum / static_cast<double>(values.size());
  for (float v : values) sum_sq += (v - s.mean) * (v - s.mean);
  s.std_dev = std::sqrt(sum_sq / static_cast<double>(values.size()));
  return s;
}

std::vector<float> initialize(const std::string& kind, const AttrMap& args, const Shape& shape) {
  TensorType type{DType::kF32, shape};
  std::vector<float> values(static_cast<size_t>(type.numel()), -999.0f);
  Status status = runInitializer(InitializerSpec{kind, args, {}}, type, values.data());
  EXPECT_TRUE(status.isOk()) << status.message();
  return values;
}

TEST(InitializerTest, KaimingUniformFollowsPyTorch) {
  // nn.Linear(784, 512)'s weight: kaiming_uniform(a=sqrt(5)) gives bound 1/sqrt(fan_in).
  std::vector<float> w = initialize("kaiming_uniform", {{"a", std::sqrt(5.0)}, {"seed", int64_t{3}}}, {512, 784});
  double bound = 1.0 / std::sqrt(784.0);
  Stats s = statsOf(w);
  EXPECT_LE(s.max, bound);
  EXPECT_GE(s.min, -bound);
  EXPECT_GT(s.max, 0.999 * bound);
  EXPECT_NEAR(s.mean, 0.0, 3e-4);
  EXPECT_NEAR(s.std_dev, bound / std::sqrt(3.0), 0.005 * bound);
  // The default a = 0 (leaky_relu) gives gain sqrt(2): bound sqrt(6 / fan_in).
  Stats d = statsOf(initialize("kaiming_uniform", {}, {512, 784}));
  EXPECT_NEAR(d.max, std::sqrt(6.0 / 784.0), 0.001);
  EXPECT_NEAR(d.std_dev, std::sqrt(2.0 / 784.0), 0.005 * std::sqrt(2.0 / 784.0));
}

TEST(InitializerTest, KaimingNormalUsesTheChosenFan) {
  // A conv weight [64, 16, 3, 3]: fan_in 144, fan_out 576.
  Stats in = statsOf(initialize("kaiming_normal", {{"seed", int64_t{1}}}, {64, 16, 3, 3}));
  EXPECT_NEAR(in.std_dev, std::sqrt(2.0 / 144.0), 0.01 * std::sqrt(2.0 / 144.0));
  Stats out = statsOf(initialize("kaiming_normal", {{"mode", std::string("fan_out")}, {"nonlinearity", std::string("relu")}},
                                 {64, 16, 3, 3}));
  EXPECT_NEAR(out.std_dev, std::sqrt(2.0 / 576.0), 0.01 * std::sqrt(2.0 / 576.0));
  EXPECT_NEAR(out.mean, 0.0, 0.002);
}

TEST(InitializerTest, XavierUsesBothFans) {
  double gain = 2.0;
  Stats u = statsOf(initialize("xavier_uniform", {{"gain", gain}}, {300, 500}));
  double bound = gain * std::sqrt(6.0 / 800.0);
  EXPECT_LE(u.max, bound);
  EXPECT_GT(u.max, 0.999 * bound);
  EXPECT_GE(u.min, -bound);
  Stats n = statsOf(initialize("xavier_normal", {}, {300, 500}));
  EXPECT_NEAR(n.std_dev, std::sqrt(2.0 / 800.0), 0.01 * std::sqrt(2.0 / 800.0));
  // Explicit fans override the shape's.
  Stats o = statsOf(initialize("xavier_normal", {{"fan_in", int64_t{100}}, {"fan_out", int64_t{100}}}, {300, 500}));
  EXPECT_NEAR(o.std_dev, 0.1, 0.001);
}

TEST(InitializerTest, NormalUniformAndConstants) {
  Stats n = statsOf(initialize("normal", {{"mean", 1.0}, {"std", 0.02}, {"seed", int64_t{9}}}, {1000, 100}));
  EXPECT_NEAR(n.mean, 1.0, 0.0002);
  EXPECT_NEAR(n.std_dev, 0.02, 0.0002);
  Stats u = statsOf(initialize("uniform", {{"low", -3.0}, {"high", int64_t{5}}}, {100000}));
  EXPECT_GE(u.min, -3.0);
  EXPECT_LT(u.max, 5.0);
  EXPECT_NEAR(u.mean, 1.0, 0.05);
  for (float v : initialize("constant", {{"value", 0.25}}, {7})) EXPECT_EQ(v, 0.25f);
  for (float v : initialize("ones", {}, {2, 2})) EXPECT_EQ(v, 1.0f);
  for (float v : initialize("zeros", {}, {3})) EXPECT_EQ(v, 0.0f);
}

TEST(InitializerTest, IsDeterministicPerSeed) {
  AttrMap seven = {{"seed", int64_t{7}}}, eight = {{"seed", int64_t{8}}};
  EXPECT_EQ(initialize("normal", seven, {64}), initialize("normal", seven, {64}));
  EXPECT_NE(initialize("normal", seven, {64}), initialize("normal", eight, {64}));
  // Pinned values: the same on every machine and compiler.
  std::vector<float> pinned = initialize("uniform", seven, {2});
  Random random(7);
  EXPECT_EQ(pinned[0], static_cast<float>(random.uniform()));
  EXPECT_EQ(pinned[1], static_cast<float>(random.uniform()));
}

TEST(InitializerTest, FillsOtherDTypes) {
  TensorType half{DType::kF16, {4096}};
  std::vector<uint16_t> bits(4096);
  ASSERT_TRUE(runInitializer(InitializerSpec{"normal", {{"std", 0.5}}, {}}, half, bits.data()).isOk());
  std::vector<float> values;
  for (uint16_t b : bits) values.push_back(halfToFloat(b));
  EXPECT_NEAR(statsOf(values).std_dev, 0.5, 0.02);

  int64_t ints[3] = {9, 9, 9};
  ASSERT_TRUE(runInitializer(InitializerSpec{"constant", {{"value", int64_t{4}}}, {}}, {DType::kI64, {3}}, ints).isOk());
  EXPECT_EQ(ints[2], 4);
  std::vector<uint8_t> stored = {1, 2, 3, 4};
  int32_t one = 0;
  ASSERT_TRUE(runInitializer(InitializerSpec{"data", {}, stored}, {DType::kI32, {}}, &one).isOk());
  EXPECT_EQ(one, 0x04030201);
}

TEST(InitializerTest, ReportsBadArguments) {
  float out[16];
  auto error = [&](const std::string& kind, const AttrMap& args, TensorType type, std::span<const uint8_t> data = {}) {
    return runInitializer(InitializerSpec{kind, args, data}, type, out).message();
  };
  EXPECT_EQ(error("gaussian", {}, {DType::kF32, {4}}), "unknown initializer 'gaussian'");
  EXPECT_EQ(error("normal", {{"stddev", 1.0}}, {DType::kF32, {4}}),
            "normal: unknown argument 'stddev' (accepted: mean, std, seed)");
  EXPECT_NE(error("kaiming_uniform", {}, {DType::kF32, {4}}).find("rank 1"), std::string::npos);
  EXPECT_NE(error("normal", {}, {DType::kI64, {2}}).find("cannot fill a i64[2] tensor"), std::string::npos);
  EXPECT_EQ(error("constant", {}, {DType::kF32, {4}}), "constant: needs argument 'value'");
  EXPECT_NE(error("kaiming_normal", {{"mode", std::string("fan_middle")}}, {DType::kF32, {2, 2}}).find("fan_middle"),
            std::string::npos);
  EXPECT_NE(error("kaiming_normal", {{"nonlinearity", std::string("swish")}}, {DType::kF32, {2, 2}}).find("swish"),
            std::string::npos);
  EXPECT_NE(error("normal", {{"std", std::string("big")}}, {DType::kF32, {2}}).find("must be a number"),
            std::string::npos);
  std::vector<uint8_t> three(3);
  EXPECT_NE(error("data", {}, {DType::kF32, {1}}, three).find("holds 3 bytes"), std::string::npos);
  // A rank-1 tensor takes kaiming with an explicit fan.
  EXPECT_TRUE(runInitializer(InitializerSpec{"kaiming_uniform", {{"fan_in", int64_t{16}}}, {}}, {DType::kF32, {4}}, out)
                  .isOk());
  for (int i = 0; i < 4; ++i) EXPECT_LE(std::abs(out[i]), std::sqrt(6.0 / 16.0));
}

// ---- data sources ----

// A Fashion-MNIST-like folder: `train` and `test` images whose pixels all equal (sample index % 256)
// and whose labels are sample index % 10.
void writeFakeFashionMnist(const std::string& dir, uint32_t train, uint32_t test) {
  for (auto [prefix, count] : {std::pair<std::string, uint32_t>{"train", train}, {"t10k", test}}) {
    std::vector<uint8_t> images(static_cast<size_t>(count) * 784), labels(count);
    for (uint32_t i = 0; i < count; ++i) {
      std::fill_n(images.begin() + static_cast<int64_t>(i) * 784, 784, static_cast<uint8_t>(i % 256));
      labels[i] = static_cast<uint8_t>(i % 10);
    }
    writeIdx(dir + "/" + prefix + "-images-idx3-ubyte.gz", {count, 28, 28}, images, true);
    writeIdx(dir + "/" + prefix + "-labels-idx1-ubyte.gz", {count}, labels, true);
  }
}

// An arena-like holder for a program's inputs.
struct Inputs {
  std::vector<std::vector<uint8_t>> storage;
  std::vector<NamedTensor> tensors;
  void add(const std::string& name, TensorType type, int64_t value_limit = 0) {
    storage.emplace_back(static_cast<size_t>(type.bytes()));
    tensors.push_back(NamedTensor{name, TensorView{storage.back().data(), type}, value_limit});
  }
  template <class T>
  const T* data(size_t i) const {
    return reinterpret_cast<const T*>(tensors[i].view.data);
  }
};

TEST(DataSourceTest, FashionMnistShufflesEachEpochAndDropsTheLastBatch) {
  TempDir dir;
  writeFakeFashionMnist(dir.path(), 10, 5);
  Inputs in;
  in.add("image", {DType::kF32, {4, 1, 28, 28}});
  in.add("labels", {DType::kI64, {4}}, 10);
  auto source = openDataSource("fashion-mnist:" + dir.path(), in.tensors, {DataSplit::kTrain, 5, "labels"});
  ASSERT_TRUE(source.hasValue()) << source.status().message();
  EXPECT_EQ((*source)->batchesPerEpoch(), 2);

  std::vector<std::vector<int64_t>> epochs(3);
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (int batch = 0; batch < 2; ++batch) {
      EXPECT_EQ((*source)->position(), (DataPosition{epoch, batch}));
      auto rows = (*source)->next();
      ASSERT_TRUE(rows.hasValue()) << rows.status().message();
      EXPECT_EQ(*rows, 4);
      for (int r = 0; r < 4; ++r) {
        int64_t label = in.data<int64_t>(1)[r];
        float pixel = in.data<float>(0)[r * 784 + 300];
        // Image and label come from the same sample: the pixel value is the sample index.
        int64_t sample = std::lround(pixel * 255.0f);
        EXPECT_EQ(pixel, static_cast<float>(sample) / 255.0f);
        EXPECT_EQ(label, sample % 10);
        epochs[epoch].push_back(sample);
      }
    }
    std::set<int64_t> distinct(epochs[epoch].begin(), epochs[epoch].end());
    EXPECT_EQ(distinct.size(), 8u) << "no sample twice in an epoch";
  }
  EXPECT_NE(epochs[0], epochs[1]);

  // Restoring a position replays exactly the same batch.
  auto again = openDataSource("fashion-mnist:" + dir.path(), in.tensors, {DataSplit::kTrain, 5, "labels"});
  ASSERT_TRUE(again.hasValue());
  ASSERT_TRUE((*again)->seek({1, 1}).isOk());
  ASSERT_TRUE((*again)->next().hasValue());
  for (int r = 0; r < 4; ++r) EXPECT_EQ(std::lround(in.data<float>(0)[r * 784] * 255.0f), epochs[1][4 + r]);
  EXPECT_FALSE((*again)->seek({0, 2}).isOk());
}

TEST(DataSourceTest, FashionMnistEvalIsInOrderAndPadsTheLastBatch) {
  TempDir dir;
  writeFakeFashionMnist(dir.path(), 10, 5);
  Inputs in;
  in.add("x", {DType::kF32, {2, 784}});
  in.add("labels", {DType::kI32, {2}});
  auto source = openDataSource("fashion-mnist:" + dir.path(), in.tensors, {DataSplit::kEval, 5, "labels"});
  ASSERT_TRUE(source.hasValue()) << source.status().message();
  EXPECT_EQ((*source)->batchesPerEpoch(), 3);
  std::vector<int64_t> real;
  std::vector<int32_t> labels;
  for (int b = 0; b < 3; ++b) {
    auto rows = (*source)->next();
    ASSERT_TRUE(rows.hasValue());
    real.push_back(*rows);
    labels.push_back(in.data<int32_t>(1)[0]);
    labels.push_back(in.data<int32_t>(1)[1]);
  }
  EXPECT_EQ(real, (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(labels, (std::vector<int32_t>{0, 1, 2, 3, 4, 0}));
  EXPECT_EQ((*source)->position(), (DataPosition{1, 0}));
}

TEST(DataSourceTest, FashionMnistChecksTheProgramsInputs) {
  TempDir dir;
  writeFakeFashionMnist(dir.path(), 10, 5);
  auto errorFor = [&](Inputs in, const std::string& labels) {
    auto source = openDataSource("fashion-mnist:" + dir.path(), in.tensors, {DataSplit::kTrain, 0, labels});
    return source.hasValue() ? std::string() : source.status().message();
  };
  Inputs wrong_pixels;
  wrong_pixels.add("x", {DType::kF32, {2, 100}});
  EXPECT_NE(errorFor(wrong_pixels, "").find("784"), std::string::npos);
  Inputs too_big;
  too_big.add("x", {DType::kF32, {16, 784}});
  EXPECT_NE(errorFor(too_big, "").find("exceeds the 10 training images"), std::string::npos);
  Inputs few_classes;
  few_classes.add("x", {DType::kF32, {8, 784}});
  few_classes.add("labels", {DType::kI64, {8}}, 3);
  // Labels the model's classes cannot take are found when the files are opened, naming the file and image.
  auto source = openDataSource("fashion-mnist:" + dir.path(), few_classes.tensors, {DataSplit::kEval, 0, "labels"});
  ASSERT_FALSE(source.hasValue());
  EXPECT_NE(source.status().message().find("t10k-labels-idx1-ubyte.gz': label of image 3 holds 3, outside [0, 3) "
                                           "for input 'labels'"),
            std::string::npos)
      << source.status().message();
  Inputs ok;
  ok.add("x", {DType::kF32, {2, 784}});
  EXPECT_NE(openDataSource("fashion-mnist:/nonexistent", ok.tensors, {}).status().message().find(
                "/nonexistent/train-images-idx3-ubyte.gz"),
            std::string::npos);
}

TEST(DataSourceTest, ReadsTheInstalledFashionMnist) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  Inputs in;
  in.add("x", {DType::kF32, {1000, 1, 28, 28}});
  in.add("labels", {DType::kI64, {1000}}, 10);
  auto source = openDataSource("fashion-mnist", in.tensors, {DataSplit::kEval, 0, "labels"});
  ASSERT_TRUE(source.hasValue()) << source.status().message();
  EXPECT_EQ((*source)->batchesPerEpoch(), 10);
  ASSERT_TRUE((*source)->next().hasValue());
  EXPECT_EQ(in.data<int64_t>(1)[0], 9);  // the first test image is an ankle boot
  double sum = 0;
  for (int64_t i = 0; i < 1000 * 784; ++i) {
    float v = in.data<float>(0)[i];
    ASSERT_GE(v, 0.0f);
    ASSERT_LE(v, 1.0f);
    sum += v;
  }
  EXPECT_NEAR(sum / (1000 * 784), 0.286, 0.01);  // Fashion-MNIST's mean pixel
}

TEST(DataSourceTest, NpyTakesConsecutiveRowsAndWraps) {
  TempDir dir;
  std::vector<float> x(10 * 3);
  std::vector<int64_t> y(10);
  for (int i = 0; i < 10; ++i) {
    for (int j = 0; j < 3; ++j) x[i * 3 + j] = static_cast<float>(i * 10 + j);
    y[i] = i;
  }
  ASSERT_TRUE(writeNpy(dir.file("x.npy"), {DType::kF32, {10, 3}}, x.data()).isOk());
  ASSERT_TRUE(writeNpy(dir.file("labels.npy"), {DType::kI64, {10}}, y.data()).isOk());
  Inputs in;
  in.add("x", {DType::kF32, {4, 3}});
  in.add("labels", {DType::kI64, {4}});
  auto source = openDataSource("npy:" + dir.path(), in.tensors, {DataSplit::kTrain, 0, "labels"});
  ASSERT_TRUE(source.hasValue()) << source.status().message();
  EXPECT_EQ((*source)->batchesPerEpoch(), 2);
  std::vector<int64_t> seen;
  for (int b = 0; b < 4; ++b) {
    ASSERT_TRUE((*source)->next().hasValue());
    for (int r = 0; r < 4; ++r) {
      seen.push_back(in.data<int64_t>(1)[r]);
      EXPECT_EQ(in.data<float>(0)[r * 3 + 2], static_cast<float>(in.data<int64_t>(1)[r] * 10 + 2));
    }
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5}));

  auto eval = openDataSource("npy:" + dir.path(), in.tensors, {DataSplit::kEval, 0, "labels"});
  ASSERT_TRUE(eval.hasValue());
  EXPECT_EQ((*eval)->batchesPerEpoch(), 3);
  ASSERT_TRUE((*eval)->seek({0, 2}).isOk());
  auto rows = (*eval)->next();
  ASSERT_TRUE(rows.hasValue());
  EXPECT_EQ(*rows, 2);
  EXPECT_EQ(in.data<int64_t>(1)[0], 8);
}

TEST(DataSourceTest, NpyErrorsNameTheFileAndInput) {
  TempDir dir;
  std::vector<double> wide(10 * 4);
  std::vector<float> few(2 * 3);
  ASSERT_TRUE(writeNpy(dir.file("doubles.npy"), {DType::kF64, {10, 3}}, wide.data()).isOk());
  ASSERT_TRUE(writeNpy(dir.file("wide.npy"), {DType::kF32, {10, 4}}, wide.data()).isOk());
  ASSERT_TRUE(writeNpy(dir.file("few.npy"), {DType::kF32, {2, 3}}, few.data()).isOk());
  auto errorFor = [&](const std::string& name) {
    Inputs in;
    in.add(name, {DType::kF32, {4, 3}});
    auto source = openDataSource("npy:" + dir.path(), in.tensors, {});
    return source.hasValue() ? std::string() : source.status().message();
  };
  EXPECT_EQ(errorFor("absent"), "--data npy:" + dir.path() + ": missing '" + dir.file("absent.npy") +
                                    "' for input 'absent' (f32[4,3])");
  EXPECT_EQ(errorFor("doubles"), "'" + dir.file("doubles.npy") + "' holds f64[10,3]; input 'doubles' needs f32[rows,3]");
  EXPECT_EQ(errorFor("wide"), "'" + dir.file("wide.npy") + "' holds f32[10,4]; input 'wide' needs f32[rows,3]");
  EXPECT_EQ(errorFor("few"), "'" + dir.file("few.npy") + "' has 2 rows, fewer than one batch of 4 for input 'few'");
  // A label or token id outside what the model takes names the file's row (not the batch's).
  std::vector<int64_t> labels = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 10, 5, 6, 7, 8, 9};
  ASSERT_TRUE(writeNpy(dir.file("labels.npy"), {DType::kI64, {20}}, labels.data()).isOk());
  std::vector<int64_t> tokens = {0, 1, 2, 3, 4, 5, 6, 7, -1, 9, 1, 2};
  ASSERT_TRUE(writeNpy(dir.file("tokens.npy"), {DType::kI64, {4, 3}}, tokens.data()).isOk());
  Inputs classes;
  classes.add("labels", {DType::kI64, {4}}, 10);
  EXPECT_EQ(openDataSource("npy:" + dir.path(), classes.tensors, {}).status().message(),
            "'" + dir.file("labels.npy") + "': row 14 holds 10, outside [0, 10) for input 'labels'");
  Inputs ids;
  ids.add("tokens", {DType::kI64, {2, 3}}, 16);
  EXPECT_EQ(openDataSource("npy:" + dir.path(), ids.tensors, {}).status().message(),
            "'" + dir.file("tokens.npy") + "': row 2 holds -1 (element 2 of the row), outside [0, 16) for input 'tokens'");
  Inputs none;
  EXPECT_EQ(openDataSource("npy", none.tensors, {}).status().kind(), ErrorKind::kUsage);
  EXPECT_EQ(openDataSource("parquet:x", none.tensors, {}).status().kind(), ErrorKind::kUsage);
}

TEST(DataSourceTest, SyntheticIsSeededAndRespectsValueLimits) {
  Inputs in;
  in.add("x", {DType::kF32, {64, 8}});
  in.add("tokens", {DType::kI32, {64, 8}}, 50);
  auto source = openDataSource("synthetic", in.tensors, {DataSplit::kTrain, 11, ""});
  ASSERT_TRUE(source.hasValue()) << source.status().message();
  EXPECT_EQ((*source)->batchesPerEpoch(), 0);
  ASSERT_TRUE((*source)->next().hasValue());
  std::vector<float> first(in.data<float>(0), in.data<float>(0) + 512);
  for (int i = 0; i < 512; ++i) {
    ASSERT_GE(in.data<int32_t>(1)[i], 0);
    ASSERT_LT(in.data<int32_t>(1)[i], 50);
  }
  std::vector<float> floats(first.begin(), first.end());
  EXPECT_NEAR(statsOf(floats).std_dev, 1.0, 0.1);
  ASSERT_TRUE((*source)->next().hasValue());
  EXPECT_NE(std::vector<float>(in.data<float>(0), in.data<float>(0) + 512), first);
  ASSERT_TRUE((*source)->seek({0, 0}).isOk());
  ASSERT_TRUE((*source)->next().hasValue());
  EXPECT_EQ(std::vector<float>(in.data<float>(0), in.data<float>(0) + 512), first);

  Inputs unlimited;
  unlimited.add("tokens", {DType::kI64, {4, 8}});
  auto bad = openDataSource("synthetic", unlimited.tensors, {});
  ASSERT_FALSE(bad.hasValue());
  EXPECT_NE(bad.status().message().find("'tokens'"), std::string::npos);
  EXPECT_EQ(openDataSource("synthetic", in.tensors, {DataSplit::kEval, 0, ""}).status().kind(), ErrorKind::kUsage);
}

}  // namespace
}  // namespace cleave::runtime
