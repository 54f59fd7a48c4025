// File I/O: whole-file reads and atomic writes (temporary file, fsync, rename), errors naming the file.
#include "runtime/io/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace cleave::runtime {
namespace {

std::string errnoText() { return std::strerror(errno); }

// Opens and fsyncs a folder so that a rename inside it is durable.
Status syncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::runtime("cannot open folder '" + dir + "' to sync it: " + errnoText());
  int rc = ::fsync(fd);
  std::string error = rc != 0 ? errnoText() : "";
  ::close(fd);
  // Some file systems do not support fsync on folders (EINVAL); the rename itself has happened.
  if (rc != 0 && error != std::strerror(EINVAL)) return Status::runtime("cannot sync folder '" + dir + "': " + error);
  return Status::ok();
}

}  // namespace

Status FileWriter::write(const void* data, int64_t bytes) {
  const char* next = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t written = ::write(fd_, next, static_cast<size_t>(bytes));
    if (written < 0) {
      if (errno == EINTR) continue;
      return Status::runtime("cannot write '" + path_ + "': " + errnoText());
    }
    next += written;
    bytes -= written;
  }
  return Status::ok();
}

// Steps: create a unique temporary file beside `path`, write, fsync, close, rename, fsync the folder.
Status writeFileAtomically(const std::string& path, const std::function<Status(FileWriter&)>& body) {
  static std::atomic<uint64_t> counter{0};
  std::filesystem::path target(path);
  std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  std::string temp = (std::filesystem::path(dir) / (".tmp-" + target.filename().string() + "-" +
                                                     std::to_string(::getpid()) + "-" + std::to_string(counter++)))
                         .string();

  // 1. The temporary file; O_EXCL so two writers never share one.
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Status::badInput("cannot create '" + temp + "' (to write '" + path + "'): " + errnoText());

  // 2. Contents, then fsync so the data is on disk before the name points at it.
  FileWriter writer(fd, path);
  Status status = body(writer);
  if (status.isOk() && ::fsync(fd) != 0) status = Status::runtime("cannot sync '" + temp + "': " + errnoText());
  if (::close(fd) != 0 && status.isOk()) status = Status::runtime("cannot close '" + temp + "': " + errnoText());
  if (!status.isOk()) {
    ::unlink(temp.c_str());
    return status;
  }

  // 3. Replace the target in one step, then make the rename durable.
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    Status error = Status::runtime("cannot rename '" + temp + "' to '" + path + "': " + errnoText());
    ::unlink(temp.c_str());
    return error;
  }
  return syncDirectory(dir);
}

Expected<std::string> readWholeFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return Status::badInput("cannot read '" + path + "': it is a folder");
  std::ifstream file(path, std::ios::binary);
  if (!file) return Status::badInput("cannot open '" + path + "': " + errnoText());
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) return Status::badInput("cannot read '" + path + "': " + errnoText());
  return std::move(contents).str();
}

Status ensureDirectory(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return Status::badInput("cannot create folder '" + path + "': " + ec.message());
  if (!std::filesystem::is_directory(path, ec)) return Status::badInput("'" + path + "' is not a folder");
  return Status::ok();
}

}  // namespace cleave::runtime
