// The oneDNN engine, per-thread streams and OpenMP thread counts the oneDNN kernels share.
#include "runtime/cpu/onednn_support.h"

#include <omp.h>

namespace cleave::runtime::cpu {

const dnnl::engine& cpuEngine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& threadStream() {
  thread_local dnnl::stream stream(cpuEngine());
  return stream;
}

OpenMpThreads::OpenMpThreads(int threads) : previous_(omp_get_max_threads()) { omp_set_num_threads(threads); }
OpenMpThreads::~OpenMpThreads() { omp_set_num_threads(previous_); }

}  // namespace cleave::runtime::cpu
