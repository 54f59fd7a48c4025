// The key=value items of command-line specs ("adamw:lr=1e-3,wd=0.01", "cosine:warmup=10,total=100").
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/status.h"

namespace cleave {

// One key=value item of a spec.
struct SpecItem {
  std::string_view key;
  std::string_view value;
};

// Splits `items` (the part of a spec after "name:") at ',' or ';' (pass pipelines use ',' between
// pass options) into key=value pairs, each key at most once. An item without a key and '=', or a key
// given twice, is the error `problem` makes of its description.
Expected<std::vector<SpecItem>> splitSpecItems(std::string_view items,
                                               const std::function<Status(const std::string& problem)>& problem);

// `value` as a finite number; nullopt when it is not one (or has trailing characters).
std::optional<double> parseFiniteNumber(std::string_view value);

}  // namespace cleave
