// Pass manager: the registry of passes, pipeline parsing ("a,b{opt=1},c") and running a pipeline.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// The value of one pass option: an integer, a float or a string.
using PassOptionValue = std::variant<int64_t, double, std::string>;

// One option a pass accepts; the default's alternative is the option's kind.
struct PassOptionSpec {
  std::string name;
  PassOptionValue default_value;
  std::string help;
};

class PassOptions;

// A pass: rewrites the graph in place; an error names the node at fault.
using PassFn = Status (*)(Graph& graph, const PassOptions& options);

// Everything the registry knows about one pass.
struct PassInfo {
  std::string name;  // the flag name used in pipelines, e.g. "fold-constants"
  std::string summary;
  std::vector<PassOptionSpec> options;
  PassFn run = nullptr;
  // Rejects option values the pass cannot use (a usage error); run when the pipeline is parsed.
  Status (*check_options)(const PassOptions& options) = nullptr;

  const PassOptionSpec* findOption(std::string_view option_name) const;
};

// The option values one pass runs with: every option the pass declares, given or defaulted.
class PassOptions {
 public:
  PassOptions() = default;
  // Every option of `pass` at its default.
  static PassOptions defaultsFor(const PassInfo& pass);
  // Sets option `name` from its text form; a usage error when `pass` has no such option or the
  // text is not a value of the option's kind.
  Status setFromText(const PassInfo& pass, std::string_view name, std::string_view text);

  // Typed accessors. Asking for an option the pass does not declare, or as another kind, is a bug:
  // the accessor gives 0 (or "") and records it in misuse(), which PassManager::run reports.
  int64_t getInt(std::string_view name) const;
  double getFloat(std::string_view name) const;
  const std::string& getString(std::string_view name) const;
  // Ok, or kInternal naming the first option a pass asked for wrongly.
  const Status& misuse() const { return misuse_; }

 private:
  template <class T>
  const T& get(std::string_view name, const char* kind) const;
  std::map<std::string, PassOptionValue, std::less<>> values_;
  mutable Status misuse_;
};

// The factory of each registered pass (makeDcePass, ...), one per line of passes/core/pass_list.def;
// each is defined in its pass's file.
#define CLEAVE_PASS(Name) PassInfo make##Name##Pass();
#include "passes/core/pass_list.def"
#undef CLEAVE_PASS

// Every registered pass (from passes/core/pass_list.def), sorted by name.
std::span<const PassInfo> allPasses();
// The pass named `name`, or nullptr.
const PassInfo* findPass(std::string_view name);

// One pass of a pipeline with the options it runs with.
struct PassStep {
  const PassInfo* pass = nullptr;
  PassOptions options;
};
using Pipeline = std::vector<PassStep>;

// The items of a list-valued string option, separated by '|' ("a.*|b" -> {"a.*", "b"}; "" -> {""}):
// spaces and commas end an option's value, so lists use bars.
std::vector<std::string> optionList(const std::string& text);

// Parses "a,b{opt=1 other=x},c" (options separated by spaces or commas). An unknown pass or
// option, a value of the wrong kind or one the pass's check_options rejects is a usage error;
// unknown names come with the list of valid ones.
Expected<Pipeline> parsePipeline(std::string_view text);

// Runs a pipeline, verifying the graph after each pass.
class PassManager {
 public:
  // Called after each pass that succeeded and left a valid graph (e.g. for --print-after-all).
  using AfterPassCallback = std::function<void(const PassInfo& pass, const Graph& graph)>;

  explicit PassManager(Pipeline pipeline) : pipeline_(std::move(pipeline)) {}
  void setAfterPassCallback(AfterPassCallback callback) { after_pass_ = std::move(callback); }

  // Runs every pass in order and stops at the first error. A pass that leaves a graph the
  // verifier rejects, or asks for an option it does not declare, is an internal error naming the
  // pass; so is a registry that is wrong (a pass registered twice or without a body).
  Status run(Graph& graph) const;

 private:
  Pipeline pipeline_;
  AfterPassCallback after_pass_;
};

}  // namespace cleave
