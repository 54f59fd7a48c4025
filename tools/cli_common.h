// Helpers every cleave subcommand shares: error reporting and writing output.
#pragma once

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "ir/status.h"

namespace cleave::cli {

// Prints `<tool>: error: <message>` on stderr and returns the status's exit code.
inline int reportError(const Status& status, const char* tool = "cleave") {
  std::cerr << tool << ": error: " << status.message() << "\n";
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
