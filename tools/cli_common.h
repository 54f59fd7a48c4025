// Helpers every cleave subcommand shares: error reporting and writing output.
#pragma once

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "ir/status.h"

namespace cleave::cli {

// The command whose `--help` a usage error points at ("cleave run"); the CLI sets it once the
// command line is parsed.
inline std::string& usageCommand() {
  static std::string command = "cleave";
  return command;
}

// Prints `<tool>: error: <message>` on stderr, and for a usage error the line pointing at the
// command's --help (docs/errors.md); returns the status's exit code.
inline int reportError(const Status& status, const std::string& tool = "cleave") {
  std::cerr << tool << ": error: " << status.message() << "\n";
  if (status.kind() == ErrorKind::kUsage)
    std::cerr << "Run '" << (tool == "cleave" ? usageCommand() : tool) << " --help' for usage.\n";
  return status.exitCode();
}

inline bool endsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Writes `text` to `path`, or to stdout when `path` is empty or "-".
inline Status writeOutput(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::cout << text;
    std::cout.flush();
    return std::cout ? Status::ok() : Status::runtime("cannot write to standard output");
  }
  std::ofstream file(path, std::ios::binary);
  if (file) file << text;
  if (file) file.close();
  if (!file) return Status::badInput("cannot write '" + path + "': " + std::strerror(errno));
  return Status::ok();
}

}  // namespace cleave::cli
