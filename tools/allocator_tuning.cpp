#include "tools/allocator_tuning.h"

#include <dlfcn.h>

#include <cstddef>
#include <initializer_list>
#include <sys/types.h>

namespace cleave::cli {

namespace {

// jemalloc's mallctl, looked up at run time: sanitizer builds link no jemalloc.
using Mallctl = int (*)(const char*, void*, size_t*, void*, size_t);
Mallctl findMallctl() { return reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl")); }

}  // namespace

void keepFreedMemoryForReuse() {
  const Mallctl mallctl = findMallctl();
  if (mallctl == nullptr) return;
  ssize_t never = -1;  // decay time in ms; -1: never purge
  // The arenas made so far (4096 is MALLCTL_ARENAS_ALL) and those threads make later.
  for (const char* name : {"arena.4096.dirty_decay_ms", "arena.4096.muzzy_decay_ms", "arenas.dirty_decay_ms",
                           "arenas.muzzy_decay_ms"})
    mallctl(name, nullptr, nullptr, &never, sizeof never);
}

void createAllocatorArenas() {
  const Mallctl mallctl = findMallctl();
  if (mallctl == nullptr) return;
  unsigned arenas = 0, own = 0;  // the automatic arenas (not the one for huge allocations, made apart)
  size_t size = sizeof arenas;
  if (mallctl("opt.narenas", &arenas, &size, nullptr, 0) != 0) return;
  size = sizeof own;
  if (mallctl("thread.arena", &own, &size, nullptr, 0) != 0) return;
  // Binding this thread to an arena makes it if it does not exist yet; then back to its own.
  for (unsigned arena = 0; arena < arenas; ++arena) mallctl("thread.arena", nullptr, nullptr, &arena, sizeof arena);
  mallctl("thread.arena", nullptr, nullptr, &own, sizeof own);
}

}  // namespace cleave::cli
