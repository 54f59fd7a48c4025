// Plans: .cplan file reading and writing, validation, and conversions between ir and protobuf types.
#include "ir/plan.h"

#include "ir/graph.h"
#include "ir/device_mesh.h"
#include "ir/parallel_tasks.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <climits>
#include <unordered_set>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "ir/op_table.h"
#include "ir/plan.pb.h"
#include "ir/plan_storage.h"
#include "ir/shared_programs.h"

namespace cleave {
namespace {

// Every .cplan file starts with these 8 bytes; the serialized planpb::Plan follows.
constexpr char kPlanMagic[] = "CLVPLAN\n";
constexpr size_t kPlanMagicSize = sizeof(kPlanMagic) - 1;

std::string programLabel(const planpb::Program& program) { return "program '" + program.name() + "': "; }

// "'name' (id 3)" for diagnostics.
std::string bufferLabel(const planpb::RankPlan& rank, int32_t id) {
  return "'" + rank.buffers(id).name() + "' (id " + std::to_string(id) + ")";
}

std::string byteRange(int64_t offset, int64_t bytes) {
  return "[" + std::to_string(offset) + "," + std::to_string(offset + bytes) + ")";
}

bool sameType(const planpb::TensorType& a, const planpb::TensorType& b) {
  return a.dtype() == b.dtype() && std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end());
}

std::string typeStr(const planpb::TensorType& type) {
  auto converted = fromProto(type);
  return converted ? converted->str() : "<invalid type>";
}

// Checks every buffer: ids equal to indices, valid types, bytes inside the arena, aliases that
// name a root and lie within its bytes, persistent storage inside the persistent region.
Status validateBuffers(const planpb::RankPlan& rank) {
  const int64_t arena = rank.arena_bytes();
  if (arena < 0 || rank.persistent_bytes() < 0 || rank.persistent_bytes() > arena)
    return Status::badInput("persistent_bytes " + std::to_string(rank.persistent_bytes()) +
                            " does not fit in arena_bytes " + std::to_string(arena));
  for (int32_t id = 0; id < rank.buffers_size(); ++id) {
    const planpb::Buffer& buffer = rank.buffers(id);
    std::string where = "buffer '" + buffer.name() + "' (id " + std::to_string(id) + "): ";
    if (buffer.id() != id)
      return Status::badInput("buffer '" + buffer.name() + "' at index " + std::to_string(id) + " has id " +
                              std::to_string(buffer.id()) + " (ids must equal their index)");
    if (!planpb::BufferKind_IsValid(buffer.kind()))
      return Status::badInput(where + "unknown buffer kind " + std::to_string(buffer.kind()));
    auto type = fromProto(buffer.type());
    if (!type) return type.status().withContext(where);
    int64_t bytes = bufferBytes(buffer);
    if (bytes < 0) return Status::badInput(where + "type " + type->str() + " is too large");
    if (buffer.offset() < 0 || buffer.offset() > arena - bytes)
      return Status::badInput(where + "bytes " + byteRange(buffer.offset(), bytes) + " lie outside the arena of " +
                              std::to_string(arena) + " bytes");
    if (buffer.offset() % dtypeSize(type->dtype) != 0)  // kernels read elements at their alignment
      return Status::badInput(where + "offset " + std::to_string(buffer.offset()) + " is not a multiple of " +
                              std::to_string(dtypeSize(type->dtype)) + " bytes, the size of " +
                              std::string(dtypeName(type->dtype)));
    if (buffer.has_alias_of()) {
      int32_t root = buffer.alias_of();
      if (root < 0 || root >= rank.buffers_size() || root == id)
        return Status::badInput(where + "alias_of names buffer " + std::to_string(root) + ", which is not another buffer of the rank");
      const planpb::Buffer& root_buffer = rank.buffers(root);
      if (root_buffer.has_alias_of())
        return Status::badInput(where + "alias_of names " + bufferLabel(rank, root) +
                                ", which is itself an alias (aliases must name their root)");
      int64_t root_bytes = bufferBytes(root_buffer);
      if (root_bytes >= 0 && (buffer.offset() < root_buffer.offset() ||
                              buffer.offset() + bytes > root_buffer.offset() + root_bytes))
        return Status::badInput(where + "bytes " + byteRange(buffer.offset(), bytes) + " lie outside its root " +
                                bufferLabel(rank, root) + " at " + byteRange(root_buffer.offset(), root_bytes));
    }
  }
  // Checked once every buffer is known valid, since it follows alias_of.
  for (int32_t id = 0; id < rank.buffers_size(); ++id) {
    const planpb::Buffer& buffer = rank.buffers(id);
    if (!buffer.has_alias_of() && isPersistentStorage(rank, id) &&
        buffer.offset() + bufferBytes(buffer) > rank.persistent_bytes())
      return Status::badInput("buffer " + bufferLabel(rank, id) + " holds persistent state but its bytes " +
                              byteRange(buffer.offset(), bufferBytes(buffer)) + " lie outside the persistent region [0," +
                              std::to_string(rank.persistent_bytes()) + ")");
  }
  return Status::ok();
}

// The mesh axes a rank's block of a tensor is picked along (shard steps, shard_axis).
bool isBlockAxis(std::string_view axis) { return axis == kDataAxis || axis == kTensorAxis; }

// Checks parameter entries: unique names, persistent root buffers, known initializers.
Status validateParameters(const planpb::RankPlan& rank) {
  std::set<std::string> names;
  for (const planpb::Parameter& param : rank.parameters()) {
    std::string where = "parameter '" + param.name() + "': ";
    if (param.name().empty()) return Status::badInput("a parameter has no name");
    if (!names.insert(param.name()).second) return Status::badInput(where + "defined twice");
    if (param.buffer() < 0 || param.buffer() >= rank.buffers_size())
      return Status::badInput(where + "buffer id " + std::to_string(param.buffer()) + " is out of range (the rank has " +
                              std::to_string(rank.buffers_size()) + " buffers)");
    const planpb::Buffer& buffer = rank.buffers(param.buffer());
    if (buffer.kind() != planpb::BUFFER_PARAM && buffer.kind() != planpb::BUFFER_OPTIMIZER_STATE)
      return Status::badInput(where + "buffer " + bufferLabel(rank, param.buffer()) + " has kind " +
                              planpb::BufferKind_Name(buffer.kind()) +
                              ", not BUFFER_PARAM or BUFFER_OPTIMIZER_STATE");
    if (buffer.has_alias_of())
      return Status::badInput(where + "buffer " + bufferLabel(rank, param.buffer()) + " is an alias, not its own storage");
    const planpb::Initializer& init = param.init();
    if (!isInitializerKind(init.kind()))
      return Status::badInput(where + "unknown initializer '" + init.kind() + "'");
    for (const auto& [arg_name, arg] : init.args()) {
      auto converted = fromProto(arg);
      if (!converted) return converted.status().withContext(where + "initializer argument '" + arg_name + "': ");
    }
    for (const planpb::ShardStep& step : param.shard_steps())
      if (step.dim() < 0 || step.dim() >= param.shard_offset_size() || !isBlockAxis(step.axis()))
        return Status::badInput(where + "a shard step along dim " + std::to_string(step.dim()) + " over axis '" +
                                step.axis() + "' does not fit its " + std::to_string(param.shard_offset_size()) +
                                "-dim block (axes: dp, tp)");
    int64_t bytes = bufferBytes(buffer);
    if (init.kind() == "data" && static_cast<int64_t>(init.data().size()) != bytes)
      return Status::badInput(where + "data holds " + std::to_string(init.data().size()) + " bytes, its buffer needs " +
                              std::to_string(bytes));
  }
  return Status::ok();
}

// Checks one instruction: buffer ids in range and, for kernels and copies, operand and result
// types against the op table's shape rule.
Status validateInstruction(const planpb::RankPlan& rank, const planpb::Instruction& instruction,
                           const std::string& where) {
  if (!planpb::InstructionKind_IsValid(instruction.kind()))
    return Status::badInput(where + "unknown instruction kind " + std::to_string(instruction.kind()));
  auto checkIds = [&](const auto& ids, const char* role) -> Status {
    for (int k = 0; k < ids.size(); ++k)
      if (ids[k] < 0 || ids[k] >= rank.buffers_size())
        return Status::badInput(where + role + " " + std::to_string(k) + " is buffer id " + std::to_string(ids[k]) +
                                ", out of range (the rank has " + std::to_string(rank.buffers_size()) + " buffers)");
    return Status::ok();
  };
  CLEAVE_TRY(checkIds(instruction.operands(), "operand"));
  CLEAVE_TRY(checkIds(instruction.results(), "result"));
  if (instruction.kind() == planpb::COPY) {
    if (instruction.operands_size() != 1 || instruction.results_size() != 1)
      return Status::badInput(where + "a copy takes 1 operand and 1 result, got " +
                              std::to_string(instruction.operands_size()) + " and " +
                              std::to_string(instruction.results_size()));
    const auto& from = rank.buffers(instruction.operands(0)).type();
    const auto& to = rank.buffers(instruction.results(0)).type();
    if (!sameType(from, to))
      return Status::badInput(where + "copies " + typeStr(from) + " into " + typeStr(to));
    return Status::ok();
  }
  if (!instruction.shard_axis().empty() &&
      (instruction.kind() != planpb::KERNEL || instruction.op() != "slice" ||
       !isBlockAxis(instruction.shard_axis())))
    return Status::badInput(where + "a block over axis '" + instruction.shard_axis() +
                            "' must be a slice, over dp or tp");
  if (instruction.kind() != planpb::KERNEL) return Status::ok();
  auto op = lookupOp(instruction.op());
  if (!op) return Status::badInput(where + "unknown op '" + instruction.op() + "'");
  AttrMap attrs;
  for (const auto& [attr_name, attr] : instruction.attrs()) {
    auto converted = fromProto(attr);
    if (!converted) return converted.status().withContext(where + "attribute '" + attr_name + "': ");
    attrs.emplace(attr_name, std::move(*converted));
  }
  std::vector<TensorType> operand_types;
  for (int32_t id : instruction.operands()) operand_types.push_back(*fromProto(rank.buffers(id).type()));
  auto inferred = inferResultTypes(opDef(*op), operand_types, attrs);
  if (!inferred) return inferred.status().withContext(where);
  if (static_cast<int>(inferred->size()) != instruction.results_size())
    return Status::badInput(where + "has " + std::to_string(instruction.results_size()) + " result(s), " +
                            instruction.op() + " gives " + std::to_string(inferred->size()));
  for (int r = 0; r < instruction.results_size(); ++r) {
    TensorType declared = *fromProto(rank.buffers(instruction.results(r)).type());
    if (declared != (*inferred)[r])
      return Status::badInput(where + "result " + std::to_string(r) + " is buffer " +
                              bufferLabel(rank, instruction.results(r)) + " of type " + declared.str() + ", but " +
                              instruction.op() + " gives " + (*inferred)[r].str());
  }
  return Status::ok();
}

// Simulates liveness over a program: no two storages live at the same time may share bytes.
// Storages are swept in order of their first use; the live ones are kept in a map by offset, and
// as long as they are disjoint, a new storage only needs checking against its two neighbours.
Status checkLiveStoragesDisjoint(const planpb::RankPlan& rank, const planpb::Program& program) {
  std::vector<StorageLifetime> by_first = programLifetimes(rank, program);
  std::sort(by_first.begin(), by_first.end(), [](const StorageLifetime& a, const StorageLifetime& b) {
    return a.first != b.first ? a.first < b.first : a.root < b.root;
  });
  std::vector<StorageLifetime> by_last = by_first;
  std::sort(by_last.begin(), by_last.end(),
            [](const StorageLifetime& a, const StorageLifetime& b) { return a.last < b.last; });
  std::map<int64_t, StorageLifetime> live_by_offset;
  size_t next_to_retire = 0;
  auto bytesOf = [&](int32_t root) { return bufferBytes(rank.buffers(root)); };
  auto offsetOf = [&](int32_t root) { return rank.buffers(root).offset(); };
  auto conflict = [&](const StorageLifetime& a, const StorageLifetime& b) {
    int64_t from = std::max(a.first, b.first), to = std::min(a.last, b.last);
    return Status::badInput(programLabel(program) + "buffers " + bufferLabel(rank, a.root) + " at " +
                            byteRange(offsetOf(a.root), bytesOf(a.root)) + " and " + bufferLabel(rank, b.root) +
                            " at " + byteRange(offsetOf(b.root), bytesOf(b.root)) +
                            " share bytes while both are live (times " + std::to_string(from) + ".." +
                            std::to_string(to) + "; instruction i runs at time i+1)");
  };
  for (const StorageLifetime& storage : by_first) {
    // 1. Retire storages whose last use came before this one's first.
    for (; next_to_retire < by_last.size() && by_last[next_to_retire].last < storage.first; ++next_to_retire) {
      auto it = live_by_offset.find(offsetOf(by_last[next_to_retire].root));
      if (it != live_by_offset.end() && it->second.root == by_last[next_to_retire].root) live_by_offset.erase(it);
    }
    int64_t offset = offsetOf(storage.root), bytes = bytesOf(storage.root);
    if (bytes == 0) continue;
    // 2. Compare with the live neighbours below and above its offset.
    auto above = live_by_offset.lower_bound(offset);
    if (above != live_by_offset.end() && above->first < offset + bytes) return conflict(above->second, storage);
    if (above != live_by_offset.begin()) {
      auto below = std::prev(above);
      if (below->first + bytesOf(below->second.root) > offset) return conflict(below->second, storage);
    }
    live_by_offset.emplace(offset, storage);
  }
  return Status::ok();
}

// Checks a program: named inputs and outputs, instructions, reads after writes, disjoint live storage.
Status validateProgram(const planpb::RankPlan& rank, const planpb::Program& program) {
  const std::string where = programLabel(program);
  std::vector<bool> written(rank.buffers_size(), false);
  auto checkNamed = [&](const auto& list, const char* role) -> Status {
    std::set<std::string> names;
    for (const planpb::NamedBuffer& named : list) {
      if (named.buffer() < 0 || named.buffer() >= rank.buffers_size())
        return Status::badInput(where + role + " '" + named.name() + "' names unknown buffer " +
                                std::to_string(named.buffer()) + " (the rank has " +
                                std::to_string(rank.buffers_size()) + " buffers)");
      if (!names.insert(named.name()).second)
        return Status::badInput(where + role + " '" + named.name() + "' is listed twice");
    }
    return Status::ok();
  };
  CLEAVE_TRY(checkNamed(program.inputs(), "input"));
  CLEAVE_TRY(checkNamed(program.outputs(), "output"));
  for (const auto& input : program.inputs()) written[input.buffer()] = true;
  if (program.peak_bytes() < 0 || program.peak_bytes() > rank.arena_bytes())
    return Status::badInput(where + "peak_bytes " + std::to_string(program.peak_bytes()) + " exceeds arena_bytes " +
                            std::to_string(rank.arena_bytes()));
  for (int i = 0; i < program.instructions_size(); ++i) {
    const planpb::Instruction& instruction = program.instructions(i);
    std::string at = where + "instruction " + std::to_string(i) + " (" +
                     (instruction.kind() == planpb::KERNEL ? instruction.op()
                                                           : planpb::InstructionKind_Name(instruction.kind())) +
                     (instruction.source().empty() ? "" : " from " + instruction.source()) + "): ";
    CLEAVE_TRY(validateInstruction(rank, instruction, at));
    // A buffer of its own storage must be written (or be an input) before it is read. Aliases
    // and persistent state hold values from before the program and are not tracked.
    for (int32_t id : instruction.operands()) {
      if (!written[id] && !rank.buffers(id).has_alias_of() && !isPersistentStorage(rank, id))
        return Status::badInput(at + "reads buffer " + bufferLabel(rank, id) + " before anything writes it");
    }
    for (int32_t id : instruction.results()) written[id] = true;
  }
  return checkLiveStoragesDisjoint(rank, program);
}

Status validateRank(const planpb::RankPlan& rank) {
  CLEAVE_TRY(validateBuffers(rank));
  CLEAVE_TRY(validateParameters(rank));
  if (rank.programs_size() == 0) return Status::badInput("the rank has no programs");
  std::set<std::string> names;
  for (const planpb::Program& program : rank.programs()) {
    if (program.name().empty()) return Status::badInput("a program has no name");
    if (!names.insert(program.name()).second) return Status::badInput(programLabel(program) + "defined twice");
  }
  return runParallelTasks(rank.programs_size(), [&](size_t p) { return validateProgram(rank, rank.programs(p)); });
}

std::string versionMismatch(const std::string& what, uint32_t version) {
  return what + " was written by format version " + std::to_string(version) + "; this cleave reads version " +
         std::to_string(kPlanFormatVersion);
}

std::string systemError() { return std::strerror(errno); }

}  // namespace

void toProto(const TensorType& type, planpb::TensorType* out) {
  out->Clear();
  out->set_dtype(std::string(dtypeName(type.dtype)));
  for (int64_t dim : type.shape) out->add_shape(dim);
}

Expected<TensorType> fromProto(const planpb::TensorType& type) {
  auto dtype = parseDType(type.dtype());
  if (!dtype) return Status::badInput("unknown dtype '" + type.dtype() + "'");
  TensorType result{*dtype, Shape(type.shape().begin(), type.shape().end())};
  for (int64_t dim : result.shape)
    if (dim < 0) return Status::badInput("shape " + shapeStr(result.shape) + " has a negative dimension");
  return result;
}

void toProto(const Attribute& attr, planpb::Attribute* out) {
  out->Clear();
  switch (attrKind(attr)) {
    case AttrKind::kInt: out->set_i(std::get<int64_t>(attr)); break;
    case AttrKind::kFloat: out->set_f(std::get<double>(attr)); break;
    case AttrKind::kString: out->set_s(std::get<std::string>(attr)); break;
    case AttrKind::kInts: {
      planpb::Ints* ints = out->mutable_ints();  // sets the oneof even for an empty list
      for (int64_t v : std::get<std::vector<int64_t>>(attr)) ints->add_values(v);
      break;
    }
    case AttrKind::kFloats: {
      planpb::Floats* floats = out->mutable_floats();
      for (double v : std::get<std::vector<double>>(attr)) floats->add_values(v);
      break;
    }
    case AttrKind::kTensor: {
      const auto& tensor = std::get<std::shared_ptr<const TensorData>>(attr);
      planpb::Tensor* t = out->mutable_tensor();
      if (!tensor) break;
      toProto(tensor->type, t->mutable_type());
      t->set_data(tensor->bytes.data(), tensor->bytes.size());
      break;
    }
  }
}

Expected<Attribute> fromProto(const planpb::Attribute& attr) {
  switch (attr.value_case()) {
    case planpb::Attribute::kI: return Attribute{attr.i()};
    case planpb::Attribute::kF: return Attribute{attr.f()};
    case planpb::Attribute::kS: return Attribute{attr.s()};
    case planpb::Attribute::kInts:
      return Attribute{std::vector<int64_t>(attr.ints().values().begin(), attr.ints().values().end())};
    case planpb::Attribute::kFloats:
      return Attribute{std::vector<double>(attr.floats().values().begin(), attr.floats().values().end())};
    case planpb::Attribute::kTensor: {
      CLEAVE_ASSIGN_OR_RETURN(TensorType type, fromProto(attr.tensor().type()));
      const std::string& data = attr.tensor().data();
      if (static_cast<int64_t>(data.size()) != type.bytes())
        return Status::badInput("tensor attribute of type " + type.str() + " holds " + std::to_string(data.size()) +
                                " bytes, the type needs " + std::to_string(type.bytes()));
      auto tensor = std::make_shared<TensorData>();
      tensor->type = std::move(type);
      tensor->bytes.assign(data.begin(), data.end());
      return Attribute{std::shared_ptr<const TensorData>(std::move(tensor))};
    }
    case planpb::Attribute::VALUE_NOT_SET: break;
  }
  return Status::badInput("attribute has no value");
}

void toProto(const HeldLayout& layout, planpb::Parameter* out) {
  for (int64_t d : layout.shape) out->add_model_shape(d);
  for (int64_t d : layout.parts) out->add_model_parts(d);
  out->set_model_part_axis(layout.axis);
}

HeldLayout heldLayoutOf(const planpb::Parameter& param) {
  return HeldLayout{Shape(param.model_shape().begin(), param.model_shape().end()),
                    {param.model_parts().begin(), param.model_parts().end()}, param.model_part_axis()};
}

Status validatePlan(const planpb::Plan& plan) {
  if (plan.format_version() != kPlanFormatVersion)
    return Status::badInput(versionMismatch("plan", plan.format_version()));
  if (plan.devices() < 1) return Status::badInput("plan has " + std::to_string(plan.devices()) + " devices");
  const planpb::Strategy& strategy = plan.strategy();
  if (strategy.dp() < 1 || strategy.tp() < 1 || strategy.pp() < 1 || strategy.microbatches() < 1)
    return Status::badInput("strategy dp=" + std::to_string(strategy.dp()) + " tp=" + std::to_string(strategy.tp()) +
                            " pp=" + std::to_string(strategy.pp()) + " microbatches=" +
                            std::to_string(strategy.microbatches()) + " has a value below 1");
  if (static_cast<int64_t>(strategy.dp()) * strategy.tp() * strategy.pp() != plan.devices())
    return Status::badInput("strategy dp*tp*pp = " +
                            std::to_string(static_cast<int64_t>(strategy.dp()) * strategy.tp() * strategy.pp()) +
                            " differs from the plan's " + std::to_string(plan.devices()) + " devices");
  if (plan.ranks_size() != plan.devices())
    return Status::badInput("plan for " + std::to_string(plan.devices()) + " devices has " +
                            std::to_string(plan.ranks_size()) + " rank plans");
  std::vector<bool> seen(plan.devices(), false);
  std::vector<const planpb::RankPlan*> holding_programs;
  for (const planpb::RankPlan& rank : plan.ranks()) {
    std::string where = "rank " + std::to_string(rank.rank()) + ": ";
    if (rank.rank() < 0 || rank.rank() >= plan.devices())
      return Status::badInput(where + "rank number out of range [0," + std::to_string(plan.devices()) + ")");
    if (seen[rank.rank()]) return Status::badInput(where + "appears twice");
    seen[rank.rank()] = true;
    if (!isSharedRank(rank)) holding_programs.push_back(&rank);
  }
  CLEAVE_TRY(runParallelTasks(holding_programs.size(), [&](size_t i) {
    return validateRank(*holding_programs[i]).withContext("rank " + std::to_string(holding_programs[i]->rank()) + ": ");
  }));
  return validateSharedPrograms(plan);
}

Expected<std::unique_ptr<planpb::Plan>> readPlanFile(const std::string& path, SharedRanks shared) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::badInput(path + ": cannot open plan file: " + systemError());
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::badInput(path + ": cannot read plan file: " + systemError());
  if (contents.size() < kPlanMagicSize || contents.compare(0, kPlanMagicSize, kPlanMagic) != 0)
    return Status::badInput(path + ": not a cleave plan (it does not start with the CLVPLAN header)");
  if (contents.size() - kPlanMagicSize > static_cast<size_t>(INT_MAX))
    return Status::badInput(path + ": plan file is larger than the 2 GiB protobuf limit");
  auto plan = std::make_unique<planpb::Plan>();
  google::protobuf::LogSilencer silence_protobuf;  // our message says what is wrong, not protobuf's log
  if (!plan->ParseFromArray(contents.data() + kPlanMagicSize, static_cast<int>(contents.size() - kPlanMagicSize)))
    return Status::badInput(path + ": plan file is truncated or corrupt (its protobuf does not parse)");
  if (plan->format_version() == 0)  // every writer sets it: the plan's fields are missing
    return Status::badInput(path + ": plan file is truncated or corrupt (it has no format version)");
  if (plan->format_version() != kPlanFormatVersion)
    return Status::badInput(versionMismatch(path, plan->format_version()));
  CLEAVE_TRY(validatePlan(*plan).withContext(path + ": "));
  if (shared == SharedRanks::kDerive) CLEAVE_TRY(expandSharedPrograms(*plan).withContext(path + ": "));
  return plan;
}

Status writePlanFile(const planpb::Plan& plan, const std::string& path) {
  // 1. Serialize deterministically (map entries sorted), so equal plans give equal files.
  std::string bytes(kPlanMagic, kPlanMagicSize);
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    if (!plan.SerializeToCodedStream(&coded))
      return Status::internal(path + ": cannot serialize the plan (is it over 2 GiB?)");
  }
  // 2. Write a temporary file next to PATH and flush it to disk.
  const std::string temp_path = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::badInput(path + ": cannot write plan file: " + systemError());
  auto fail = [&](const std::string& what) {
    std::string message = path + ": cannot write plan file: " + what + ": " + systemError();
    if (fd >= 0) ::close(fd);
    ::unlink(temp_path.c_str());
    return Status::badInput(message);
  };
  for (size_t done = 0; done < bytes.size();) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("write");
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return fail("fsync");
  int close_result = ::close(fd);
  fd = -1;
  if (close_result != 0) return fail("close");
  // 3. Rename over PATH: readers see the old file or the whole new one, never a partial one.
  if (::rename(temp_path.c_str(), path.c_str()) != 0) return fail("rename");
  return Status::ok();
}

}  // namespace cleave
