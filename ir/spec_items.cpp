// The key=value items of command-line specs: splitting and numbers.
#include "ir/spec_items.h"

#include <charconv>
#include <cmath>
#include <set>

namespace cleave {

Expected<std::vector<SpecItem>> splitSpecItems(std::string_view items,
                                               const std::function<Status(const std::string& problem)>& problem) {
  std::vector<SpecItem> result;
  std::set<std::string_view> seen;
  while (!items.empty()) {
    size_t end = items.find_first_of(",;");
    std::string_view item = items.substr(0, end);
    items = end == std::string_view::npos ? std::string_view() : items.substr(end + 1);
    size_t equals = item.find('=');
    if (equals == std::string_view::npos || equals == 0) return problem("expected key=value, got '" + std::string(item) + "'");
    SpecItem pair{item.substr(0, equals), item.substr(equals + 1)};
    if (!seen.insert(pair.key).second) return problem("'" + std::string(pair.key) + "' is given twice");
    result.push_back(pair);
  }
  return result;
}

std::optional<double> parseFiniteNumber(std::string_view value) {
  double number = 0;
  auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
  if (error != std::errc() || end != value.data() + value.size() || !std::isfinite(number)) return std::nullopt;
  return number;
}

}  // namespace cleave
