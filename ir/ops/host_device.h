// CLEAVE_HOST_DEVICE: marks a header function that the reference, the CPU and the CUDA kernels all call.
#pragma once

#if defined(__CUDACC__)
#define CLEAVE_HOST_DEVICE __host__ __device__
#else
#define CLEAVE_HOST_DEVICE
#endif
