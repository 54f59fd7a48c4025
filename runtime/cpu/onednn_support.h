// What the oneDNN kernels (onednn_convolution.cpp, onednn_matmul.cpp) share: the CPU engine, a
// stream per thread, and the OpenMP thread count oneDNN runs on. Includes oneDNN's header: only
// those kernels' sources include this file.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace cleave::runtime::cpu {

// The process's oneDNN CPU engine.
const dnnl::engine& cpuEngine();

// The calling thread's stream on cpuEngine() (in order; every execute is finished by its wait()).
dnnl::stream& threadStream();

// Sets the OpenMP thread count oneDNN's parallel regions use on this thread (oneDNN reads it when a
// primitive is made and when it runs), and puts the previous count back.
class OpenMpThreads {
 public:
  explicit OpenMpThreads(int threads);
  ~OpenMpThreads();
  OpenMpThreads(const OpenMpThreads&) = delete;
  OpenMpThreads& operator=(const OpenMpThreads&) = delete;

 private:
  int previous_;
};

}  // namespace cleave::runtime::cpu
