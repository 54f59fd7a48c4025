// Cluster specs as JSON: a strict reader (unknown keys and wrong kinds are errors), a writer, and --cluster resolution.
#include "analysis/cluster_json.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ir/op_table.h"

namespace cleave {
namespace {

using Json = nlohmann::json;

// Reads one JSON object's keys, remembering the first error; `path` names the object ("device").
class ObjectReader {
 public:
  ObjectReader(const Json& object, std::string path, Status& status) : object_(object), path_(std::move(path)), status_(status) {
    if (status_.isOk() && !object_.is_object()) fail(path_.empty() ? "the spec" : path_, "must be a JSON object");
  }

  // A string at `key`; `fallback` when absent and not required.
  std::string string(const char* key, bool required, std::string fallback = "") {
    const Json* value = find(key, required);
    if (!value) return fallback;
    if (!value->is_string()) return fail(keyPath(key), "must be a string"), fallback;
    return value->get<std::string>();
  }

  // A number >= `minimum` at `key` (> 0 when `positive`).
  double number(const char* key, bool required, double fallback, bool positive) {
    const Json* value = find(key, required);
    if (!value) return fallback;
    if (!value->is_number()) return fail(keyPath(key), "must be a number"), fallback;
    double number = value->get<double>();
    if (!std::isfinite(number) || number < 0 || (positive && number == 0))
      return fail(keyPath(key), positive ? "must be a positive number" : "must be a number >= 0"), fallback;
    return number;
  }

  // An integer in [1, limit] at `key`.
  int64_t count(const char* key, bool required, int64_t fallback, int64_t limit) {
    const Json* value = find(key, required);
    if (!value) return fallback;
    if (!value->is_number_integer() || value->get<int64_t>() < 1 || value->get<int64_t>() > limit)
      return fail(keyPath(key), "must be an integer in [1, " + std::to_string(limit) + "]"), fallback;
    return value->get<int64_t>();
  }

  // The object at `key` (nullptr when absent and not required).
  const Json* object(const char* key, bool required) { return find(key, required); }

  // Fails on keys other than `known`.
  void onlyKeys(std::initializer_list<const char*> known) {
    if (!status_.isOk() || !object_.is_object()) return;
    for (const auto& [key, value] : object_.items()) {
      bool listed = false;
      for (const char* name : known) listed = listed || key == name;
      if (listed) continue;
      std::string names;
      for (const char* name : known) names += (names.empty() ? "" : ", ") + std::string(name);
      fail(keyPath(key), "unknown key (known: " + names + ")");
      return;
    }
  }

  std::string keyPath(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  void fail(const std::string& where, const std::string& what) {
    if (status_.isOk()) status_ = Status::badInput(where + ": " + what);
  }

 private:
  const Json* find(const char* key, bool required) {
    if (!status_.isOk() || !object_.is_object()) return nullptr;
    auto found = object_.find(key);
    if (found == object_.end()) {
      if (required) fail(keyPath(key), "missing");
      return nullptr;
    }
    return &*found;
  }

  const Json& object_;
  std::string path_;
  Status& status_;
};

LinkSpec readLink(const Json& json, const std::string& path, Status& status) {
  ObjectReader reader(json, path, status);
  reader.onlyKeys({"name", "bandwidth", "latency"});
  LinkSpec link;
  link.name = reader.string("name", false, path);
  link.bandwidth = reader.number("bandwidth", true, 0, true);
  link.latency = reader.number("latency", true, 0, false);
  return link;
}

DeviceSpec readDevice(const Json& json, Status& status) {
  ObjectReader reader(json, "device", status);
  reader.onlyKeys({"name", "peak_flops", "memory_bandwidth", "memory_bytes", "kernel_overhead_s", "cache_bytes",
                   "cache_bandwidth", "kernel_efficiency"});
  DeviceSpec device;
  device.name = reader.string("name", false, "device");
  if (const Json* peaks = reader.object("peak_flops", true)) {
    ObjectReader peak_reader(*peaks, "device.peak_flops", status);
    if (status.isOk()) {
      for (const auto& [dtype_name, value] : peaks->items()) {
        std::optional<DType> dtype = parseDType(dtype_name);
        if (!dtype || !isFloat(*dtype)) {
          peak_reader.fail(peak_reader.keyPath(dtype_name), "unknown float dtype (expected f32, f16, bf16 or f64)");
          break;
        }
        device.peak_flops[*dtype] = peak_reader.number(dtype_name.c_str(), true, 0, true);
      }
      if (status.isOk() && !device.peak_flops.count(DType::kF32))
        peak_reader.fail("device.peak_flops.f32", "missing (the figure of every dtype not listed)");
    }
  }
  device.memory_bandwidth = reader.number("memory_bandwidth", true, 0, true);
  double memory = reader.number("memory_bytes", true, 0, true);
  if (memory > 9.0e18) reader.fail("device.memory_bytes", "is too large");
  device.memory_bytes = static_cast<int64_t>(memory);
  device.kernel_overhead_s = reader.number("kernel_overhead_s", false, 0, false);
  double cache = reader.number("cache_bytes", false, 0, false);
  if (cache > 9.0e18) reader.fail("device.cache_bytes", "is too large");
  device.cache_bytes = static_cast<int64_t>(cache);
  device.cache_bandwidth = reader.number("cache_bandwidth", false, 0, false);
  if ((device.cache_bytes > 0) != (device.cache_bandwidth > 0))
    reader.fail("device.cache_bytes", "and device.cache_bandwidth go together: both above 0, or neither");
  if (const Json* efficiencies = reader.object("kernel_efficiency", false)) {
    ObjectReader efficiency_reader(*efficiencies, "device.kernel_efficiency", status);
    if (status.isOk()) {
      for (const auto& [op_name, value] : efficiencies->items()) {
        std::optional<OpId> op = lookupOp(op_name);
        if (!op) {
          efficiency_reader.fail(efficiency_reader.keyPath(op_name), "unknown op");
          break;
        }
        device.kernel_efficiency[*op] = efficiency_reader.number(op_name.c_str(), true, 1, true);
      }
    }
  }
  return device;
}

nlohmann::ordered_json linkJson(const LinkSpec& link) {
  return nlohmann::ordered_json{{"name", link.name}, {"bandwidth", link.bandwidth}, {"latency", link.latency}};
}

}  // namespace

Expected<ClusterSpec> clusterFromJson(std::string_view text, std::string_view where) {
  const std::string prefix = std::string(where) + ": ";
  Json json = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return Status::badInput(prefix + "not valid JSON");
  Status status;
  ObjectReader reader(json, "", status);
  reader.onlyKeys({"name", "description", "hosts", "devices_per_host", "device", "intra_host", "inter_host"});
  ClusterSpec cluster;
  cluster.name = reader.string("name", true);
  reader.string("description", false);
  cluster.hosts = static_cast<int>(reader.count("hosts", false, 1, 1 << 20));
  cluster.devices_per_host = static_cast<int>(reader.count("devices_per_host", false, 1, 1 << 20));
  if (const Json* device = reader.object("device", true)) cluster.device = readDevice(*device, status);
  if (const Json* intra = reader.object("intra_host", true)) cluster.intra_host = readLink(*intra, "intra_host", status);
  const Json* inter = reader.object("inter_host", false);
  cluster.inter_host = inter ? readLink(*inter, "inter_host", status) : cluster.intra_host;
  if (!status) return status.withContext(prefix);
  return cluster;
}

std::string clusterToJson(const ClusterSpec& cluster) {
  nlohmann::ordered_json peaks = nlohmann::ordered_json::object();
  for (const auto& [dtype, flops] : cluster.device.peak_flops) peaks[std::string(dtypeName(dtype))] = flops;
  nlohmann::ordered_json json;
  json["name"] = cluster.name;
  json["hosts"] = cluster.hosts;
  json["devices_per_host"] = cluster.devices_per_host;
  nlohmann::ordered_json device = {{"name", cluster.device.name},
                                    {"peak_flops", peaks},
                                    {"memory_bandwidth", cluster.device.memory_bandwidth},
                                    {"memory_bytes", cluster.device.memory_bytes},
                                    {"kernel_overhead_s", cluster.device.kernel_overhead_s}};
  if (cluster.device.cache_bytes > 0) {
    device["cache_bytes"] = cluster.device.cache_bytes;
    device["cache_bandwidth"] = cluster.device.cache_bandwidth;
  }
  if (!cluster.device.kernel_efficiency.empty()) {
    nlohmann::ordered_json efficiencies = nlohmann::ordered_json::object();
    for (const auto& [op, efficiency] : cluster.device.kernel_efficiency) efficiencies[std::string(opName(op))] = efficiency;
    device["kernel_efficiency"] = efficiencies;
  }
  json["device"] = device;
  json["intra_host"] = linkJson(cluster.intra_host);
  json["inter_host"] = linkJson(cluster.inter_host);
  return json.dump(2) + "\n";
}

Expected<ClusterSpec> loadCluster(std::string_view name_or_file) {
  const std::string spec(name_or_file);
  bool is_file = spec.find('/') != std::string::npos ||
                 (spec.size() >= 5 && spec.compare(spec.size() - 5, 5, ".json") == 0);
  if (!is_file) return builtinCluster(spec);
  std::ifstream file(spec, std::ios::binary);
  if (!file) return Status::badInput("cannot read cluster spec '" + spec + "': " + std::strerror(errno));
  std::ostringstream text;
  text << file.rdbuf();
  return clusterFromJson(text.str(), spec);
}

}  // namespace cleave
