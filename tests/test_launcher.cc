// Tests for hoop-run, the local launcher.  They run the real binary with
// small sh programs as ranks and check what the ranks see, what comes out
// (to pipes, and to a pseudo-terminal where progress bars redraw in place),
// and how the job ends: exit codes, stopping the other ranks, timeouts and
// signals, with no process left behind.

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#ifndef HOOP_RUN_PATH
#define HOOP_RUN_PATH "/tmp/hoop-run"
#endif

namespace {

using Clock = std::chrono::steady_clock;
using Env = std::vector<std::pair<std::string, std::string>>;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A process counts as gone once it is a zombie: its parent may be an init
// that is slow to reap, but it can no longer do anything.
bool Alive(pid_t pid) {
  if (kill(pid, 0) != 0) return errno != ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)),
                   std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() ||
         text[paren + 2] != 'Z';
}

// Waits briefly for each pid to go; the last SIGKILLs are asynchronous.
void ExpectAllGone(const std::vector<pid_t>& pids) {
  auto deadline = Clock::now() + std::chrono::seconds(3);
  for (pid_t pid : pids) {
    while (Alive(pid) && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (Alive(pid)) {
      ADD_FAILURE() << "process " << pid << " outlived hoop-run";
      kill(pid, SIGKILL);
    }
  }
}

// hoop-run running in a child, with its stdout and stderr captured.
class Launch {
 public:
  explicit Launch(const std::vector<std::string>& args, const Env& env = {})
      : start_(Clock::now()) {
    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe2: " << strerror(errno);
      return;
    }
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(HOOP_RUN_PATH));
    for (const std::string& arg : args)
      argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) ExecLauncher(argv, env, out_pipe[1], err_pipe[1]);
    close(out_pipe[1]);
    close(err_pipe[1]);
    fds_[0] = out_pipe[0];
    fds_[1] = err_pipe[0];
    if (pid_ < 0) ADD_FAILURE() << "fork: " << strerror(errno);
  }

  ~Launch() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    for (int fd : fds_)
      if (fd >= 0) close(fd);
  }

  // Reads stdout until it holds `count` lines; false on timeout.
  bool WaitForLines(size_t count, double timeout_s = 10) {
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (SplitLines(out).size() < count) {
      if (Clock::now() >= deadline || (fds_[0] < 0 && fds_[1] < 0))
        return false;
      Pump(50);
    }
    return true;
  }

  void Signal(int sig) { ASSERT_EQ(kill(pid_, sig), 0); }

  // Waits for hoop-run to exit and returns its exit code, or 1000 + the
  // signal that killed it.  Gives up after timeout_s and kills it.
  int Wait(double timeout_s = 20) {
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    int status = 0;
    for (;;) {
      Pump(20);
      pid_t done = waitpid(pid_, &status, WNOHANG);
      if (done == pid_) break;
      if (Clock::now() >= deadline) {
        ADD_FAILURE() << "hoop-run still running after " << timeout_s << " s";
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
    }
    exited_ = true;
    seconds = SecondsSince(start_);
    // Everything hoop-run wrote is in the pipes now; what is not there
    // yet comes from processes it left behind, which the caller checks.
    for (int i = 0; i < 2; i++) {
      if (fds_[i] >= 0) fcntl(fds_[i], F_SETFL, O_NONBLOCK);
    }
    Pump(0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
  }

  std::string out;
  std::string err;
  double seconds = 0;  // from start to exit

 private:
  [[noreturn]] static void ExecLauncher(const std::vector<char*>& argv,
                                        const Env& env, int out_fd,
                                        int err_fd) {
    // Whatever the test runner ignores or blocks must not leak into the
    // launcher: it keeps ignored signals ignored, on purpose.
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD})
      signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    unsetenv("HOOP_ROOT_ADDR");
    for (const auto& [name, value] : env)
      setenv(name.c_str(), value.c_str(), 1);
    if (dup2(out_fd, STDOUT_FILENO) < 0 || dup2(err_fd, STDERR_FILENO) < 0)
      _exit(126);
    execv(argv[0], argv.data());
    _exit(126);
  }

  // Reads whatever is ready within timeout_ms.
  void Pump(int timeout_ms) {
    std::string* sinks[2] = {&out, &err};
    for (;;) {
      pollfd pfds[2];
      int n = 0;
      int which[2];
      for (int i = 0; i < 2; i++) {
        if (fds_[i] < 0) continue;
        pfds[n] = {fds_[i], POLLIN, 0};
        which[n++] = i;
      }
      if (n == 0 || poll(pfds, n, timeout_ms) <= 0) return;
      for (int k = 0; k < n; k++) {
        if (pfds[k].revents == 0) continue;
        char buf[65536];
        ssize_t got = read(fds_[which[k]], buf, sizeof buf);
        if (got > 0) {
          sinks[which[k]]->append(buf, static_cast<size_t>(got));
        } else if (got == 0 || errno != EAGAIN) {
          close(fds_[which[k]]);
          fds_[which[k]] = -1;
        }
      }
      timeout_ms = 0;  // after the first wait, only take what is ready
    }
  }

  Clock::time_point start_;
  pid_t pid_ = -1;
  int fds_[2] = {-1, -1};
  bool exited_ = false;
};

std::vector<std::string> ShArgs(const std::string& script, int nranks,
                             std::vector<std::string> options = {}) {
  options.insert(options.begin(), {"-n", std::to_string(nranks)});
  for (const char* arg : {"--", "sh", "-c"}) options.push_back(arg);
  options.push_back(script);
  return options;
}

// Pids that ranks printed as "[rank] pid <n>".
std::vector<pid_t> ReportedPids(const std::string& out) {
  std::vector<pid_t> pids;
  static const std::regex line(R"(\[\d+\] pid (\d+))");
  for (const std::string& text : SplitLines(out)) {
    std::smatch m;
    if (std::regex_match(text, m, line)) pids.push_back(std::stoi(m[1]));
  }
  return pids;
}

const char kPrintPlace[] =
    "echo \"$HOOP_RANK $HOOP_WORLD_SIZE $HOOP_LOCAL_RANK "
    "$HOOP_LOCAL_WORLD_SIZE $HOOP_ROOT_ADDR\"";

TEST(Launcher, EveryRankLearnsItsPlaceAndTheSameRootAddress) {
  Launch job(ShArgs(kPrintPlace, 4));
  ASSERT_EQ(job.Wait(), 0) << job.err;

  static const std::regex line(
      R"(\[(\d+)\] (\d+) 4 (\d+) 4 (127\.0\.0\.1:(\d+)))");
  std::set<int> ranks;
  std::set<std::string> addrs;
  for (const std::string& text : SplitLines(job.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(text, m, line)) << text;
    EXPECT_EQ(m[1], m[2]) << "label and HOOP_RANK differ: " << text;
    EXPECT_EQ(m[2], m[3]) << "HOOP_LOCAL_RANK differs: " << text;
    int port = std::stoi(m[5]);
    EXPECT_GT(port, 0);
    EXPECT_LT(port, 65536);
    ranks.insert(std::stoi(m[2]));
    addrs.insert(m[4]);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(addrs.size(), 1u) << job.out;
}

TEST(Launcher, InheritedRootAddressIsKept) {
  Launch job(ShArgs("echo $HOOP_ROOT_ADDR", 2),
             {{"HOOP_ROOT_ADDR", "10.1.2.3:4567"}});
  ASSERT_EQ(job.Wait(), 0) << job.err;
  std::vector<std::string> lines = SplitLines(job.out);
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"[0] 10.1.2.3:4567",
                                             "[1] 10.1.2.3:4567"}));
}

TEST(Launcher, RootAddrOptionOverridesTheEnvironment) {
  Launch job(ShArgs("echo $HOOP_ROOT_ADDR", 1, {"--root-addr", "node7:29500"}),
             {{"HOOP_ROOT_ADDR", "10.1.2.3:4567"}});
  ASSERT_EQ(job.Wait(), 0) << job.err;
  EXPECT_EQ(job.out, "node7:29500\n");  // one rank: no label
}

TEST(Launcher, LabelledLinesStayWholeAndInOrder) {
  // Many short lines from every rank at once, one line far longer than any
  // read, stderr, and a last line without its newline.
  const char script[] =
      "i=0; while [ $i -lt 300 ]; do echo \"line $HOOP_RANK $i\"; "
      "i=$((i+1)); done; "
      "head -c 200000 /dev/zero | tr '\\0' x; echo; "
      "echo \"oops $HOOP_RANK\" >&2; "
      "printf 'tail %s' $HOOP_RANK";
  Launch job(ShArgs(script, 4));
  ASSERT_EQ(job.Wait(), 0) << job.err;

  static const std::regex numbered(R"(\[(\d)\] line (\d) (\d+))");
  static const std::regex tail(R"(\[(\d)\] tail (\d))");
  const std::string long_line(200000, 'x');
  std::map<int, int> next_line, long_lines, tails;
  for (const std::string& text : SplitLines(job.out)) {
    std::smatch m;
    if (std::regex_match(text, m, numbered)) {
      int rank = std::stoi(m[1]);
      ASSERT_EQ(m[1], m[2]) << text;
      ASSERT_EQ(std::stoi(m[3]), next_line[rank]) << "out of order: " << text;
      next_line[rank]++;
    } else if (std::regex_match(text, m, tail)) {
      ASSERT_EQ(m[1], m[2]) << text;
      tails[std::stoi(m[1])]++;
    } else {
      ASSERT_TRUE(text.size() > 4 && text.compare(4, std::string::npos,
                                                  long_line) == 0)
          << "broken line: " << text.substr(0, 100);
      long_lines[text[1] - '0']++;
    }
  }
  for (int rank = 0; rank < 4; rank++) {
    EXPECT_EQ(next_line[rank], 300) << "rank " << rank;
    EXPECT_EQ(long_lines[rank], 1) << "rank " << rank;
    EXPECT_EQ(tails[rank], 1) << "rank " << rank;
  }
  std::vector<std::string> errs = SplitLines(job.err);
  std::sort(errs.begin(), errs.end());
  EXPECT_EQ(errs, (std::vector<std::string>{"[0] oops 0", "[1] oops 1",
                                            "[2] oops 2", "[3] oops 3"}));
}

// Bars redraw with a carriage return; a file gets only the update that a
// newline ends, not thousands of them, and a line or a blank update
// replaces the one before.
TEST(Launcher, AFileGetsOnlyUpdatesThatANewlineEnds) {
  const char script[] =
      "echo \"tty=$HOOP_STDERR_TTY\"; "
      "i=0; while [ $i -lt 1000 ]; do printf \"bar $HOOP_RANK $i\\r\"; "
      "i=$((i+1)); done; echo; "
      "printf \"gone $HOOP_RANK\\r\"; echo \"line $HOOP_RANK\"; "
      "printf \"blank\\r     \\r\"; printf \"crlf $HOOP_RANK\\r\\n\"; "
      "printf \"bar $HOOP_RANK\\r\" >&2; "
      "printf \"last $HOOP_RANK\\r\"";
  Launch job(ShArgs(script, 2), {{"HOOP_STDERR_TTY", "1"}});
  ASSERT_EQ(job.Wait(), 0) << job.err;
  for (int rank = 0; rank < 2; rank++) {
    std::string label = "[" + std::to_string(rank) + "] ";
    std::vector<std::string> mine;
    for (const std::string& line : SplitLines(job.out))
      if (line.compare(0, label.size(), label) == 0) mine.push_back(line);
    std::string r = std::to_string(rank);
    EXPECT_EQ(mine, (std::vector<std::string>{
                        label + "tty=", label + "bar " + r + " 999",
                        label + "line " + r, label + "crlf " + r,
                        label + "last " + r}))
        << job.out;
  }
  std::vector<std::string> errs = SplitLines(job.err);
  std::sort(errs.begin(), errs.end());
  EXPECT_EQ(errs, (std::vector<std::string>{"[0] bar 0", "[1] bar 1"}));
  EXPECT_EQ(job.out.find('\r'), std::string::npos) << job.out;
}

TEST(Launcher, WithoutLabelsTheTerminalHintIsLeftAlone) {
  Launch job(ShArgs("echo \"tty=$HOOP_STDERR_TTY\"", 2, {"--no-prefix"}),
             {{"HOOP_STDERR_TTY", "inherited"}});
  ASSERT_EQ(job.Wait(), 0) << job.err;
  EXPECT_EQ(job.out, "tty=inherited\ntty=inherited\n");
}

// hoop-run on a pseudo-terminal `columns` wide, as a user at a terminal
// runs it: the bytes it wrote there, and its exit code (1000 + signal if
// one ended it, -1 if it ran past timeout_s and was killed).
std::pair<std::string, int> RunOnTerminal(
    const std::vector<std::string>& args, unsigned short columns,
    double timeout_s = 20) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(HOOP_RUN_PATH));
  for (const std::string& arg : args)
    argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  winsize size = {};
  size.ws_row = 24;
  size.ws_col = columns;
  int master = -1;
  pid_t pid = forkpty(&master, nullptr, nullptr, &size);
  if (pid == 0) {
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD})
      signal(sig, SIG_DFL);
    unsetenv("HOOP_ROOT_ADDR");
    execv(argv[0], argv.data());
    _exit(126);
  }
  if (pid < 0) {
    ADD_FAILURE() << "forkpty: " << strerror(errno);
    return {"", -1};
  }
  std::string bytes;
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  bool late = false;
  // Linux answers EIO once every holder of the terminal's other end is
  // gone: hoop-run and the ranks, which have it as stdin.
  for (;;) {
    if (Clock::now() >= deadline) {
      late = true;
      kill(pid, SIGKILL);
      break;
    }
    pollfd p = {master, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    ssize_t got = read(master, buf, sizeof buf);
    if (got > 0)
      bytes.append(buf, static_cast<size_t>(got));
    else if (got == 0 || errno != EINTR)
      break;
  }
  close(master);
  int status = 0;
  waitpid(pid, &status, 0);
  if (late) {
    ADD_FAILURE() << "hoop-run on a terminal ran past " << timeout_s << " s";
    return {bytes, -1};
  }
  return {bytes, WIFEXITED(status) ? WEXITSTATUS(status)
                                   : 1000 + WTERMSIG(status)};
}

// The lines a terminal shows after `bytes`, as far as hoop-run drives it:
// printable text, carriage return, newline and ESC [ K (clear to the
// line's end).  No wrapping: a line longer than the screen stays whole.
std::vector<std::string> Screen(const std::string& bytes) {
  static const std::string kClear = "\033[K";
  std::vector<std::string> lines(1);
  size_t row = 0, col = 0;
  for (size_t i = 0; i < bytes.size(); i++) {
    char c = bytes[i];
    if (c == '\r') {
      col = 0;
    } else if (c == '\n') {
      if (++row == lines.size()) lines.emplace_back();
    } else if (bytes.compare(i, kClear.size(), kClear) == 0) {
      lines[row].resize(std::min(lines[row].size(), col));
      i += kClear.size() - 1;
    } else {
      if (lines[row].size() <= col) lines[row].resize(col + 1, ' ');
      lines[row][col++] = c;
    }
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

// Rank 0 draws a bar; rank 1's line, which comes meanwhile, goes above
// it, and the bar comes back beneath.  Once blanked, the bar leaves
// nothing behind.
TEST(Launcher, OnATerminalTheLatestUpdateStaysOnTheLastLine) {
  const char script[] =
      "if [ $HOOP_RANK = 0 ]; then "
      "  printf 'working 1\\r' >&2; sleep 0.6; "
      "  printf 'working 2\\r' >&2; sleep 0.6; "
      "  printf '         \\r' >&2; echo \"rank 0 done $HOOP_STDERR_TTY\"; "
      "else sleep 0.3; echo 'rank 1 line'; fi";
  auto [bytes, status] = RunOnTerminal(ShArgs(script, 2), 80);
  ASSERT_EQ(status, 0) << bytes;
  EXPECT_NE(bytes.find("\r[0] working 1\033[K"), std::string::npos) << bytes;
  EXPECT_NE(bytes.find("\r[0] working 2\033[K"), std::string::npos) << bytes;
  static const std::regex redrawn(
      "\\[1\\] rank 1 line\r\n\r\\[0\\] working [12]\033\\[K");
  EXPECT_TRUE(std::regex_search(bytes, redrawn)) << bytes;
  EXPECT_EQ(Screen(bytes), (std::vector<std::string>{"[1] rank 1 line",
                                                     "[0] rank 0 done 1"}))
      << bytes;
}

// A wrapped line could not be redrawn in place: the bar is cut to the
// terminal's width (not inside a UTF-8 character), and a newline keeps
// it whole.
TEST(Launcher, UpdatesAreCutToTheTerminalsWidth) {
  const std::string xs(34, 'x');
  const std::string script = "if [ $HOOP_RANK = 0 ]; then printf '" + xs +
                             "\xc3\xa9yyyy\\r'; sleep 0.3; echo; fi";
  auto [bytes, status] = RunOnTerminal(ShArgs(script, 2), 40);
  ASSERT_EQ(status, 0) << bytes;
  // 40 columns less the label "[0] " and the last column: 35 bytes, of
  // which the 35th would be the first half of the e acute.
  EXPECT_NE(bytes.find("\r[0] " + xs + "\033[K"), std::string::npos) << bytes;
  EXPECT_EQ(Screen(bytes),
            (std::vector<std::string>{"[0] " + xs + "\xc3\xa9yyyy"}))
      << bytes;
}

TEST(Launcher, NoPrefixPassesOutputThrough) {
  Launch job(ShArgs("echo out $HOOP_RANK; echo err $HOOP_RANK >&2", 2,
                 {"--no-prefix"}));
  ASSERT_EQ(job.Wait(), 0) << job.err;
  std::vector<std::string> outs = SplitLines(job.out);
  std::vector<std::string> errs = SplitLines(job.err);
  std::sort(outs.begin(), outs.end());
  std::sort(errs.begin(), errs.end());
  EXPECT_EQ(outs, (std::vector<std::string>{"out 0", "out 1"}));
  EXPECT_EQ(errs, (std::vector<std::string>{"err 0", "err 1"}));
}

TEST(Launcher, FailingRanksCodeIsTheJobsAndTheOthersStop) {
  const char script[] =
      "if [ $HOOP_RANK = 1 ]; then sleep 0.5; exit 3; fi; "
      "echo pid $$; exec sleep 30";
  Launch job(ShArgs(script, 3));
  EXPECT_EQ(job.Wait(), 3) << job.err;
  EXPECT_LT(job.seconds, 10);
  EXPECT_NE(job.err.find("hoop-run: rank 1 (pid "), std::string::npos)
      << job.err;
  EXPECT_NE(job.err.find("exited with code 3"), std::string::npos) << job.err;
  std::vector<pid_t> pids = ReportedPids(job.out);
  EXPECT_EQ(pids.size(), 2u) << job.out;
  ExpectAllGone(pids);
}

// With --elastic the others go on: the job succeeds when one rank does,
// and fails with the first failure's code when none does.
TEST(Launcher, ElasticJobsGoOnWhenARankFails) {
  const char script[] =
      "if [ $HOOP_RANK = 1 ]; then kill -9 $$; fi; "
      "if [ $HOOP_RANK = 2 ]; then exit 3; fi; sleep 0.5; echo done";
  Launch job(ShArgs(script, 4, {"--elastic"}));
  EXPECT_EQ(job.Wait(), 0) << job.err;
  EXPECT_NE(job.err.find("killed by signal 9 (Killed); the other ranks go "
                         "on (--elastic)"),
            std::string::npos) << job.err;
  EXPECT_NE(job.err.find("exited with code 3"), std::string::npos) << job.err;
  EXPECT_NE(job.out.find("[0] done"), std::string::npos) << job.out;
  EXPECT_NE(job.out.find("[3] done"), std::string::npos) << job.out;
  Launch none(ShArgs("exit $((HOOP_RANK + 4))", 2, {"--elastic"}));
  int code = none.Wait();
  EXPECT_TRUE(code == 4 || code == 5) << none.err;
}

// --respawn starts a failed rank again, as the same rank with HOOP_JOIN=1,
// as many times in all as it says.
TEST(Launcher, RespawnStartsReplacementsThatJoin) {
  const char script[] =
      "if [ $HOOP_RANK = 1 ]; then echo join=${HOOP_JOIN:-0}; exit 3; fi; "
      "sleep 1; echo done";
  Launch job(ShArgs(script, 3, {"--elastic", "--respawn", "2"}));
  EXPECT_EQ(job.Wait(), 0) << job.err;
  EXPECT_NE(job.out.find("[1] join=0"), std::string::npos) << job.out;
  size_t first = job.out.find("[1] join=1");
  ASSERT_NE(first, std::string::npos) << job.out;
  EXPECT_NE(job.out.find("[1] join=1", first + 1), std::string::npos)
      << job.out;
  EXPECT_NE(job.err.find("(2 of --respawn 2)"), std::string::npos) << job.err;
  EXPECT_EQ(job.err.find("(3 of --respawn 2)"), std::string::npos) << job.err;
  Launch bad(ShArgs("true", 2, {"--respawn", "1"}));
  EXPECT_EQ(bad.Wait(), 2) << bad.err;
  EXPECT_NE(bad.err.find("--respawn needs --elastic"), std::string::npos)
      << bad.err;
}

// A replacement still running after the others finished (here it never
// joins; in a job, it started too late to) is stopped after a few seconds,
// not waited for until its join times out, and the job still succeeds.
TEST(Launcher, ReplacementsLeftWhenTheOthersFinishAreStopped) {
  const char script[] =
      "if [ $HOOP_RANK = 1 ] && [ -z \"$HOOP_JOIN\" ]; then exit 3; fi; "
      "if [ -n \"$HOOP_JOIN\" ]; then exec sleep 60; fi; sleep 0.5";
  Launch job(ShArgs(script, 3, {"--elastic", "--respawn", "1"}));
  EXPECT_EQ(job.Wait(), 0) << job.err;
  EXPECT_LT(job.seconds, 20);
  EXPECT_NE(job.err.find("stopping the replacement(s) of rank(s) 1,"),
            std::string::npos)
      << job.err;
}

TEST(Launcher, RankKilledBySignalGives128PlusTheSignal) {
  const char script[] =
      "if [ $HOOP_RANK = 0 ]; then kill -9 $$; fi; exec sleep 30";
  Launch job(ShArgs(script, 2));
  EXPECT_EQ(job.Wait(), 128 + SIGKILL) << job.err;
  EXPECT_LT(job.seconds, 10);
  EXPECT_NE(job.err.find("rank 0 (pid "), std::string::npos) << job.err;
  EXPECT_NE(job.err.find("killed by signal 9"), std::string::npos) << job.err;
}

// What /dev/shm holds under hoop's names for a process ("hoop-<pid>-...").
std::vector<std::string> SegmentsOf(pid_t pid) {
  std::vector<std::string> names;
  std::string prefix = "hoop-" + std::to_string(pid) + "-";
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return names;
  for (struct dirent* e; (e = readdir(dir)) != nullptr;)
    if (strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0)
      names.push_back(e->d_name);
  closedir(dir);
  return names;
}

// A rank killed while it held segments its peers had not yet mapped: hoop
// names them by the creator's pid, and hoop-run removes a dead process's,
// and nobody else's.
TEST(Launcher, SegmentsThatADeadRankLeftAreRemoved) {
  struct Decoy {
    std::string path =
        "/dev/shm/hoop-" + std::to_string(getpid()) + "-decoy";
    ~Decoy() { unlink(path.c_str()); }
  } mine;
  int fd = open(mine.path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << strerror(errno);
  close(fd);
  const char script[] =
      "if [ $HOOP_RANK = 0 ]; then echo pid $$; "
      ": >/dev/shm/hoop-$$-1-a; : >/dev/shm/hoop-$$-1-b; kill -9 $$; fi; "
      "exec sleep 30";
  Launch job(ShArgs(script, 2));
  EXPECT_EQ(job.Wait(), 128 + SIGKILL) << job.err;
  std::vector<pid_t> pids = ReportedPids(job.out);
  ASSERT_EQ(pids.size(), 1u) << job.out;
  EXPECT_TRUE(SegmentsOf(pids[0]).empty()) << "pid " << pids[0];
  EXPECT_NE(job.err.find("removed 2 shared-memory segment(s)"),
            std::string::npos)
      << job.err;
  EXPECT_EQ(SegmentsOf(getpid()).size(), 1u);
}

// Ranks of a real job killed at moments spread over set-up and the first
// calls, connecting at init and on first use: whatever segments were
// half made, nothing of theirs stays in /dev/shm (segments are unlinked
// once both ends map them, a survivor unlinks the one its failed peer
// never mapped, and hoop-run removes what the dead left).
TEST(Launcher, KillsDuringSetUpLeaveDevShmClean) {
  if (HOOP_BENCH_PATH[0] == '\0')
    GTEST_SKIP() << "built without hoop-bench (HOOP_BUILD_BENCH=OFF)";
  for (const char* connect : {"0", "1"}) {
    for (const char* delay : {"0.02", "0.1", "0.3"}) {
      std::string script =
          std::string("echo pid $$; if [ $HOOP_RANK = 2 ]; then "
                      "(sleep ") + delay + "; kill -9 $$) & fi; exec " +
          HOOP_BENCH_PATH + " -b 1K -e 4M -f 4 -n 2 -w 1 -c 1";
      Launch job(ShArgs(script, 4), {{"HOOP_RUNTIME_CONNECT", connect}});
      int code = job.Wait(60);
      std::vector<pid_t> pids = ReportedPids(job.out);
      SCOPED_TRACE(std::string("HOOP_RUNTIME_CONNECT=") + connect +
                   ", kill after " + delay + " s, exit " +
                   std::to_string(code) + "\n" + job.err);
      EXPECT_EQ(pids.size(), 4u) << job.out;
      for (pid_t pid : pids)
        EXPECT_TRUE(SegmentsOf(pid).empty()) << "pid " << pid;
    }
  }
}

TEST(Launcher, TimeoutGives124AndNamesTheRanks) {
  Launch job(ShArgs("exec sleep 30", 2, {"--timeout", "0.5"}));
  EXPECT_EQ(job.Wait(), 124) << job.err;
  EXPECT_LT(job.seconds, 10);
  EXPECT_NE(job.err.find("timed out"), std::string::npos) << job.err;
  EXPECT_NE(job.err.find("ranks still running: 0 1"), std::string::npos)
      << job.err;
}

TEST(Launcher, RanksIgnoringSigtermAreKilledAfterTheGracePeriod) {
  Launch job(ShArgs("trap '' TERM; echo pid $$; exec sleep 30", 2,
                 {"--timeout", "0.5", "--grace-ms", "300"}));
  EXPECT_EQ(job.Wait(), 124) << job.err;
  EXPECT_LT(job.seconds, 5);
  std::vector<pid_t> pids = ReportedPids(job.out);
  EXPECT_EQ(pids.size(), 2u) << job.out;
  ExpectAllGone(pids);
}

TEST(Launcher, BadUsageGives2) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"true"},
      {"-n"},
      {"-n", "2"},
      {"-n", "0", "true"},
      {"-n", "1025", "true"},
      {"-n", "two", "true"},
      {"--bogus", "-n", "1", "true"},
      {"-n", "1", "--timeout", "-1", "true"},
      {"-n", "1", "--grace-ms", "soon", "true"},
      {"-n", "1", "--root-addr", "no-port", "true"},
  };
  for (const auto& args : cases) {
    Launch job(args);
    EXPECT_EQ(job.Wait(), 2) << "args: " << ::testing::PrintToString(args);
    EXPECT_EQ(job.err.rfind("hoop-run: ", 0), 0u) << job.err;
    EXPECT_NE(job.err.find("--help"), std::string::npos) << job.err;
  }
}

TEST(Launcher, HelpPrintsUsage) {
  Launch job({"--help"});
  EXPECT_EQ(job.Wait(), 0);
  EXPECT_EQ(job.out.rfind("Usage: hoop-run -n N", 0), 0u) << job.out;
}

TEST(Launcher, ProgramNotFoundGives127) {
  Launch job({"-n", "2", "hoop-no-such-program"});
  EXPECT_EQ(job.Wait(), 127) << job.err;
  EXPECT_NE(job.err.find("hoop-run: cannot run 'hoop-no-such-program': "
                         "No such file or directory"),
            std::string::npos)
      << job.err;
}

TEST(Launcher, ArgumentsReachTheProgramUntouched) {
  Launch job({"-n", "1", "--", "sh", "-c", "printf '<%s>' \"$@\"", "sh", "-n",
              "a b", "--timeout"});
  EXPECT_EQ(job.Wait(), 0) << job.err;
  EXPECT_EQ(job.out, "<-n><a b><--timeout>");
}

// Each rank starts a background sleep and reports both pids; the job must
// take all of them down.
void ExpectSignalStopsEverything(int sig) {
  Launch job(ShArgs("sleep 30 & echo pid $!; echo pid $$; wait", 3,
                 {"--grace-ms", "300"}));
  ASSERT_TRUE(job.WaitForLines(6)) << job.out << job.err;
  job.Signal(sig);
  EXPECT_EQ(job.Wait(), 128 + sig) << job.err;
  EXPECT_LT(job.seconds, 10);
  std::vector<pid_t> pids = ReportedPids(job.out);
  EXPECT_EQ(pids.size(), 6u) << job.out;
  ExpectAllGone(pids);
}

TEST(Launcher, SigtermStopsEveryRankAndWhatItStarted) {
  ExpectSignalStopsEverything(SIGTERM);
}

// sh runs background jobs with SIGINT ignored, so here the sleeps only go
// when the grace period ends.
TEST(Launcher, SigintStopsEvenProcessesThatIgnoreIt) {
  ExpectSignalStopsEverything(SIGINT);
}

}  // namespace
