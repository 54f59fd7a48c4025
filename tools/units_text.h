// How the CLI prints sizes and times: "2.55 MiB", "1.20 GiB", "12.3 us", "4.56 ms".
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace cleave::cli {

// Bytes in binary units with two decimals: "512 B", "3.50 KiB", "2.55 MiB", "1.20 GiB".
inline std::string bytesText(double bytes) {
  char text[32];
  if (bytes < 1024)
    std::snprintf(text, sizeof text, "%.0f B", bytes);
  else if (bytes < 1024.0 * 1024)
    std::snprintf(text, sizeof text, "%.2f KiB", bytes / 1024);
  else if (bytes < 1024.0 * 1024 * 1024)
    std::snprintf(text, sizeof text, "%.2f MiB", bytes / (1024.0 * 1024));
  else
    std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  return text;
}

// Bytes in MiB with two decimals, whatever their size: "0.27 MiB", "64.28 MiB".
inline std::string mibText(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

// Seconds as "12.3 us", "4.56 ms" or "1.23 s".
inline std::string durationText(double seconds) {
  char text[32];
  if (seconds < 1e-3)
    std::snprintf(text, sizeof text, "%.1f us", seconds * 1e6);
  else if (seconds < 1)
    std::snprintf(text, sizeof text, "%.2f ms", seconds * 1e3);
  else
    std::snprintf(text, sizeof text, "%.2f s", seconds);
  return text;
}

}  // namespace cleave::cli
