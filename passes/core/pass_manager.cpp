// Pass manager: the pass registry, pass options, the pipeline parser and the run loop.
#include "passes/core/pass_manager.h"

#include <algorithm>
#include <charconv>

#include "ir/verifier.h"

namespace cleave {
namespace {

struct PassRegistry {
  std::vector<PassInfo> passes;  // sorted by name
  Status problem;                // kInternal when the registry itself is wrong (a build bug)

  PassRegistry() {
    passes = {
#define CLEAVE_PASS(Name) make##Name##Pass(),
#include "passes/core/pass_list.def"
#undef CLEAVE_PASS
    };
    std::sort(passes.begin(), passes.end(), [](const PassInfo& a, const PassInfo& b) { return a.name < b.name; });
    // A name registered twice, or a pass without a body, is a build bug: parsing and running
    // pipelines report it.
    for (size_t i = 0; i < passes.size() && problem.isOk(); ++i) {
      if (!passes[i].run) problem = Status::internal("pass '" + passes[i].name + "' has no run function");
      if (i > 0 && passes[i].name == passes[i - 1].name)
        problem = Status::internal("pass '" + passes[i].name + "' is registered twice");
    }
  }
};

const PassRegistry& registry() {
  static const PassRegistry instance;
  return instance;
}

std::string passNames() {
  std::string names;
  for (const PassInfo& pass : allPasses()) names += (names.empty() ? "" : ", ") + pass.name;
  return names;
}

const char* kindDescription(const PassOptionValue& value) {
  switch (value.index()) {
    case 0: return "an integer";
    case 1: return "a number";
    default: return "a string";
  }
}

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

// A small hand-written reader for one pipeline string; errors quote the pipeline and a column.
class PipelineParser {
 public:
  explicit PipelineParser(std::string_view text) : text_(text) {}

  Expected<Pipeline> parse() {
    Pipeline pipeline;
    skipSpaces();
    if (atEnd()) return pipeline;  // an empty pipeline only parses and verifies
    for (;;) {
      CLEAVE_ASSIGN_OR_RETURN(PassStep step, parseStep());
      pipeline.push_back(std::move(step));
      skipSpaces();
      if (atEnd()) return pipeline;
      if (text_[pos_] != ',') return syntaxError("expected ',' or '{' after pass '" + pipeline.back().pass->name + "'");
      ++pos_;
    }
  }

 private:
  // step := name ( '{' (option ((' ' | ',') option)*)? '}' )?
  Expected<PassStep> parseStep() {
    skipSpaces();
    const std::string name = readName();
    if (name.empty()) return syntaxError("expected a pass name");
    const PassInfo* pass = findPass(name);
    if (!pass) return Status::usage("unknown pass '" + name + "' (passes: " + passNames() + ")");
    PassStep step{pass, PassOptions::defaultsFor(*pass)};
    skipSpaces();
    if (!atEnd() && text_[pos_] == '{') {
      ++pos_;
      CLEAVE_TRY(parseOptions(*pass, step.options));
    }
    if (pass->check_options) CLEAVE_TRY(pass->check_options(step.options));
    return step;
  }

  // The options inside '{...}', up to and including the '}'.
  Status parseOptions(const PassInfo& pass, PassOptions& options) {
    for (;;) {
      while (!atEnd() && (text_[pos_] == ' ' || text_[pos_] == ',')) ++pos_;
      if (atEnd()) return syntaxError("missing '}' after the options of pass '" + pass.name + "'");
      if (text_[pos_] == '}') {
        ++pos_;
        return Status::ok();
      }
      CLEAVE_TRY(parseOption(pass, options));
    }
  }

  // option := name '=' value, the value running to the next space, ',' or '}'.
  Status parseOption(const PassInfo& pass, PassOptions& options) {
    const std::string key = readName();
    if (key.empty()) return syntaxError("expected an option name");
    if (atEnd() || text_[pos_] != '=') return syntaxError("expected '=' after option '" + key + "'");
    ++pos_;
    const size_t start = pos_;
    while (!atEnd() && text_[pos_] != ' ' && text_[pos_] != ',' && text_[pos_] != '}' && text_[pos_] != '{') ++pos_;
    if (pos_ == start) return syntaxError("option '" + key + "' has no value");
    return options.setFromText(pass, key, text_.substr(start, pos_ - start));
  }

  std::string readName() {
    const size_t start = pos_;
    while (!atEnd() && isNameChar(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }
  void skipSpaces() {
    while (!atEnd() && text_[pos_] == ' ') ++pos_;
  }
  bool atEnd() const { return pos_ >= text_.size(); }
  Status syntaxError(const std::string& what) const {
    return Status::usage("bad pass pipeline '" + std::string(text_) + "': " + what + " at column " +
                         std::to_string(pos_ + 1));
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

const PassOptionSpec* PassInfo::findOption(std::string_view option_name) const {
  for (const auto& spec : options)
    if (spec.name == option_name) return &spec;
  return nullptr;
}

PassOptions PassOptions::defaultsFor(const PassInfo& pass) {
  PassOptions options;
  for (const auto& spec : pass.options) options.values_.emplace(spec.name, spec.default_value);
  return options;
}

Status PassOptions::setFromText(const PassInfo& pass, std::string_view name, std::string_view text) {
  const PassOptionSpec* spec = pass.findOption(name);
  if (!spec) {
    std::string known;
    for (const auto& s : pass.options) known += (known.empty() ? "" : ", ") + s.name;
    return Status::usage("pass '" + pass.name + "' has no option '" + std::string(name) + "'" +
                         (known.empty() ? " (it takes none)" : " (options: " + known + ")"));
  }
  const char* first = text.data();
  const char* last = text.data() + text.size();
  PassOptionValue value = spec->default_value;
  bool fits = true;
  if (auto* integer = std::get_if<int64_t>(&value)) {
    auto [end, error] = std::from_chars(first, last, *integer);
    fits = error == std::errc() && end == last;
  } else if (auto* number = std::get_if<double>(&value)) {
    auto [end, error] = std::from_chars(first, last, *number);
    fits = error == std::errc() && end == last;
  } else {
    value = std::string(text);
  }
  if (!fits)
    return Status::usage("pass '" + pass.name + "' option '" + spec->name + "' needs " +
                         kindDescription(spec->default_value) + ", got '" + std::string(text) + "'");
  values_.insert_or_assign(spec->name, std::move(value));
  return Status::ok();
}

// The option's value, or (recording the misuse) a zero value when the pass does not declare it as a T.
template <class T>
const T& PassOptions::get(std::string_view name, const char* kind) const {
  static const T kZero{};
  auto it = values_.find(name);
  const T* value = it == values_.end() ? nullptr : std::get_if<T>(&it->second);
  if (value) return *value;
  if (misuse_.isOk())
    misuse_ = Status::internal("pass option '" + std::string(name) + "' " +
                               (it == values_.end() ? std::string("is not declared by its pass") : "is not " + std::string(kind)));
  return kZero;
}

int64_t PassOptions::getInt(std::string_view name) const { return get<int64_t>(name, "an integer"); }

double PassOptions::getFloat(std::string_view name) const { return get<double>(name, "a number"); }

const std::string& PassOptions::getString(std::string_view name) const { return get<std::string>(name, "a string"); }

std::span<const PassInfo> allPasses() { return registry().passes; }

const PassInfo* findPass(std::string_view name) {
  for (const PassInfo& pass : allPasses())
    if (pass.name == name) return &pass;
  return nullptr;
}

std::vector<std::string> optionList(const std::string& text) {
  std::vector<std::string> items;
  for (size_t start = 0;;) {
    const size_t bar = text.find('|', start);
    items.push_back(text.substr(start, bar == std::string::npos ? std::string::npos : bar - start));
    if (bar == std::string::npos) return items;
    start = bar + 1;
  }
}

Expected<Pipeline> parsePipeline(std::string_view text) {
  CLEAVE_TRY(registry().problem);
  return PipelineParser(text).parse();
}

Status PassManager::run(Graph& graph) const {
  CLEAVE_TRY(registry().problem);
  for (const PassStep& step : pipeline_) {
    Status ran = step.pass->run(graph, step.options);
    if (!step.options.misuse().isOk()) return step.options.misuse().withContext("pass '" + step.pass->name + "': ");
    CLEAVE_TRY(ran);
    Status valid = verifyGraph(graph);
    if (!valid) return Status::internal("pass '" + step.pass->name + "' left an invalid graph: " + valid.message());
    if (after_pass_) after_pass_(*step.pass, graph);
  }
  return Status::ok();
}

}  // namespace cleave
