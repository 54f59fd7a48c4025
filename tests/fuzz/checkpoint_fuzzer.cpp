// Fuzz target: the checkpoint manifest and the assembly of whole tensors from the blocks it lists
// (`cleave run --resume` and `cleave export` read checkpoints through it). The input is the
// manifest; the folder holds two fixed valid shards (w: f32[2,4] as two blocks of f32[1,4]).
#include <cstdint>
#include <fstream>

#include "runtime/io/safetensors.h"
#include "runtime/train/checkpoint.h"
#include "tests/fuzz/fuzz_input_file.h"

namespace {

// Writes the two shards and `latest` once: w: f32[2,4], row 0 in rank-0's shard, row 1 in rank-1's.
const std::string& checkpointFolder() {
  static const std::string* dir = [] {
    auto* folder = new std::string(cleave::fuzz::inputFolder());
    std::filesystem::create_directories(*folder + "/checkpoint-1");
    const float rows[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}};
    const char* crcs[2] = {"8ba71454", "f66072af"};  // CRC-32 of each row's bytes, as a save writes them
    for (int rank = 0; rank < 2; ++rank) {
      std::map<std::string, std::string> metadata = {
          {"format", "cleave-checkpoint-shard-2"},
          {"step", "1"},
          {"rank", std::to_string(rank)},
          {"blocks", "{\"w\":{\"offset\":[" + std::to_string(rank) + ",0],\"crc32\":\"" + crcs[rank] + "\"}}"}};
      std::vector<cleave::runtime::SafetensorsEntry> entries = {
          {"w", cleave::TensorType{cleave::DType::kF32, {1, 4}}, rows[rank]}};
      if (!cleave::runtime::writeSafetensors(*folder + "/checkpoint-1/rank-" + std::to_string(rank) + ".safetensors",
                                             entries, metadata))
        std::abort();
    }
    std::ofstream(*folder + "/latest") << "checkpoint-1/manifest.json\n";
    return folder;
  }();
  return *dir;
}

}  // namespace

// Any manifest must read or fail with an error; every tensor read must hold exactly its type's bytes.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = checkpointFolder();
  std::ofstream(dir + "/checkpoint-1/manifest.json", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  auto checkpoint = cleave::runtime::readLatestCheckpoint(dir);
  if (!checkpoint) return 0;
  for (const auto& tensor : checkpoint->tensors)
    if (static_cast<int64_t>(tensor.data.size()) != tensor.type.bytes()) __builtin_trap();
  return 0;
}
