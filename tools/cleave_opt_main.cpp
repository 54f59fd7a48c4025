// cleave-opt: runs named passes over a .cir file and prints the resulting graph (drives the pass lit tests).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "ir/op_table.h"
#include "ir/status.h"
#include "ir/text_format.h"
#include "ir/verifier.h"
#include "passes/core/pass_manager.h"
#include "tools/allocator_tuning.h"
#include "tools/cli_common.h"

namespace cleave {
namespace {

using cli::writeOutput;

constexpr const char* kSplitMarker = "// -----";

struct OptFlags {
  std::string input;  // a .cir path, or "-" for stdin
  std::string passes;
  std::string output;  // empty: stdout
  bool print_after_all = false;
  bool split_input_file = false;
  bool list_passes = false;
};

// Prints `cleave-opt: error: <message>` and returns the status's exit code.
int reportError(const Status& status) { return cli::reportError(status, "cleave-opt"); }

Expected<std::string> readInput(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  std::ifstream file(path, std::ios::binary);
  if (!file) return Status::badInput("cannot read '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// One piece of the input and the line of the file it starts on.
struct InputChunk {
  std::string text;
  int first_line = 1;
};

// Splits `text` at lines that are exactly "// -----" (--split-input-file); the marker lines belong
// to no chunk.
std::vector<InputChunk> splitInput(const std::string& text) {
  std::vector<InputChunk> chunks(1);
  std::istringstream lines(text);
  std::string line;
  int line_number = 0;
  while (std::getline(lines, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == kSplitMarker) {
      chunks.push_back(InputChunk{"", line_number + 1});
      continue;
    }
    chunks.back().text += line + "\n";
  }
  return chunks;
}

// Parses and verifies one chunk, runs the pipeline over it and returns the printed graph.
Expected<std::string> processChunk(const InputChunk& chunk, const std::string& file_name, const PassManager& passes) {
  CLEAVE_ASSIGN_OR_RETURN(Graph graph, parseGraph(chunk.text, file_name, chunk.first_line));
  CLEAVE_TRY(verifyGraph(graph));
  CLEAVE_TRY(passes.run(graph));
  return printGraph(graph);
}

std::string optionDefaultText(const PassOptionValue& value) {
  if (const auto* integer = std::get_if<int64_t>(&value)) return std::to_string(*integer);
  if (const auto* number = std::get_if<double>(&value)) {
    std::ostringstream text;
    text << *number;
    return text.str();
  }
  return std::get<std::string>(value);
}

// The --list-passes text: each pass with its summary, then its options with defaults.
std::string listPasses() {
  size_t width = 0;
  for (const PassInfo& pass : allPasses()) width = std::max(width, pass.name.size());
  std::string text = "Passes (use as --passes=a,b{option=value},c):\n";
  for (const PassInfo& pass : allPasses()) {
    text += "  " + pass.name + std::string(width - pass.name.size() + 2, ' ') + pass.summary + "\n";
    for (const PassOptionSpec& option : pass.options)
      text += "      " + option.name + "=" + optionDefaultText(option.default_value) + "  " + option.help + "\n";
  }
  return text;
}

int runOpt(const OptFlags& flags) {
  if (flags.list_passes) {
    Status written = writeOutput(flags.output, listPasses());
    return written.isOk() ? 0 : reportError(written);
  }
  if (flags.input.empty()) return reportError(Status::usage("no input file (give FILE.cir, or - for stdin)"));
  // 1. The pipeline first: a bad --passes is a usage error before any input is read.
  auto pipeline = parsePipeline(flags.passes);
  if (!pipeline) return reportError(pipeline.status());
  PassManager passes(std::move(*pipeline));
  if (flags.print_after_all)
    passes.setAfterPassCallback([](const PassInfo& pass, const Graph& graph) {
      std::cerr << "// -----// IR dump after " << pass.name << " //----- //\n" << printGraph(graph);
    });
  // 2. Each chunk is processed on its own; a failing chunk reports and the next one still runs.
  auto text = readInput(flags.input);
  if (!text) return reportError(text.status());
  const std::string file_name = flags.input == "-" ? "<stdin>" : flags.input;
  const std::vector<InputChunk> chunks =
      flags.split_input_file ? splitInput(*text) : std::vector<InputChunk>{InputChunk{*text, 1}};
  std::string printed;
  int exit_code = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (i > 0) printed += std::string(kSplitMarker) + "\n";
    auto result = processChunk(chunks[i], file_name, passes);
    if (result) {
      printed += *result;
    } else {
      const int code = reportError(result.status());
      if (exit_code == 0) exit_code = code;
    }
  }
  // 3. Print what succeeded, even when some chunk failed.
  Status written = writeOutput(flags.output, printed);
  if (!written) return reportError(written);
  return exit_code;
}

int runCli(int argc, char** argv) {
  CLI::App app("cleave-opt: run cleave passes over a .cir graph and print the result.", "cleave-opt");
  app.footer("Exit codes: 0 ok, 1 bad input, 2 usage, 4 internal error.");
  OptFlags flags;
  app.add_option("FILE", flags.input, "Input .cir file ('-' reads stdin)");
  app.add_option("--passes", flags.passes, "Pipeline, e.g. dce,cse or 'infer-shapes{batch=8},fold-constants'");
  app.add_flag("--print-after-all", flags.print_after_all, "Print the graph to stderr after each pass");
  app.add_flag("--split-input-file", flags.split_input_file,
               "Process each '// -----'-separated chunk of FILE on its own");
  app.add_flag("--list-passes", flags.list_passes, "List the passes and their options, then exit");
  app.add_option("-o,--output", flags.output, "Write the result to this file instead of stdout");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help
    std::cerr << "cleave-opt: error: " << e.what() << "\nRun 'cleave-opt --help' for usage.\n";
    return static_cast<int>(ErrorKind::kUsage);
  }
  return runOpt(flags);
}

}  // namespace
}  // namespace cleave

int main(int argc, char** argv) {
  cleave::cli::createAllocatorArenas();  // before any thread starts (tools/allocator_tuning.h)
  try {
    // A broken op table is a build bug: say so before any command trusts it.
    if (cleave::Status table = cleave::opTableStatus(); !table.isOk()) {
      std::cerr << "cleave-opt: internal error: " << table.message() << "\n";
      return static_cast<int>(cleave::ErrorKind::kInternal);
    }
    return cleave::runCli(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "cleave-opt: internal error: " << e.what() << "\n";
    return static_cast<int>(cleave::ErrorKind::kInternal);
  }
}
