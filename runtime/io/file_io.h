// File I/O: whole-file reads and atomic writes (temporary file, fsync, rename), errors naming the file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "ir/status.h"

namespace cleave::runtime {

// Appends bytes to a file being written; every error names the file.
class FileWriter {
 public:
  FileWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  // Writes all `bytes` bytes (retrying short writes); kRuntime on failure.
  Status write(const void* data, int64_t bytes);
  // Writes all of `text`.
  Status write(const std::string& text) { return write(text.data(), static_cast<int64_t>(text.size())); }
  // The final path of the file (not the temporary one), for messages.
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

// Writes `path` so that readers see either its old contents or all of the new ones: `body` writes
// into DIR/.tmp-<name>-<pid>-<n>, which is fsynced, renamed over `path`, and the folder fsynced.
// On any failure the temporary file is removed and `path` is left as it was.
Status writeFileAtomically(const std::string& path, const std::function<Status(FileWriter&)>& body);

// The whole contents of `path`; kBadInput naming the file when it cannot be read.
Expected<std::string> readWholeFile(const std::string& path);

// Creates folder `path` and its parents when missing; kBadInput naming it on failure.
Status ensureDirectory(const std::string& path);

}  // namespace cleave::runtime
