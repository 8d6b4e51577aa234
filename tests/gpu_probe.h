// Whether this machine has a GPU that tests can use, asked in a child
// process: a parent that initialised CUDA could not fork ranks that use it.
#ifndef HOOP_TESTS_GPU_PROBE_H
#define HOOP_TESTS_GPU_PROBE_H

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <string>

#include "harness.h"

namespace hooptest {

// Empty when a GPU is usable, else why not.
inline const std::string &gpu_missing() {
  static std::string why = ask_in_child([] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    return e != cudaSuccess ? std::string("cudaGetDeviceCount: ") +
                                  cudaGetErrorString(e)
           : n == 0         ? std::string("no CUDA device")
                            : std::string();
  });
  return why;
}

} // namespace hooptest

#define REQUIRE_GPU()                                                        \
  do {                                                                       \
    if (!hooptest::gpu_missing().empty())                                    \
      GTEST_SKIP() << "needs a GPU: " << hooptest::gpu_missing();            \
  } while (0)

#endif // HOOP_TESTS_GPU_PROBE_H
