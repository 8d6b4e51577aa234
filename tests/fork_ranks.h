// Ranks as forked processes, whatever library joins them: the part of the
// harness that knows no hoop API, so that tests/test_nccl.cc, which must
// know only NCCL's (it is built against NVIDIA's nccl.h too), shares it
// with harness.h.
#ifndef HOOP_TESTS_FORK_RANKS_H
#define HOOP_TESTS_FORK_RANKS_H

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace hooptest {

// Inside a rank: records a failure message; the rank then exits non-zero.
class RankLog {
 public:
  explicit RankLog(int rank) : rank_(rank) {}
  bool ok() const { return failures_ == 0; }
  void fail(const char *fmt, ...) __attribute__((format(printf, 2, 3))) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (failures_++ < 10)
      fprintf(stderr, "[rank %d] %s\n", rank_, buf);
  }
  int rank() const { return rank_; }

 private:
  int rank_;
  int failures_ = 0;
};

#define RANK_EXPECT(log, cond, ...)                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      (log).fail("%s:%d: expected %s", __FILE__, __LINE__, #cond);           \
      (log).fail(__VA_ARGS__);                                               \
    }                                                                        \
  } while (0)

struct RunResult {
  std::vector<int> exit_codes; // 128 + signal for a killed rank, -1 timeout
  bool timed_out = false;
  double seconds = 0; // from the first fork until the last rank ended
  bool all_ok() const {
    for (int c : exit_codes)
      if (c != 0)
        return false;
    return !timed_out;
  }
};

inline std::string describe(const RunResult &r) {
  std::string s = r.timed_out ? "timed out; exit codes:" : "exit codes:";
  for (int c : r.exit_codes)
    s += " " + std::to_string(c);
  return s;
}

// Forks nranks processes, each of which exits with what rank_main returns
// for its rank; returns their exit codes.  Ranks still running after
// timeout_s are killed.
inline RunResult fork_ranks(int nranks,
                            const std::function<int(int rank)> &rank_main,
                            int timeout_s) {
  RunResult result;
  fflush(stdout);
  fflush(stderr);
  auto start = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; r++) {
    pid_t pid = fork();
    if (pid == 0) {
      int code = rank_main(r);
      fflush(stdout);
      fflush(stderr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  result.exit_codes.assign((size_t)nranks, -1);
  int left = nranks;
  long waited_ms = 0;
  while (left > 0 && waited_ms < timeout_s * 1000L) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      poll(nullptr, 0, 5);
      waited_ms += 5;
      continue;
    }
    for (int r = 0; r < nranks; r++) {
      if (pids[(size_t)r] != pid)
        continue;
      result.exit_codes[(size_t)r] = WIFEXITED(status)
                                         ? WEXITSTATUS(status)
                                         : 128 + WTERMSIG(status);
      pids[(size_t)r] = -1;
      left--;
    }
  }
  if (left > 0) {
    result.timed_out = true;
    for (pid_t pid : pids) {
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  }
  result.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  return result;
}

} // namespace hooptest

#endif // HOOP_TESTS_FORK_RANKS_H
