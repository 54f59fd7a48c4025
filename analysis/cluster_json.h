// Cluster specs as JSON: reading, writing, and resolving `--cluster NAME|FILE.json` (docs/cost-model.md).
#pragma once

#include <string>
#include <string_view>

#include "ir/status.h"
#include "analysis/cost_model.h"

namespace cleave {

// Parses a cluster spec from JSON text (schema in docs/cost-model.md). `where` (a file name)
// starts every error message, which names the key at fault: "c.json: device.peak_flops.fp32: unknown dtype".
Expected<ClusterSpec> clusterFromJson(std::string_view text, std::string_view where);

// The JSON text of `cluster` (clusterFromJson reads it back to the same spec), indented, ending in a newline.
std::string clusterToJson(const ClusterSpec& cluster);

// The cluster a `--cluster` flag names: a JSON file when `name_or_file` ends in ".json" or contains
// a '/', else a built-in name (builtinCluster, NAMExH included). Errors are kBadInput.
Expected<ClusterSpec> loadCluster(std::string_view name_or_file);

}  // namespace cleave
