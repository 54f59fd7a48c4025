// Checkpoints: every persistent tensor of a plan saved as blocks of its whole shape, one file per
// rank plus a manifest, atomically; loaded back under any plan of the model (resharded).
#include "runtime/train/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "ir/plan.h"
#include "ir/plan.pb.h"
#include "runtime/exec/tensor_blocks.h"
#include "runtime/io/file_io.h"
#include "runtime/io/safetensors.h"

namespace cleave::runtime {
namespace {

constexpr const char* kFormat = "cleave-checkpoint-2";
constexpr const char* kShardFormat = "cleave-checkpoint-shard-2";
constexpr const char* kSingleFileFormat = "cleave-checkpoint-1";  // older cleaves: one file of whole tensors
constexpr const char* kLatestFile = "latest";
constexpr const char* kManifestFile = "manifest.json";
constexpr const char* kPrefix = "checkpoint-";
constexpr const char* kSingleFileSuffix = ".safetensors";
constexpr int64_t kMaxTensorBytes = int64_t{1} << 42;  // 4 TiB: beyond any device's memory

std::string pathIn(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

std::string shardFileName(int rank) { return "rank-" + std::to_string(rank) + ".safetensors"; }

// The step of a name "checkpoint-<step><suffix>"; nullopt for any other name.
std::optional<int64_t> stepOfName(const std::string& name, const std::string& suffix) {
  std::string prefix = kPrefix;
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  int64_t step = 0;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (error != std::errc() || end != digits.data() + digits.size() || step < 0) return std::nullopt;
  return step;
}

std::string crcText(const void* data, int64_t bytes) {
  uLong crc = crc32_z(0L, static_cast<const Bytef*>(data), static_cast<z_size_t>(bytes));
  char text[9];
  std::snprintf(text, sizeof text, "%08lx", static_cast<unsigned long>(crc));
  return text;
}

// ---- the plan's layout ----

// One block of a persistent tensor that a rank holds.
struct Block {
  std::string name;
  TensorType whole;  // the whole tensor
  Shape offset;      // where the block starts in it
  Shape shape;       // the block's shape
  bool optimizer_state = false;
  // The model's layout of the whole tensor when the plan holds it reshaped or grouped
  // (ir/held_layout.h); model empty otherwise.
  HeldLayout layout;
};

Block blockOf(const std::string& name, const TensorType& held, const Shape& full_shape, const Shape& shard_offset,
              bool optimizer_state, HeldLayout layout) {
  bool split = !full_shape.empty();
  return Block{name, TensorType{held.dtype, split ? full_shape : held.shape},
               split ? shard_offset : Shape(held.shape.size(), 0), held.shape, optimizer_state, std::move(layout)};
}

Block blockOf(const ParameterTensor& param) {
  return blockOf(param.name, param.view.type, param.full_shape, param.shard_offset, param.optimizer_state,
                 param.model);
}

// Every rank's blocks, by rank: from the executors of a group in one process, from the plan for a
// group that spans processes (the other ranks' blocks decide which rank saves a replica).
Expected<std::map<int, std::vector<Block>>> blocksByRank(const RankGroup& group) {
  std::map<int, std::vector<Block>> ranks;
  if (!group.spansProcesses()) {
    for (int index = 0; index < group.size(); ++index) {
      RankExecutor& executor = group.executor(index);
      auto& blocks = ranks[executor.rank()];
      for (const ParameterTensor& param : executor.parameters()) blocks.push_back(blockOf(param));
    }
    return ranks;
  }
  for (const planpb::RankPlan& rank_plan : group.processPlan()->ranks()) {
    std::map<int32_t, const planpb::Buffer*> buffers;
    for (const planpb::Buffer& buffer : rank_plan.buffers()) buffers[buffer.id()] = &buffer;
    auto& blocks = ranks[rank_plan.rank()];
    for (const planpb::Parameter& param : rank_plan.parameters()) {
      auto buffer = buffers.find(param.buffer());
      if (buffer == buffers.end())
        return Status::internal("rank " + std::to_string(rank_plan.rank()) + ": parameter '" + param.name() +
                                "' has no buffer");
      CLEAVE_ASSIGN_OR_RETURN(TensorType held, fromProto(buffer->second->type()));
      blocks.push_back(blockOf(param.name(), held, Shape(param.full_shape().begin(), param.full_shape().end()),
                               Shape(param.shard_offset().begin(), param.shard_offset().end()),
                               buffer->second->kind() == planpb::BUFFER_OPTIMIZER_STATE,
                               heldLayoutOf(param)));
    }
  }
  return ranks;
}

// A whole persistent tensor of the plan and the distinct blocks that make it up, each with the
// lowest rank that holds it (the one that saves it).
struct PlanTensor {
  TensorType whole;
  bool optimizer_state = false;
  HeldLayout layout;  // Block::layout
  std::vector<std::pair<int, Block>> saved_by;  // (rank, block)
};

// Steps: group blocks by tensor, check the ranks agree on each whole tensor, keep the first rank of
// each distinct block, and check the distinct blocks cover the whole tensor.
Expected<std::map<std::string, PlanTensor>> planTensors(const std::map<int, std::vector<Block>>& ranks) {
  std::map<std::string, PlanTensor> tensors;
  for (const auto& [rank, blocks] : ranks) {
    for (const Block& block : blocks) {
      auto [it, inserted] = tensors.try_emplace(block.name);
      PlanTensor& tensor = it->second;
      if (inserted) {
        tensor.whole = block.whole;
        tensor.optimizer_state = block.optimizer_state;
        tensor.layout = block.layout;
      } else if (tensor.whole != block.whole || tensor.optimizer_state != block.optimizer_state) {
        return Status::internal("persistent tensor '" + block.name + "' is " + tensor.whole.str() + " on rank " +
                                std::to_string(tensor.saved_by[0].first) + " but " + block.whole.str() + " on rank " +
                                std::to_string(rank));
      }
      bool replica = false;
      for (const auto& [owner, saved] : tensor.saved_by) {
        if (saved.offset != block.offset) continue;
        if (saved.shape != block.shape)
          return Status::internal("persistent tensor '" + block.name + "': the blocks at " + shapeStr(block.offset) +
                                  " of rank " + std::to_string(owner) + " and rank " + std::to_string(rank) +
                                  " differ in shape");
        replica = true;
      }
      if (!replica) tensor.saved_by.emplace_back(rank, block);
    }
  }
  for (const auto& [name, tensor] : tensors) {
    int64_t covered = 0;
    for (const auto& [rank, block] : tensor.saved_by) covered += TensorType{tensor.whole.dtype, block.shape}.numel();
    if (covered != tensor.whole.numel())
      return Status::internal("persistent tensor '" + name + "' (" + tensor.whole.str() + "): the ranks' blocks hold " +
                              std::to_string(covered) + " of its " + std::to_string(tensor.whole.numel()) +
                              " elements");
  }
  return tensors;
}

// The bytes of a block on `executor`'s device, through a host copy when the device needs one.
Expected<const void*> hostBytes(RankExecutor& executor, const TensorView& view,
                                std::vector<std::vector<uint8_t>>& host_copies) {
  Device& device = executor.device();
  if (device.hostAccessible()) return static_cast<const void*>(view.data);
  host_copies.emplace_back(static_cast<size_t>(view.type.bytes()));
  CLEAVE_TRY(device.copyToHost(host_copies.back().data(), view.data, view.type.bytes()));
  return static_cast<const void*>(host_copies.back().data());
}

// ---- saving ----

// Writes the shard of `executor`'s rank: the blocks it is the first to hold. Nothing when it has none.
Status writeShard(const std::string& folder, RankExecutor& executor, const std::map<std::string, PlanTensor>& tensors,
                  const CheckpointState& state) {
  std::vector<std::vector<uint8_t>> host_copies;
  std::vector<SafetensorsEntry> entries;
  nlohmann::json blocks = nlohmann::json::object();
  for (const ParameterTensor& param : executor.parameters()) {
    const PlanTensor& tensor = tensors.at(param.name);
    Block mine = blockOf(param);
    bool saves = false;
    for (const auto& [rank, block] : tensor.saved_by) saves |= rank == executor.rank() && block.offset == mine.offset;
    if (!saves) continue;
    CLEAVE_ASSIGN_OR_RETURN(const void* data, hostBytes(executor, param.view, host_copies));
    entries.push_back(SafetensorsEntry{param.name, param.view.type, data});
    blocks[param.name] = {{"offset", mine.offset}, {"crc32", crcText(data, param.view.type.bytes())}};
  }
  if (entries.empty()) return Status::ok();
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::map<std::string, std::string> metadata = {{"format", kShardFormat},
                                                 {"rank", std::to_string(executor.rank())},
                                                 {"step", std::to_string(state.step)},
                                                 {"blocks", blocks.dump()}};
  return writeSafetensors(pathIn(folder, shardFileName(executor.rank())), entries, metadata);
}

nlohmann::json manifestOf(const std::map<std::string, PlanTensor>& tensors, const CheckpointState& state) {
  nlohmann::json manifest = {{"format", kFormat},
                             {"step", state.step},
                             {"epoch", state.position.epoch},
                             {"batch", state.position.batch},
                             {"seed", std::to_string(state.seed)},
                             {"tensors", nlohmann::json::object()}};
  for (const auto& [name, tensor] : tensors) {
    nlohmann::json blocks = nlohmann::json::array();
    for (const auto& [rank, block] : tensor.saved_by)
      blocks.push_back({{"file", shardFileName(rank)}, {"offset", block.offset}, {"shape", block.shape}});
    manifest["tensors"][name] = {{"dtype", std::string(dtypeName(tensor.whole.dtype))},
                                 {"shape", tensor.whole.shape},
                                 {"kind", tensor.optimizer_state ? "optimizer_state" : "weight"},
                                 {"blocks", blocks}};
    // A tensor the plan holds reshaped or grouped (a fused projection's weight under --tp): its
    // blocks are of `shape`; the model's shape (with its parts when grouped, ir/held_layout.h) is
    // what readers of whole tensors get.
    if (!tensor.layout.shape.empty() && (tensor.layout.shape != tensor.whole.shape || tensor.layout.grouped()))
      manifest["tensors"][name]["model_shape"] = tensor.layout.shape;
    if (tensor.layout.grouped()) {
      manifest["tensors"][name]["model_parts"] = tensor.layout.parts;
      manifest["tensors"][name]["model_part_axis"] = tensor.layout.axis;
    }
  }
  return manifest;
}

// The manifest as text a person can read: one line per state entry and per tensor.
std::string manifestText(const nlohmann::json& manifest) {
  std::string text = "{\n";
  for (const auto& [key, value] : manifest.items()) {
    if (key == "tensors") continue;
    text += "  " + nlohmann::json(key).dump() + ": " + value.dump() + ",\n";
  }
  text += "  \"tensors\": {";
  bool first = true;
  for (const auto& [name, tensor] : manifest["tensors"].items()) {
    text += std::string(first ? "" : ",") + "\n    " + nlohmann::json(name).dump() + ": " + tensor.dump();
    first = false;
  }
  return text + "\n  }\n}\n";
}

bool isTemporaryFile(const std::string& name) { return name.rfind(".tmp-", 0) == 0; }

// Steps: find the checkpoints in `dir` (complete: a folder with its manifest, or an older single
// file); keep the newest `keep` complete ones and the current; delete the other complete ones,
// folders without a manifest (crashed saves) other than the current, and every temporary file a
// crashed write left in `dir` or a checkpoint folder. Runs when no write is in progress.
void prune(const std::string& dir, const std::string& current, int keep) {
  struct Found {
    int64_t step;
    std::string name;
    bool complete;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (isTemporaryFile(name)) {
      std::filesystem::remove(entry.path(), ec);
    } else if (entry.is_directory(ec)) {
      if (auto step = stepOfName(name, "")) {
        found.push_back({*step, name, std::filesystem::exists(entry.path() / kManifestFile, ec)});
        for (const auto& inner : std::filesystem::directory_iterator(entry.path(), ec))
          if (isTemporaryFile(inner.path().filename().string())) std::filesystem::remove(inner.path(), ec);
      }
    } else if (auto step = stepOfName(name, kSingleFileSuffix)) {
      found.push_back({*step, name, true});
    }
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.step > b.step; });
  int kept = 0;
  for (const Found& checkpoint : found) {
    if (checkpoint.name == current) continue;
    if (checkpoint.complete && ++kept < std::max(keep, 1)) continue;
    std::filesystem::remove_all(pathIn(dir, checkpoint.name), ec);
  }
}

// ---- loading ----

// A block of a saved tensor: where it lies in the whole tensor and which file holds it.
struct SavedBlock {
  std::string file;  // path
  Shape offset;
  Shape shape;
};

// A tensor of a checkpoint, as its manifest describes it.
struct SavedTensor {
  TensorType whole;
  // The manifest's model_shape (and parts, when grouped: ir/held_layout.h), or whole's shape.
  HeldLayout layout;
  bool optimizer_state = false;
  bool single_file = false;  // from an older single-file checkpoint: no kinds, offsets or CRC-32s recorded
  std::vector<SavedBlock> blocks;
};

// A checkpoint's description: state and tensors, not yet their data.
struct SavedCheckpoint {
  std::string path;  // the manifest (or the single file)
  CheckpointState state;
  std::map<std::string, SavedTensor> tensors;
};

// The string at `key` of a JSON object; empty when it is missing or not a string.
std::string stringField(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Status notACheckpoint(const std::string& path, const std::string& why) {
  return Status::badInput("'" + path + "' is not a cleave checkpoint manifest: " + why);
}

Expected<Shape> jsonShape(const nlohmann::json& value, const std::string& path, const std::string& what) {
  Shape shape;
  if (!value.is_array()) return notACheckpoint(path, what + " is not a list of sizes");
  for (const auto& dim : value) {
    if (!dim.is_number_integer() || dim.get<int64_t>() < 0) return notACheckpoint(path, what + " is not a list of sizes");
    shape.push_back(dim.get<int64_t>());
  }
  return shape;
}

Expected<int64_t> parseInteger(const std::string& text, const std::string& path, const std::string& key) {
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size())
    return Status::badInput("'" + path + "' is not a cleave checkpoint: '" + key + "' is not a number");
  return value;
}

// Steps: parse the manifest, its state, then each tensor and its blocks.
Expected<SavedCheckpoint> readManifest(const std::string& path) {
  CLEAVE_ASSIGN_OR_RETURN(std::string text, readWholeFile(path));
  nlohmann::json manifest = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!manifest.is_object()) return notACheckpoint(path, "not a JSON object");
  std::string format = stringField(manifest, "format");
  if (format == "cleave-sharded-checkpoint-1")
    return Status::badInput("'" + path + "' is a multi-process checkpoint of an older cleave, whose shards do not "
                            "record where their blocks lie; resume it with that cleave and save it again");
  if (format != kFormat) return notACheckpoint(path, "format is not " + std::string(kFormat));
  SavedCheckpoint checkpoint;
  checkpoint.path = path;
  auto integer = [&](const char* key) -> Expected<int64_t> {
    if (!manifest.contains(key) || !manifest[key].is_number_integer())
      return notACheckpoint(path, std::string("'") + key + "' is missing or not an integer");
    return manifest[key].get<int64_t>();
  };
  CLEAVE_ASSIGN_OR_RETURN(checkpoint.state.step, integer("step"));
  CLEAVE_ASSIGN_OR_RETURN(checkpoint.state.position.epoch, integer("epoch"));
  CLEAVE_ASSIGN_OR_RETURN(checkpoint.state.position.batch, integer("batch"));
  if (!manifest.contains("seed") || !manifest["seed"].is_string()) return notACheckpoint(path, "'seed' is missing");
  CLEAVE_ASSIGN_OR_RETURN(int64_t seed, parseInteger(manifest["seed"].get<std::string>(), path, "seed"));
  checkpoint.state.seed = static_cast<uint64_t>(seed);
  if (!manifest.contains("tensors") || !manifest["tensors"].is_object())
    return notACheckpoint(path, "'tensors' is missing");
  const std::string folder = std::filesystem::path(path).parent_path().string();
  for (const auto& [name, entry] : manifest["tensors"].items()) {
    const std::string what = "tensor '" + name + "'";
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() || !entry.contains("blocks") ||
        !entry["blocks"].is_array() || !entry.contains("shape"))
      return notACheckpoint(path, what + " lacks dtype, shape or blocks");
    auto dtype = parseDType(entry["dtype"].get<std::string>());
    if (!dtype) return notACheckpoint(path, what + " has an unknown dtype");
    SavedTensor tensor;
    CLEAVE_ASSIGN_OR_RETURN(Shape shape, jsonShape(entry["shape"], path, what + "'s shape"));
    int64_t bytes = dtypeSize(*dtype);
    for (int64_t dim : shape)
      if (__builtin_mul_overflow(bytes, dim, &bytes) || bytes > kMaxTensorBytes)
        return notACheckpoint(path, what + "'s shape " + shapeStr(shape) + " is larger than any tensor can be");
    tensor.whole = TensorType{*dtype, shape};
    tensor.layout.shape = shape;
    if (entry.contains("model_shape")) {
      CLEAVE_ASSIGN_OR_RETURN(tensor.layout.shape, jsonShape(entry["model_shape"], path, what + "'s model shape"));
      if (entry.contains("model_parts")) {
        CLEAVE_ASSIGN_OR_RETURN(Shape parts, jsonShape(entry["model_parts"], path, what + "'s model parts"));
        tensor.layout.parts.assign(parts.begin(), parts.end());
        if (!entry.contains("model_part_axis") || !entry["model_part_axis"].is_number_integer())
          return notACheckpoint(path, what + " has model parts but no integer model_part_axis");
        tensor.layout.axis = entry["model_part_axis"].get<int64_t>();
      }
      if (Status held = checkHeldShape(tensor.layout, tensor.whole.shape); !held)
        return notACheckpoint(path, what + ": " + held.message());
    }
    tensor.optimizer_state = stringField(entry, "kind") == "optimizer_state";
    int64_t covered = 0;
    for (const auto& block_entry : entry["blocks"]) {
      if (!block_entry.is_object() || !block_entry.contains("file") || !block_entry["file"].is_string() ||
          !block_entry.contains("offset") || !block_entry.contains("shape"))
        return notACheckpoint(path, what + ": a block lacks file, offset or shape");
      SavedBlock block;
      std::string file = block_entry["file"].get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file[0] == '.')
        return notACheckpoint(path, what + ": block file '" + file + "' is not a file of the checkpoint's folder");
      block.file = pathIn(folder, file);
      CLEAVE_ASSIGN_OR_RETURN(block.offset, jsonShape(block_entry["offset"], path, what + "'s block offset"));
      CLEAVE_ASSIGN_OR_RETURN(block.shape, jsonShape(block_entry["shape"], path, what + "'s block shape"));
      if (block.offset.size() != shape.size() || !boxInside(shape, block.offset, block.shape))
        return notACheckpoint(path, what + ": a block of " + shapeStr(block.shape) + " at " + shapeStr(block.offset) +
                                        " does not lie inside " + tensor.whole.str());
      covered += TensorType{*dtype, block.shape}.numel();
      tensor.blocks.push_back(std::move(block));
    }
    if (covered != tensor.whole.numel())
      return notACheckpoint(path, what + ": its blocks hold " + std::to_string(covered) + " of its " +
                                      std::to_string(tensor.whole.numel()) + " elements");
    checkpoint.tensors.emplace(name, std::move(tensor));
  }
  return checkpoint;
}

// An older single-file checkpoint: its whole tensors, each a block of itself.
Expected<SavedCheckpoint> readSingleFileCheckpoint(const std::string& path, const SafetensorsFile& file) {
  auto format = file.metadata.find("format");
  if (format == file.metadata.end() || format->second != kSingleFileFormat)
    return Status::badInput("'" + path + "' is not a cleave checkpoint (metadata 'format' is not " + kSingleFileFormat +
                            ")");
  auto metadata = [&](const char* key) -> Expected<int64_t> {
    auto it = file.metadata.find(key);
    if (it == file.metadata.end())
      return Status::badInput("'" + path + "' is not a cleave checkpoint: metadata '" + key + "' is missing");
    return parseInteger(it->second, path, key);
  };
  SavedCheckpoint checkpoint;
  checkpoint.path = path;
  CLEAVE_ASSIGN_OR_RETURN(checkpoint.state.step, metadata("step"));
  CLEAVE_ASSIGN_OR_RETURN(checkpoint.state.position.epoch, metadata("epoch"));
  CLEAVE_ASSIGN_OR_RETURN(checkpoint.state.position.batch, metadata("batch"));
  CLEAVE_ASSIGN_OR_RETURN(int64_t seed, metadata("seed"));
  checkpoint.state.seed = static_cast<uint64_t>(seed);
  for (const auto& tensor : file.tensors) {
    SavedTensor saved;
    saved.whole = tensor.type;
    saved.layout.shape = tensor.type.shape;
    saved.single_file = true;
    saved.blocks.push_back(SavedBlock{path, Shape(tensor.type.shape.size(), 0), tensor.type.shape});
    checkpoint.tensors.emplace(tensor.name, std::move(saved));
  }
  return checkpoint;
}

// The files of a checkpoint, read on first use; each block's CRC-32 checked once.
class ShardReader {
 public:
  // Takes a file already read (an older single-file checkpoint, read to describe it).
  void add(const std::string& path, SafetensorsFile file) { files_.emplace(path, std::move(file)); }

  // The bytes of `name`'s block in `block.file`, after checking the shard's header agrees with the
  // manifest (format, step, offset, type) and the bytes with their CRC-32.
  Expected<const SafetensorsTensor*> block(const std::string& name, const SavedTensor& tensor, const SavedBlock& block,
                                           int64_t step) {
    auto it = files_.find(block.file);
    if (it == files_.end()) {
      CLEAVE_ASSIGN_OR_RETURN(SafetensorsFile file, readSafetensors(block.file));
      it = files_.emplace(block.file, std::move(file)).first;
    }
    const SafetensorsFile& file = it->second;
    const SafetensorsTensor* saved = file.find(name);
    const TensorType expected{tensor.whole.dtype, block.shape};
    if (!saved || saved->type != expected)
      return Status::badInput("checkpoint file '" + block.file + "' has no tensor '" + name + "' of type " +
                              expected.str() + " (its manifest says it has)");
    if (tensor.single_file || !checked_.insert(block.file + "\n" + name).second) return saved;
    auto format = file.metadata.find("format");
    auto saved_step = file.metadata.find("step");
    auto blocks_text = file.metadata.find("blocks");
    if (format == file.metadata.end() || format->second != kShardFormat || saved_step == file.metadata.end() ||
        blocks_text == file.metadata.end())
      return Status::badInput("'" + block.file + "' is not a cleave checkpoint shard (its metadata lacks format " +
                              kShardFormat + ", step or blocks)");
    if (saved_step->second != std::to_string(step))
      return Status::badInput("'" + block.file + "' holds step " + saved_step->second + ", its manifest step " +
                              std::to_string(step) + " (a file of another checkpoint)");
    nlohmann::json blocks = nlohmann::json::parse(blocks_text->second, nullptr, /*allow_exceptions=*/false);
    if (!blocks.is_object() || !blocks.contains(name) || !blocks[name].is_object() ||
        !blocks[name].contains("crc32") || !blocks[name]["crc32"].is_string() || !blocks[name].contains("offset"))
      return Status::badInput("'" + block.file + "': tensor '" + name + "' has no offset or checksum in the metadata");
    if (blocks[name]["offset"] != nlohmann::json(block.offset))
      return Status::badInput("'" + block.file + "': tensor '" + name + "' is the block at " +
                              blocks[name]["offset"].dump() + ", its manifest says at " + shapeStr(block.offset));
    std::string want = blocks[name]["crc32"].get<std::string>();
    std::string got = crcText(saved->data.data(), static_cast<int64_t>(saved->data.size()));
    if (got != want)
      return Status::badInput("checkpoint file '" + block.file + "': tensor '" + name +
                              "' is corrupt (CRC-32 " + got + ", saved as " + want + ")");
    return saved;
  }

 private:
  std::map<std::string, SafetensorsFile> files_;
  std::set<std::string> checked_;
};

// Fills `target` (the block of `shape` at `offset` of tensor `name`) from the saved blocks that
// overlap it; kBadInput when they leave part of it uncovered.
Status assembleBlock(const std::string& name, const SavedTensor& tensor, const Shape& offset, const Shape& shape,
                     uint8_t* target, ShardReader& reader, const SavedCheckpoint& checkpoint) {
  const int64_t element_bytes = dtypeSize(tensor.whole.dtype);
  int64_t covered = 0;
  for (const SavedBlock& saved : tensor.blocks) {
    // The overlap of the saved block and the wanted one, in whole-tensor coordinates.
    Shape start(shape.size()), extent(shape.size());
    bool empty = false;
    for (size_t d = 0; d < shape.size(); ++d) {
      int64_t begin = std::max(offset[d], saved.offset[d]);
      int64_t end = std::min(offset[d] + shape[d], saved.offset[d] + saved.shape[d]);
      empty |= end <= begin;
      start[d] = begin;
      extent[d] = std::max<int64_t>(end - begin, 0);
    }
    if (empty && !shape.empty()) continue;
    CLEAVE_ASSIGN_OR_RETURN(const SafetensorsTensor* bytes, reader.block(name, tensor, saved, checkpoint.state.step));
    Shape from(shape.size()), to(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) {
      from[d] = start[d] - saved.offset[d];
      to[d] = start[d] - offset[d];
    }
    copyBox(bytes->data.data(), saved.shape, from, target, shape, to, extent, element_bytes);
    covered += TensorType{tensor.whole.dtype, extent}.numel();
  }
  if (covered != TensorType{tensor.whole.dtype, shape}.numel())
    return Status::badInput("checkpoint '" + checkpoint.path + "': the saved blocks of tensor '" + name +
                            "' do not cover its block of " + shapeStr(shape) + " at " + shapeStr(offset));
  return Status::ok();
}

// The checkpoint `latest` names, described: a manifest, or an older single file, which is read
// whole and handed to `reader`.
Expected<SavedCheckpoint> readLatest(const std::string& dir, ShardReader& reader) {
  CLEAVE_ASSIGN_OR_RETURN(std::string path, latestCheckpointPath(dir));
  if (std::filesystem::path(path).extension() != kSingleFileSuffix) return readManifest(pathIn(path, kManifestFile));
  CLEAVE_ASSIGN_OR_RETURN(SafetensorsFile file, readSafetensors(path));
  CLEAVE_ASSIGN_OR_RETURN(SavedCheckpoint checkpoint, readSingleFileCheckpoint(path, file));
  reader.add(path, std::move(file));
  return checkpoint;
}

// Steps: every tensor the plan needs must be saved with its type; every saved weight must be in the
// plan; saved optimizer state must be too, unless the plan has none.
Status checkAgainstPlan(const SavedCheckpoint& checkpoint, const std::map<std::string, PlanTensor>& plan) {
  const std::string& path = checkpoint.path;
  bool plan_has_state = false;
  for (const auto& [name, tensor] : plan) {
    plan_has_state |= tensor.optimizer_state;
    auto saved = checkpoint.tensors.find(name);
    if (saved == checkpoint.tensors.end())
      return Status::badInput("checkpoint '" + path + "' has no tensor '" + name + "' that the plan needs (" +
                              tensor.whole.str() + ")" +
                              (tensor.optimizer_state ? ": it was saved with another optimizer, or by an inference plan"
                                                      : "; it was saved from another model"));
    // The same tensor held in another shape (a fused projection's weight as [in, parts, out] by a
    // plan under --tp, [in, parts·out] by another: one model shape) loads through the whole tensor.
    const TensorType saved_model{saved->second.whole.dtype, saved->second.layout.shape};
    const TensorType plan_model{tensor.whole.dtype, tensor.layout.shape.empty() ? tensor.whole.shape : tensor.layout.shape};
    if (saved->second.whole != tensor.whole && saved_model != plan_model)
      return Status::badInput("checkpoint '" + path + "': tensor '" + name + "' is " + saved_model.str() +
                              ", the plan has " + plan_model.str());
  }
  for (const auto& [name, saved] : checkpoint.tensors) {
    if (plan.count(name) || (saved.optimizer_state && !plan_has_state)) continue;
    return Status::badInput("checkpoint '" + path + "' has " + (saved.optimizer_state ? "optimizer state" : "tensor") +
                            " '" + name + "' that the plan does not" +
                            (saved.optimizer_state ? " (the plan's optimizer differs)" : "; it was saved from another model"));
  }
  return Status::ok();
}

}  // namespace

std::string checkpointPath(const std::string& dir, int64_t step) {
  return pathIn(dir, kPrefix + std::to_string(step));
}

Expected<std::string> latestCheckpointPath(const std::string& dir) {
  std::string latest_path = pathIn(dir, kLatestFile);
  std::error_code ec;
  if (!std::filesystem::exists(latest_path, ec))
    return Status::badInput("no checkpoint in '" + dir + "' (it has no file 'latest')");
  CLEAVE_ASSIGN_OR_RETURN(std::string latest, readWholeFile(latest_path));
  while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' ' || latest.back() == '\r')) latest.pop_back();
  const std::string manifest_suffix = std::string("/") + kManifestFile;
  if (latest.size() > manifest_suffix.size() &&
      latest.compare(latest.size() - manifest_suffix.size(), manifest_suffix.size(), manifest_suffix) == 0 &&
      stepOfName(latest.substr(0, latest.size() - manifest_suffix.size()), ""))
    return pathIn(dir, latest.substr(0, latest.size() - manifest_suffix.size()));
  if (stepOfName(latest, kSingleFileSuffix)) return pathIn(dir, latest);
  return Status::badInput("'" + latest_path + "' does not name a checkpoint (it holds '" + latest + "')");
}

// Steps: the plan's tensors and which rank saves each block; this process's shards; a barrier
// (every shard is on disk); then, in the process of rank 0, the manifest, `latest` and pruning.
Expected<std::string> saveCheckpoint(const std::string& dir, const RankGroup& group, const CheckpointState& state,
                                     int keep) {
  CLEAVE_TRY(ensureDirectory(dir));
  CLEAVE_ASSIGN_OR_RETURN(auto ranks, blocksByRank(group));
  CLEAVE_ASSIGN_OR_RETURN(auto tensors, planTensors(ranks));
  const std::string folder = checkpointPath(dir, state.step);
  CLEAVE_TRY(ensureDirectory(folder));
  for (int index = 0; index < group.size(); ++index)
    CLEAVE_TRY(writeShard(folder, group.executor(index), tensors, state));
  if (group.spansProcesses()) {
    std::vector<int> everyone;
    for (const auto& [rank, blocks] : ranks) everyone.push_back(rank);
    CLEAVE_TRY(group.processCommunicator().barrier(everyone).withContext("checkpoint of step " +
                                                                           std::to_string(state.step) + ": "));
    if (group.executor(0).rank() != 0) return folder;
  }
  CLEAVE_TRY(writeFileAtomically(pathIn(folder, kManifestFile),
                                 [&](FileWriter& out) { return out.write(manifestText(manifestOf(tensors, state))); }));
  std::string folder_name = std::filesystem::path(folder).filename().string();
  CLEAVE_TRY(writeFileAtomically(pathIn(dir, kLatestFile), [&](FileWriter& out) {
    return out.write(folder_name + "/" + kManifestFile + "\n");
  }));
  prune(dir, folder_name, keep);
  return folder;
}

// Steps: describe the checkpoint, check it against the plan, assemble every local rank's blocks on
// the host, and only then copy them in (a failed load changes nothing).
Expected<CheckpointState> loadLatestCheckpoint(const std::string& dir, const RankGroup& group) {
  ShardReader reader;
  CLEAVE_ASSIGN_OR_RETURN(SavedCheckpoint checkpoint, readLatest(dir, reader));
  CLEAVE_ASSIGN_OR_RETURN(auto ranks, blocksByRank(group));
  CLEAVE_ASSIGN_OR_RETURN(auto plan, planTensors(ranks));
  CLEAVE_TRY(checkAgainstPlan(checkpoint, plan));
  struct Pending {
    RankExecutor* executor;
    void* target;
    std::vector<uint8_t> bytes;
  };
  std::vector<Pending> pending;
  std::map<std::string, std::vector<uint8_t>> reshaped;  // whole saved tensors the plan holds in another layout
  for (int index = 0; index < group.size(); ++index) {
    RankExecutor& executor = group.executor(index);
    for (const ParameterTensor& param : executor.parameters()) {
      Block block = blockOf(param);
      Pending load{&executor, param.view.data, std::vector<uint8_t>(static_cast<size_t>(param.view.type.bytes()))};
      const SavedTensor& saved = checkpoint.tensors.at(param.name);
      const bool same_layout = saved.whole.shape == block.whole.shape && saved.layout.parts == block.layout.parts &&
                               saved.layout.axis == block.layout.axis;
      if (same_layout) {
        CLEAVE_TRY(assembleBlock(param.name, saved, block.offset, block.shape, load.bytes.data(), reader, checkpoint));
      } else {  // the whole saved tensor, in the model's order, then in the plan's layout
        auto [whole, first] = reshaped.try_emplace(param.name);
        if (first) {
          const int64_t element_bytes = dtypeSize(saved.whole.dtype);
          std::vector<uint8_t> held(static_cast<size_t>(saved.whole.bytes()));
          CLEAVE_TRY(assembleBlock(param.name, saved, Shape(saved.whole.shape.size(), 0), saved.whole.shape,
                                   held.data(), reader, checkpoint));
          whole->second = modelToHeldOrder(
              block.layout, block.whole.shape,
              heldToModelOrder(saved.layout, saved.whole.shape, std::move(held), element_bytes), element_bytes);
        }
        copyBox(whole->second.data(), block.whole.shape, block.offset, load.bytes.data(), block.shape,
                Shape(block.shape.size(), 0), block.shape, dtypeSize(block.whole.dtype));
      }
      pending.push_back(std::move(load));
    }
  }
  for (const Pending& load : pending)
    CLEAVE_TRY(load.executor->device().copyFromHost(load.target, load.bytes.data(),
                                                    static_cast<int64_t>(load.bytes.size())));
  return checkpoint.state;
}

Expected<Checkpoint> readLatestCheckpoint(const std::string& dir, bool weights_only) {
  ShardReader reader;
  CLEAVE_ASSIGN_OR_RETURN(SavedCheckpoint saved, readLatest(dir, reader));
  Checkpoint checkpoint;
  checkpoint.path = saved.path;
  checkpoint.state = saved.state;
  for (const auto& [name, tensor] : saved.tensors) {
    if (weights_only && tensor.optimizer_state) continue;
    CheckpointTensor whole{name, tensor.whole, tensor.optimizer_state,
                           std::vector<uint8_t>(static_cast<size_t>(tensor.whole.bytes()))};
    CLEAVE_TRY(assembleBlock(name, tensor, Shape(tensor.whole.shape.size(), 0), tensor.whole.shape, whole.data.data(),
                             reader, saved));
    // The same elements, in the model's order and shape.
    whole.data = heldToModelOrder(tensor.layout, tensor.whole.shape, std::move(whole.data), dtypeSize(tensor.whole.dtype));
    whole.type.shape = tensor.layout.shape;
    checkpoint.tensors.push_back(std::move(whole));
  }
  return checkpoint;
}

Expected<std::string> saveCheckpoint(const std::string& dir, RankExecutor& executor, const CheckpointState& state,
                                     int keep) {
  return saveCheckpoint(dir, *RankGroup::wrap(executor), state, keep);
}

Expected<CheckpointState> loadLatestCheckpoint(const std::string& dir, RankExecutor& executor) {
  return loadLatestCheckpoint(dir, *RankGroup::wrap(executor));
}

}  // namespace cleave::runtime
