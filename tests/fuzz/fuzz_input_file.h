// Fuzz inputs as files: the readers under test take paths, so each input is written to a reused file.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace cleave::fuzz {

// A private folder for this process's input files (in /dev/shm when it exists: no disk writes),
// removed when the process exits normally. The name lives on the heap, never freed, so that it
// outlives the exit handler that removes the folder.
inline const std::string& inputFolder() {
  static const std::string* folder = [] {
    std::error_code ec;
    std::string base =
        std::filesystem::is_directory("/dev/shm", ec) ? "/dev/shm" : std::filesystem::temp_directory_path().string();
    auto* path = new std::string(base + "/cleave-fuzz-XXXXXX");
    if (!mkdtemp(path->data())) std::abort();
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(inputFolder(), ignored);
    });
    return path;
  }();
  return *folder;
}

// Writes `size` bytes of `data` to `file_name` in the input folder (replacing what an earlier
// input left there) and returns its path. Aborts if the file cannot be written: that is not a
// finding about the reader.
inline std::string writeInputFile(const uint8_t* data, size_t size, const std::string& file_name) {
  std::string path = inputFolder() + "/" + file_name;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  for (size_t done = 0; done < size;) {
    ssize_t written = ::write(fd, data + done, size - done);
    if (written <= 0) std::abort();
    done += static_cast<size_t>(written);
  }
  ::close(fd);
  return path;
}

}  // namespace cleave::fuzz
