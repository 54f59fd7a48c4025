// How the executables' allocator (jemalloc, tools/CMakeLists.txt) treats freed memory.
#pragma once

namespace cleave::cli {

// For a short-lived process that makes and frees many large graphs (compile): freed pages stay
// with the allocator for reuse instead of going back to the kernel, which would zero them again on
// the next touch. GPT-3's --strategy auto compile: 8.0-8.6 s against 8.7-9.3 s back to back, 1.9 GB
// peak against 1.7 GB (the 100,000-node --dp 2 compile gains nothing). Does nothing where the
// process has another allocator (sanitizer builds).
void keepFreedMemoryForReuse();

}  // namespace cleave::cli
