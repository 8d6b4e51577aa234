// Multi-process test harness: runs a function as N ranks, each in its own
// forked process joined by one hoop communicator over loopback, and reports
// every rank's failure text to the parent's GoogleTest assertion.
#ifndef HOOP_TESTS_HARNESS_H
#define HOOP_TESTS_HARNESS_H

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fork_ranks.h"
#include "hoop.h"

namespace hooptest {

#define RANK_EXPECT_OK(log, comm, call)                                      \
  do {                                                                       \
    hoop_result_t r_ = (call);                                               \
    if (r_ != HOOP_SUCCESS)                                                  \
      (log).fail("%s:%d: %s returned %s: %s", __FILE__, __LINE__, #call,    \
                 hoop_result_name(r_), hoop_comm_last_error(comm));          \
  } while (0)

// Whether comm's last error says `text`.
inline bool mentions(hoop_comm_t comm, const char *text) {
  return strstr(hoop_comm_last_error(comm), text) != nullptr;
}

// Sends this process `sig` from another thread `ms` from now, so that it
// dies (or stops) in the middle of whatever call it is making then.
inline void signal_self_after(int sig, int ms) {
  std::thread([sig, ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    kill(getpid(), sig);
  }).detach();
}

// A port nobody listens on right now (the kernel's pick for port 0).
inline int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, (sockaddr *)&a, sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, (sockaddr *)&a, &len);
  close(fd);
  return ntohs(a.sin_port);
}

// The job secret of tests that set a launcher's variables by hand, as
// users of torchrun, or of mpirun and srun across hosts, do (hoop-run and
// unique ids make their own).  A test needs no secrecy, only a shared
// value of the length hoop asks for.
const char kTestToken[] = "hoop-tests-0123456789abcdef0123456789abcdef";

inline void set_test_token() {
  setenv("HOOP_AUTH_TOKEN", kTestToken, 1);
  unsetenv("HOOP_AUTH_TOKEN_FILE");
  unsetenv("HOOP_AUTH");
}

// Sets an environment variable for the ranks a test forks, until the end
// of the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    const char *old = getenv(name);
    had_ = old != nullptr;
    if (had_)
      old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char *name_;
  bool had_;
  std::string old_;
};

const unsigned char kCanary = 0xA5;

// A buffer of `count` elements with one spare element of canary bytes on
// each side, which catch writes out of bounds.
struct Guarded {
  Guarded(size_t count, size_t esz)
      : esz_(esz), bytes_((count + 2) * esz, (char)kCanary) {}
  char *data() { return bytes_.data() + esz_; }
  bool guards_intact() const {
    for (size_t b = 0; b < esz_; b++) {
      if ((unsigned char)bytes_[b] != kCanary ||
          (unsigned char)bytes_[bytes_.size() - 1 - b] != kCanary)
        return false;
    }
    return true;
  }
  // True when no byte at all changed since construction.
  bool all_canary() const {
    return std::all_of(bytes_.begin(), bytes_.end(),
                       [](char c) { return (unsigned char)c == kCanary; });
  }

 private:
  size_t esz_;
  std::vector<char> bytes_;
};

using RankFn = std::function<void(RankLog &log, hoop_comm_t comm, int rank,
                                  int nranks)>;

struct RunOptions {
  int timeout_s = 120;
  const hoop_config_t *config = nullptr;
  // Without `config`, and when not 0: hoop's timeout, in a HOOP_CONFIG_INIT
  // config of the run's own (most tests that fail on purpose set only it).
  int comm_timeout_ms = 0;
  bool init = true; // false: fn gets comm == nullptr and makes its own
};

// Forks nranks processes that share a fresh unique id; returns their exit
// codes.  A rank whose fn reported no failure exits 0.
inline RunResult run_ranks(int nranks, const RankFn &fn,
                           const RunOptions &opt = RunOptions()) {
  RunResult result;
  hoop_unique_id_t id;
  if (hoop_get_unique_id(&id) != HOOP_SUCCESS) {
    fprintf(stderr, "hoop_get_unique_id: %s\n", hoop_last_error());
    result.exit_codes.assign((size_t)nranks, 99);
    return result;
  }
  hoop_config_t timed = HOOP_CONFIG_INIT;
  timed.timeout_ms = opt.comm_timeout_ms;
  const hoop_config_t *config = opt.config;
  if (config == nullptr && opt.comm_timeout_ms != 0)
    config = &timed;
  return fork_ranks(
      nranks,
      [&](int r) {
        RankLog log(r);
        hoop_comm_t comm = nullptr;
        if (opt.init) {
          hoop_result_t res =
              hoop_comm_init_rank(&comm, nranks, &id, r, config);
          if (res != HOOP_SUCCESS) {
            fprintf(stderr, "[rank %d] init failed: %s: %s\n", r,
                    hoop_result_name(res), hoop_last_error());
            return 3;
          }
        }
        fn(log, comm, r, nranks);
        if (comm != nullptr)
          hoop_comm_destroy(comm);
        return log.ok() ? 0 : 1;
      },
      opt.timeout_s);
}

// Runs fn in one forked process that makes its communicators itself: for
// tests that set what hoop reads before it reads it, or that use a
// communicator after its end.
inline RunResult run_alone(const std::function<void(RankLog &log)> &fn,
                           int timeout_s = 120) {
  RunOptions opt;
  opt.init = false;
  opt.timeout_s = timeout_s;
  return run_ranks(
      1, [&fn](RankLog &log, hoop_comm_t, int, int) { fn(log); }, opt);
}

// Inside a rank: a communicator of this process alone (nullptr, the
// failure in log, when none could be made).
inline hoop_comm_t comm_alone(RankLog &log) {
  hoop_unique_id_t id;
  hoop_comm_t comm = nullptr;
  RANK_EXPECT_OK(log, nullptr, hoop_get_unique_id(&id));
  RANK_EXPECT_OK(log, nullptr,
                 hoop_comm_init_rank(&comm, 1, &id, 0, nullptr));
  return comm;
}

// Runs probe in a forked child and returns what it returned, or why the
// child failed.  For questions whose asking would change this process: a
// parent that initialised CUDA could not fork ranks that use it.
inline std::string ask_in_child(const std::function<std::string()> &probe) {
  int fds[2];
  if (pipe(fds) != 0)
    return std::string("pipe failed");
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string msg = probe();
    if (write(fds[1], msg.data(), msg.size()) < 0)
      _exit(2);
    _exit(0);
  }
  close(fds[1]);
  std::string msg;
  char buf[256];
  ssize_t got;
  while ((got = read(fds[0], buf, sizeof buf)) > 0)
    msg.append(buf, (size_t)got);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return std::string("the probe process failed");
  return msg;
}

// A command through the shell, stdout and stderr together, with its exit
// status (128 + signal when a signal ended it).
struct ShellOutput {
  int status;
  std::string text;
};

inline ShellOutput run_shell(const std::string &cmd) {
  ShellOutput out{-1, ""};
  FILE *p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr)
    return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0)
    out.text.append(buf, n);
  int st = pclose(p);
  out.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return out;
}

// Segments in /dev/shm whose creating process no longer exists: leaks.
// Segments of live processes (other tests running now) are not counted.
inline std::vector<std::string> leaked_shm_segments() {
  std::vector<std::string> leaked;
  DIR *dir = opendir("/dev/shm");
  if (dir == nullptr)
    return leaked;
  for (struct dirent *e; (e = readdir(dir)) != nullptr;) {
    int pid;
    if (sscanf(e->d_name, "hoop-%d-", &pid) == 1 &&
        kill(pid, 0) != 0 && errno == ESRCH)
      leaked.push_back(e->d_name);
  }
  closedir(dir);
  return leaked;
}

// The data rows of hoop-bench (or a peer's) output, split into words: the
// lines that start with a digit once `prefix` (e.g. hoop-run's "[0] ")
// is taken off; lines without the prefix are skipped.
inline std::vector<std::vector<std::string>> bench_rows(
    const std::string &text, const std::string &prefix = "") {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, prefix.size(), prefix) != 0)
      continue;
    std::istringstream words(line.substr(prefix.size()));
    std::vector<std::string> f;
    for (std::string w; words >> w;)
      f.push_back(w);
    if (!f.empty() && isdigit((unsigned char)f[0][0]))
      rows.push_back(f);
  }
  return rows;
}

// For a GoogleTest case that runs hoop-bench: a build configured with
// HOOP_BUILD_BENCH=OFF has none, and passes HOOP_BENCH_PATH as "".
#define REQUIRE_BENCH()                                                      \
  do {                                                                       \
    if (HOOP_BENCH_PATH[0] == '\0')                                          \
      GTEST_SKIP() << "hoop-bench is not built (HOOP_BUILD_BENCH=OFF)";      \
  } while (0)

} // namespace hooptest

#endif // HOOP_TESTS_HARNESS_H
