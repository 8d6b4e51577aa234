// Whether this machine has a GPU that tests can use, and a way to run a
// test's CUDA work, each in a child process: a parent that initialised CUDA
// could not fork ranks that use it.
#ifndef HOOP_TESTS_GPU_PROBE_H
#define HOOP_TESTS_GPU_PROBE_H

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <functional>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

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

// Runs body, whose gtest assertions fail this test, in a forked child:
// tests that touch CUDA themselves, so that this process never initialises
// it and the tests after them can still fork ranks.
inline void in_child(const std::function<void()> &body) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    body();
    fflush(stdout);
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  ASSERT_GT(pid, 0) << "fork failed";
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child running the test failed (its failures are above), "
      << "status 0x" << std::hex << status;
}

} // namespace hooptest

#define REQUIRE_GPU()                                                        \
  do {                                                                       \
    if (!hooptest::gpu_missing().empty())                                    \
      GTEST_SKIP() << "needs a GPU: " << hooptest::gpu_missing();            \
  } while (0)

#endif // HOOP_TESTS_GPU_PROBE_H
