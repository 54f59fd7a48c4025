// Checkpoints: every persistent tensor of a rank saved by name, atomically, and loaded back to resume.
#include "runtime/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "runtime/file_io.h"
#include "runtime/safetensors.h"

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

}  // namespace

std::string planFingerprint(const RankExecutor& executor) {
  // FNV-1a over "name dtype[shape] kind" of each persistent tensor, in plan order.
  uint64_t hash = 0xcbf29ce484222325ull;
  auto mix = [&hash](const std::string& text) {
    for (unsigned char c : text) {
      hash ^= c;
      hash *= 0x100000001b3ull;
    }
  };
  for (const auto& param : executor.parameters())
    mix(param.name + " " + param.view.type.str() + (param.optimizer_state ? " state" : " weight") + "\n");
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

// Steps: gather the tensors (through host copies when needed), write the checkpoint, point
// `latest` at it, prune old ones.
Expected<std::string> saveCheckpoint(const std::string& dir, const RankExecutor& executor,
                                     const CheckpointState& state, int keep) {
  CLEAVE_TRY(ensureDirectory(dir));
  // 1. The tensors, by name.
  Device& device = executor.device();
  std::vector<std::vector<uint8_t>> host_copies;  // for a device the host cannot address directly
  std::vector<SafetensorsEntry> entries;
  for (const auto& param : executor.parameters()) {
    const void* data = param.view.data;
    if (!device.hostAccessible()) {
      host_copies.emplace_back(static_cast<size_t>(param.view.type.bytes()));
      CLEAVE_TRY(device.copyToHost(host_copies.back().data(), param.view.data, param.view.type.bytes()));
      data = host_copies.back().data();
    }
    entries.push_back(SafetensorsEntry{param.name, param.view.type, data});
  }
  std::map<std::string, std::string> metadata = {
      {"format", kFormat},
      {"step", std::to_string(state.step)},
      {"epoch", std::to_string(state.position.epoch)},
      {"batch", std::to_string(state.position.batch)},
      {"seed", std::to_string(state.seed)},
      {"rank", std::to_string(executor.rank())},
      {"fingerprint", planFingerprint(executor)},
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
// then the fingerprint, and only then copy the tensors in (a failed load changes nothing).
Expected<CheckpointState> loadLatestCheckpoint(const std::string& dir, const RankExecutor& executor) {
  // 1. The file `latest` names.
  std::string latest_path = pathIn(dir, kLatestFile);
  CLEAVE_ASSIGN_OR_RETURN(std::string latest, readWholeFile(latest_path));
  while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' ' || latest.back() == '\r')) latest.pop_back();
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

  // 3. Every persistent tensor must be there with its type; nothing else may be.
  std::set<std::string> expected_names;
  for (const auto& param : executor.parameters()) {
    expected_names.insert(param.name);
    const SafetensorsTensor* saved = file.find(param.name);
    if (!saved)
      return Status::badInput("checkpoint '" + path + "' has no tensor '" + param.name + "' that the plan needs (" +
                              param.view.type.str() + "); it was saved from a different plan");
    if (saved->type != param.view.type)
      return Status::badInput("checkpoint '" + path + "': tensor '" + param.name + "' is " + saved->type.str() +
                              ", the plan has " + param.view.type.str());
  }
  for (const auto& tensor : file.tensors)
    if (!expected_names.count(tensor.name))
      return Status::badInput("checkpoint '" + path + "' has tensor '" + tensor.name +
                              "' that the plan does not; it was saved from a different plan");
  auto fingerprint = file.metadata.find("fingerprint");
  std::string want = planFingerprint(executor);
  if (fingerprint == file.metadata.end() || fingerprint->second != want)
    return Status::badInput("checkpoint '" + path + "' was saved from a different plan (fingerprint " +
                            (fingerprint == file.metadata.end() ? std::string("missing") : fingerprint->second) +
                            ", this plan's is " + want + ")");

  // 4. Copy in.
  for (const auto& param : executor.parameters()) {
    const SafetensorsTensor* saved = file.find(param.name);
    CLEAVE_TRY(executor.device().copyFromHost(param.view.data, saved->data.data(), param.view.type.bytes()));
  }
  return state;
}

}  // namespace cleave::runtime
