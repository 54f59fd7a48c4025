// Checkpoints: every persistent tensor of a plan saved whole by name, atomically, and loaded back to resume.
#include "runtime/train/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "ir/plan.pb.h"
#include "runtime/io/file_io.h"
#include "runtime/io/safetensors.h"
#include "runtime/exec/tensor_blocks.h"

namespace cleave::runtime {
namespace {

constexpr const char* kFormat = "cleave-checkpoint-1";
constexpr const char* kLatestFile = "latest";
constexpr const char* kPrefix = "checkpoint-";
constexpr const char* kSuffix = ".safetensors";

std::string pathIn(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

// The step of a file named checkpoint-<step>.safetensors; nullopt for any other name.
std::optional<int64_t> checkpointStep(const std::string& file_name) {
  std::string prefix = kPrefix, suffix = kSuffix;
  if (file_name.size() <= prefix.size() + suffix.size() || file_name.compare(0, prefix.size(), prefix) != 0 ||
      file_name.compare(file_name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  std::string digits = file_name.substr(prefix.size(), file_name.size() - prefix.size() - suffix.size());
  int64_t step = 0;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (error != std::errc() || end != digits.data() + digits.size() || step < 0) return std::nullopt;
  return step;
}

Expected<int64_t> metadataInt(const std::map<std::string, std::string>& metadata, const std::string& key,
                              const std::string& path) {
  auto it = metadata.find(key);
  int64_t value = 0;
  if (it != metadata.end()) {
    auto [end, error] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), value);
    if (error == std::errc() && end == it->second.data() + it->second.size()) return value;
  }
  return Status::badInput("'" + path + "' is not a cleave checkpoint: metadata '" + key + "' is missing or not a number");
}

// Deletes checkpoint files older than the newest `keep`, never the one just written.
void pruneOldCheckpoints(const std::string& dir, const std::string& current, int keep) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (auto step = checkpointStep(name)) found.emplace_back(*step, name);
  }
  std::sort(found.begin(), found.end(), std::greater<>());
  for (size_t i = static_cast<size_t>(std::max(keep, 1)); i < found.size(); ++i)
    if (found[i].second != current) std::filesystem::remove(pathIn(dir, found[i].second), ec);
}

// One whole persistent tensor of the plan and the ranks' parts of it.
struct WholeTensor {
  std::string name;
  TensorType type;  // the whole tensor
  bool optimizer_state = false;
  struct Part {
    RankExecutor* executor = nullptr;
    TensorView view;    // the rank's block (the whole tensor when it is not split)
    Shape offset;       // where the block starts in the whole tensor
    bool first = true;  // false for a replica of a block an earlier part has
  };
  std::vector<Part> parts;  // every rank's, in rank order
};

// Steps: collect every rank's persistent tensors by name (in order of first appearance, rank by
// rank), check ranks agree on each whole tensor, mark replicated blocks, check the distinct blocks
// cover the whole tensor.
Expected<std::vector<WholeTensor>> wholeTensors(const RankGroup& group) {
  // 1. Parts by name.
  std::vector<WholeTensor> tensors;
  std::map<std::string, size_t> index_of;
  for (int rank = 0; rank < group.size(); ++rank) {
    RankExecutor& executor = group.executor(rank);
    for (const ParameterTensor& param : executor.parameters()) {
      bool split = !param.full_shape.empty();
      TensorType whole{param.view.type.dtype, split ? param.full_shape : param.view.type.shape};
      Shape offset = split ? param.shard_offset : Shape(whole.shape.size(), 0);
      auto [it, inserted] = index_of.try_emplace(param.name, tensors.size());
      if (inserted) tensors.emplace_back();
      WholeTensor& tensor = tensors[it->second];
      if (inserted) {
        tensor.name = param.name;
        tensor.type = whole;
        tensor.optimizer_state = param.optimizer_state;
      } else if (tensor.type != whole || tensor.optimizer_state != param.optimizer_state) {
        return Status::internal("persistent tensor '" + param.name + "' is " + tensor.type.str() + " on rank " +
                                std::to_string(tensor.parts[0].executor->rank()) + " but " + whole.str() +
                                " on rank " + std::to_string(rank));
      }
      // 2. A block an earlier rank has is a replica: the same offset must mean the same block.
      bool first = true;
      for (const auto& part : tensor.parts) {
        if (part.offset != offset) continue;
        if (part.view.type.shape != param.view.type.shape)
          return Status::internal("persistent tensor '" + param.name + "': the blocks at " + shapeStr(offset) +
                                  " of rank " + std::to_string(part.executor->rank()) + " and rank " +
                                  std::to_string(rank) + " differ in shape");
        first = false;
      }
      tensor.parts.push_back(WholeTensor::Part{&executor, param.view, offset, first});
    }
  }
  // 3. The distinct blocks must add up to the whole tensor.
  for (const WholeTensor& tensor : tensors) {
    int64_t covered = 0;
    for (const auto& part : tensor.parts)
      if (part.first) covered += part.view.type.numel();
    if (covered != tensor.type.numel())
      return Status::internal("persistent tensor '" + tensor.name + "' (" + tensor.type.str() +
                              "): the ranks' blocks hold " + std::to_string(covered) + " of its " +
                              std::to_string(tensor.type.numel()) + " elements");
  }
  return tensors;
}

// The tensors in name order: the order of a checkpoint file and its fingerprint, whatever the plan.
std::vector<const WholeTensor*> inNameOrder(const std::vector<WholeTensor>& tensors) {
  std::vector<const WholeTensor*> sorted;
  for (const WholeTensor& tensor : tensors) sorted.push_back(&tensor);
  std::sort(sorted.begin(), sorted.end(), [](const WholeTensor* a, const WholeTensor* b) { return a->name < b->name; });
  return sorted;
}

std::string fingerprintOf(const std::vector<WholeTensor>& tensors) {
  // FNV-1a over "name dtype[shape] kind" of each whole persistent tensor, in name order.
  uint64_t hash = 0xcbf29ce484222325ull;
  auto mix = [&hash](const std::string& text) {
    for (unsigned char c : text) {
      hash ^= c;
      hash *= 0x100000001b3ull;
    }
  };
  for (const WholeTensor* tensor : inNameOrder(tensors))
    mix(tensor->name + " " + tensor->type.str() + (tensor->optimizer_state ? " state" : " weight") + "\n");
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

// The bytes of a part's block, through a host copy when its device needs one.
Expected<const void*> hostBytes(const WholeTensor::Part& part, std::vector<std::vector<uint8_t>>& host_copies) {
  Device& device = part.executor->device();
  if (device.hostAccessible()) return static_cast<const void*>(part.view.data);
  host_copies.emplace_back(static_cast<size_t>(part.view.type.bytes()));
  CLEAVE_TRY(device.copyToHost(host_copies.back().data(), part.view.data, part.view.type.bytes()));
  return static_cast<const void*>(host_copies.back().data());
}

// ---- sharded checkpoints (groups that span processes) ----

constexpr const char* kShardFormat = "cleave-checkpoint-shard-1";
constexpr const char* kManifestFormat = "cleave-sharded-checkpoint-1";
constexpr const char* kManifestFile = "manifest.json";

std::string shardFileName(int rank) { return "rank-" + std::to_string(rank) + ".safetensors"; }

// A hash of one rank's persistent tensors as that rank holds them (name, dtype, block shape, whole
// shape, offset, kind), in name order: a shard loads only into the rank that wrote it, of the same plan.
std::string shardFingerprint(const RankExecutor& executor) {
  std::vector<const ParameterTensor*> sorted;
  for (const ParameterTensor& param : executor.parameters()) sorted.push_back(&param);
  std::sort(sorted.begin(), sorted.end(),
            [](const ParameterTensor* a, const ParameterTensor* b) { return a->name < b->name; });
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const ParameterTensor* param : sorted) {
    std::string line = param->name + " " + param->view.type.str() + " of " + shapeStr(param->full_shape) + " at " +
                       shapeStr(param->shard_offset) + (param->optimizer_state ? " state" : " weight") + "\n";
    for (unsigned char c : line) {
      hash ^= c;
      hash *= 0x100000001b3ull;
    }
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

// The step of a folder named checkpoint-<step>; nullopt for any other name.
std::optional<int64_t> shardedCheckpointStep(const std::string& name) {
  return checkpointStep(name + kSuffix);
}

// Deletes sharded checkpoint folders older than the newest `keep`, never the one just written.
void pruneOldShardedCheckpoints(const std::string& dir, const std::string& current, int keep) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (entry.is_directory(ec))
      if (auto step = shardedCheckpointStep(name)) found.emplace_back(*step, name);
  }
  std::sort(found.begin(), found.end(), std::greater<>());
  for (size_t i = static_cast<size_t>(std::max(keep, 1)); i < found.size(); ++i)
    if (found[i].second != current) std::filesystem::remove_all(pathIn(dir, found[i].second), ec);
}

// Steps: write this rank's shard, wait until every rank has written its own, then (rank 0) the
// manifest, `latest`, and pruning.
Expected<std::string> saveShardedCheckpoint(const std::string& dir, const RankGroup& group, const CheckpointState& state,
                                            int keep) {
  // 1. This rank's blocks, as it holds them.
  const std::string folder = shardedCheckpointPath(dir, state.step);
  CLEAVE_TRY(ensureDirectory(folder));
  RankExecutor& executor = group.executor(0);
  const int ranks = group.processPlan()->ranks_size();
  std::vector<std::vector<uint8_t>> host_copies;
  std::vector<SafetensorsEntry> entries;
  for (const ParameterTensor& param : executor.parameters()) {
    WholeTensor::Part part{&executor, param.view, param.shard_offset, true};
    CLEAVE_ASSIGN_OR_RETURN(const void* data, hostBytes(part, host_copies));
    entries.push_back(SafetensorsEntry{param.name, param.view.type, data});
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::map<std::string, std::string> metadata = {
      {"format", kShardFormat},         {"rank", std::to_string(executor.rank())},
      {"ranks", std::to_string(ranks)}, {"step", std::to_string(state.step)},
      {"fingerprint", shardFingerprint(executor)},
  };
  CLEAVE_TRY(writeSafetensors(pathIn(folder, shardFileName(executor.rank())), entries, metadata));

  // 2. Every shard is on disk once every rank has passed the barrier.
  std::vector<int> everyone(static_cast<size_t>(ranks));
  for (int rank = 0; rank < ranks; ++rank) everyone[static_cast<size_t>(rank)] = rank;
  CLEAVE_TRY(group.processCommunicator().barrier(everyone).withContext("checkpoint of step " +
                                                                         std::to_string(state.step) + ": "));
  if (executor.rank() != 0) return folder;

  // 3. The manifest, then `latest` naming it, then old checkpoints go.
  nlohmann::json manifest = {{"format", kManifestFormat},
                             {"step", state.step},
                             {"epoch", state.position.epoch},
                             {"batch", state.position.batch},
                             {"seed", std::to_string(state.seed)},
                             {"ranks", ranks},
                             {"shards", nlohmann::json::array()}};
  for (int rank = 0; rank < ranks; ++rank) manifest["shards"].push_back(shardFileName(rank));
  CLEAVE_TRY(writeFileAtomically(pathIn(folder, kManifestFile),
                                 [&](FileWriter& out) { return out.write(manifest.dump(2) + "\n"); }));
  std::string folder_name = std::filesystem::path(folder).filename().string();
  CLEAVE_TRY(writeFileAtomically(pathIn(dir, kLatestFile), [&](FileWriter& out) {
    return out.write(folder_name + "/" + kManifestFile + "\n");
  }));
  pruneOldShardedCheckpoints(dir, folder_name, keep);
  return folder;
}

// Steps: read `latest` and the manifest it names, check it fits this plan, read this rank's shard,
// check it against this rank's tensors, and only then copy them in.
Expected<CheckpointState> loadShardedCheckpoint(const std::string& dir, const RankGroup& group) {
  // 1. The manifest.
  std::string latest_path = pathIn(dir, kLatestFile);
  CLEAVE_ASSIGN_OR_RETURN(std::string latest, readWholeFile(latest_path));
  while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' ' || latest.back() == '\r')) latest.pop_back();
  const std::string suffix = std::string("/") + kManifestFile;
  if (latest.size() <= suffix.size() || latest.compare(latest.size() - suffix.size(), suffix.size(), suffix) != 0 ||
      !shardedCheckpointStep(latest.substr(0, latest.size() - suffix.size())))
    return Status::badInput("'" + latest_path + "' names '" + latest +
                            "', not a multi-process checkpoint (checkpoint-<step>/" + kManifestFile +
                            "); a multi-process run resumes only the sharded checkpoints of multi-process runs");
  std::string manifest_path = pathIn(dir, latest);
  CLEAVE_ASSIGN_OR_RETURN(std::string manifest_text, readWholeFile(manifest_path));
  nlohmann::json manifest = nlohmann::json::parse(manifest_text, nullptr, /*allow_exceptions=*/false);
  auto integer = [&](const char* key) -> Expected<int64_t> {
    if (!manifest.is_object() || !manifest.contains(key) || !manifest[key].is_number_integer())
      return Status::badInput("'" + manifest_path + "' is not a cleave checkpoint manifest: '" + key +
                              "' is missing or not an integer");
    return manifest[key].get<int64_t>();
  };
  if (!manifest.is_object() || manifest.value("format", "") != kManifestFormat)
    return Status::badInput("'" + manifest_path + "' is not a cleave checkpoint manifest (format is not " +
                            kManifestFormat + ")");
  CheckpointState state;
  CLEAVE_ASSIGN_OR_RETURN(state.step, integer("step"));
  CLEAVE_ASSIGN_OR_RETURN(state.position.epoch, integer("epoch"));
  CLEAVE_ASSIGN_OR_RETURN(state.position.batch, integer("batch"));
  CLEAVE_ASSIGN_OR_RETURN(int64_t ranks, integer("ranks"));
  std::string seed = manifest.value("seed", "");
  auto [seed_end, seed_error] = std::from_chars(seed.data(), seed.data() + seed.size(), state.seed);
  if (seed_error != std::errc() || seed_end != seed.data() + seed.size())
    return Status::badInput("'" + manifest_path + "' is not a cleave checkpoint manifest: 'seed' is not a number");
  const int plan_ranks = group.processPlan()->ranks_size();
  if (ranks != plan_ranks)
    return Status::badInput("checkpoint '" + manifest_path + "' was saved by " + std::to_string(ranks) +
                            " ranks; this plan has " + std::to_string(plan_ranks));

  // 2. This rank's shard must hold exactly this rank's tensors.
  RankExecutor& executor = group.executor(0);
  std::string shard_path = pathIn(std::filesystem::path(manifest_path).parent_path().string(),
                                  shardFileName(executor.rank()));
  CLEAVE_ASSIGN_OR_RETURN(SafetensorsFile file, readSafetensors(shard_path));
  auto format = file.metadata.find("format");
  if (format == file.metadata.end() || format->second != kShardFormat)
    return Status::badInput("'" + shard_path + "' is not a cleave checkpoint shard (metadata 'format' is not " +
                            kShardFormat + ")");
  CLEAVE_ASSIGN_OR_RETURN(int64_t shard_step, metadataInt(file.metadata, "step", shard_path));
  if (shard_step != state.step)
    return Status::badInput("'" + shard_path + "' holds step " + std::to_string(shard_step) + ", its manifest step " +
                            std::to_string(state.step));
  auto fingerprint = file.metadata.find("fingerprint");
  std::string want = shardFingerprint(executor);
  if (fingerprint == file.metadata.end() || fingerprint->second != want)
    return Status::badInput("checkpoint shard '" + shard_path + "' was saved from a different plan (fingerprint " +
                            (fingerprint == file.metadata.end() ? std::string("missing") : fingerprint->second) +
                            ", rank " + std::to_string(executor.rank()) + "'s is " + want + ")");
  for (const ParameterTensor& param : executor.parameters()) {
    const SafetensorsTensor* saved = file.find(param.name);
    if (!saved || saved->type != param.view.type)
      return Status::badInput("checkpoint shard '" + shard_path + "' has no tensor '" + param.name + "' of type " +
                              param.view.type.str());
  }
  if (file.tensors.size() != executor.parameters().size())
    return Status::badInput("checkpoint shard '" + shard_path + "' holds " + std::to_string(file.tensors.size()) +
                            " tensors; rank " + std::to_string(executor.rank()) + " has " +
                            std::to_string(executor.parameters().size()));

  // 3. Copy in.
  for (const ParameterTensor& param : executor.parameters())
    CLEAVE_TRY(executor.device().copyFromHost(param.view.data, file.find(param.name)->data.data(),
                                              param.view.type.bytes()));
  return state;
}

}  // namespace

std::string shardedCheckpointPath(const std::string& dir, int64_t step) {
  return pathIn(dir, kPrefix + std::to_string(step));
}

Expected<std::string> planFingerprint(const RankGroup& group) {
  CLEAVE_ASSIGN_OR_RETURN(std::vector<WholeTensor> tensors, wholeTensors(group));
  return fingerprintOf(tensors);
}

// Steps: assemble the whole tensors (through host copies when needed), write the checkpoint, point
// `latest` at it, prune old ones.
Expected<std::string> saveCheckpoint(const std::string& dir, const RankGroup& group, const CheckpointState& state,
                                     int keep) {
  CLEAVE_TRY(ensureDirectory(dir));
  if (group.spansProcesses()) return saveShardedCheckpoint(dir, group, state, keep);
  // 1. The whole tensors, by name: a tensor one block holds whole is written from that block.
  CLEAVE_ASSIGN_OR_RETURN(std::vector<WholeTensor> tensors, wholeTensors(group));
  std::vector<std::vector<uint8_t>> host_copies;
  std::vector<SafetensorsEntry> entries;
  for (const WholeTensor* whole_tensor : inNameOrder(tensors)) {
    const WholeTensor& tensor = *whole_tensor;
    const WholeTensor::Part& first = tensor.parts[0];
    if (first.view.type.shape == tensor.type.shape) {
      CLEAVE_ASSIGN_OR_RETURN(const void* data, hostBytes(first, host_copies));
      entries.push_back(SafetensorsEntry{tensor.name, tensor.type, data});
      continue;
    }
    std::vector<uint8_t> whole(static_cast<size_t>(tensor.type.bytes()));
    for (const auto& part : tensor.parts) {
      if (!part.first) continue;
      CLEAVE_ASSIGN_OR_RETURN(const void* block, hostBytes(part, host_copies));
      copyBox(block, part.view.type.shape, Shape(part.offset.size(), 0), whole.data(), tensor.type.shape, part.offset,
              part.view.type.shape, dtypeSize(tensor.type.dtype));
    }
    host_copies.push_back(std::move(whole));
    entries.push_back(SafetensorsEntry{tensor.name, tensor.type, host_copies.back().data()});
  }
  std::map<std::string, std::string> metadata = {
      {"format", kFormat},
      {"step", std::to_string(state.step)},
      {"epoch", std::to_string(state.position.epoch)},
      {"batch", std::to_string(state.position.batch)},
      {"seed", std::to_string(state.seed)},
      {"fingerprint", fingerprintOf(tensors)},
  };

  // 2. The checkpoint file, then `latest` naming it: a crash between the two leaves `latest` at the
  //    previous complete checkpoint.
  std::string path = checkpointPath(dir, state.step);
  std::string file_name = std::filesystem::path(path).filename().string();
  CLEAVE_TRY(writeSafetensors(path, entries, metadata));
  CLEAVE_TRY(writeFileAtomically(pathIn(dir, kLatestFile),
                                 [&](FileWriter& out) { return out.write(file_name + "\n"); }));

  // 3. Old checkpoints.
  pruneOldCheckpoints(dir, file_name, keep);
  return path;
}

std::string checkpointPath(const std::string& dir, int64_t step) {
  return pathIn(dir, kPrefix + std::to_string(step) + kSuffix);
}

bool hasCheckpoint(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::exists(pathIn(dir, kLatestFile), ec);
}

// Steps: read `latest`, read the file it names, check format and every tensor against the plan,
// then the fingerprint, and only then copy each rank's blocks in (a failed load changes nothing).
Expected<CheckpointState> loadLatestCheckpoint(const std::string& dir, const RankGroup& group) {
  if (group.spansProcesses()) return loadShardedCheckpoint(dir, group);
  // 1. The file `latest` names.
  std::string latest_path = pathIn(dir, kLatestFile);
  CLEAVE_ASSIGN_OR_RETURN(std::string latest, readWholeFile(latest_path));
  while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' ' || latest.back() == '\r')) latest.pop_back();
  if (latest.find(std::string("/") + kManifestFile) != std::string::npos)
    return Status::badInput("'" + latest_path + "' names '" + latest +
                            "', a multi-process checkpoint (a shard per rank); resume it with mpirun and "
                            "--backend mpi, on the plan that saved it");
  if (!checkpointStep(latest))
    return Status::badInput("'" + latest_path + "' does not name a checkpoint file (it holds '" + latest + "')");
  std::string path = pathIn(dir, latest);
  CLEAVE_ASSIGN_OR_RETURN(SafetensorsFile file, readSafetensors(path));

  // 2. Format and state.
  auto format = file.metadata.find("format");
  if (format == file.metadata.end() || format->second != kFormat)
    return Status::badInput("'" + path + "' is not a cleave checkpoint (metadata 'format' is not " + kFormat + ")");
  CheckpointState state;
  CLEAVE_ASSIGN_OR_RETURN(state.step, metadataInt(file.metadata, "step", path));
  CLEAVE_ASSIGN_OR_RETURN(state.position.epoch, metadataInt(file.metadata, "epoch", path));
  CLEAVE_ASSIGN_OR_RETURN(state.position.batch, metadataInt(file.metadata, "batch", path));
  CLEAVE_ASSIGN_OR_RETURN(int64_t seed, metadataInt(file.metadata, "seed", path));
  state.seed = static_cast<uint64_t>(seed);

  // 3. Every whole persistent tensor must be there with its type; nothing else may be.
  CLEAVE_ASSIGN_OR_RETURN(std::vector<WholeTensor> tensors, wholeTensors(group));
  std::set<std::string> expected_names;
  for (const WholeTensor& tensor : tensors) {
    expected_names.insert(tensor.name);
    const SafetensorsTensor* saved = file.find(tensor.name);
    if (!saved)
      return Status::badInput("checkpoint '" + path + "' has no tensor '" + tensor.name + "' that the plan needs (" +
                              tensor.type.str() + "); it was saved from a different plan");
    if (saved->type != tensor.type)
      return Status::badInput("checkpoint '" + path + "': tensor '" + tensor.name + "' is " + saved->type.str() +
                              ", the plan has " + tensor.type.str());
  }
  for (const auto& tensor : file.tensors)
    if (!expected_names.count(tensor.name))
      return Status::badInput("checkpoint '" + path + "' has tensor '" + tensor.name +
                              "' that the plan does not; it was saved from a different plan");
  auto fingerprint = file.metadata.find("fingerprint");
  std::string want = fingerprintOf(tensors);
  if (fingerprint == file.metadata.end() || fingerprint->second != want)
    return Status::badInput("checkpoint '" + path + "' was saved from a different plan (fingerprint " +
                            (fingerprint == file.metadata.end() ? std::string("missing") : fingerprint->second) +
                            ", this plan's is " + want + ")");

  // 4. Copy in: each rank's block of each whole tensor.
  for (const WholeTensor& tensor : tensors) {
    const SafetensorsTensor* saved = file.find(tensor.name);
    for (const auto& part : tensor.parts) {
      Device& device = part.executor->device();
      if (part.view.type.shape == tensor.type.shape) {
        CLEAVE_TRY(device.copyFromHost(part.view.data, saved->data.data(), part.view.type.bytes()));
        continue;
      }
      std::vector<uint8_t> block(static_cast<size_t>(part.view.type.bytes()));
      copyBox(saved->data.data(), tensor.type.shape, part.offset, block.data(), part.view.type.shape,
              Shape(part.offset.size(), 0), part.view.type.shape, dtypeSize(tensor.type.dtype));
      CLEAVE_TRY(device.copyFromHost(part.view.data, block.data(), part.view.type.bytes()));
    }
  }
  return state;
}

Expected<std::string> planFingerprint(RankExecutor& executor) { return planFingerprint(*RankGroup::wrap(executor)); }

Expected<std::string> saveCheckpoint(const std::string& dir, RankExecutor& executor, const CheckpointState& state,
                                     int keep) {
  return saveCheckpoint(dir, *RankGroup::wrap(executor), state, keep);
}

Expected<CheckpointState> loadLatestCheckpoint(const std::string& dir, RankExecutor& executor) {
  return loadLatestCheckpoint(dir, *RankGroup::wrap(executor));
}

}  // namespace cleave::runtime
