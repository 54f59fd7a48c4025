#include "tools/allocator_tuning.h"

#include <dlfcn.h>

#include <cstddef>
#include <initializer_list>
#include <sys/types.h>

namespace cleave::cli {

void keepFreedMemoryForReuse() {
  // jemalloc's mallctl, looked up at run time: sanitizer builds link no jemalloc.
  using Mallctl = int (*)(const char*, void*, size_t*, void*, size_t);
  auto mallctl = reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl"));
  if (mallctl == nullptr) return;
  ssize_t never = -1;  // decay time in ms; -1: never purge
  // The arenas made so far (4096 is MALLCTL_ARENAS_ALL) and those threads make later.
  for (const char* name : {"arena.4096.dirty_decay_ms", "arena.4096.muzzy_decay_ms", "arenas.dirty_decay_ms",
                           "arenas.muzzy_decay_ms"})
    mallctl(name, nullptr, nullptr, &never, sizeof never);
}

}  // namespace cleave::cli
