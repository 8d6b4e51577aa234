// Tests for tools/netsim.sh, the emulated hosts, and hoop-run --netns: the
// namespaces appear and reach each other over the bridge, teardown leaves
// nothing behind even when the command fails, and a hoop job runs across
// them with correct results.  They need root and network namespaces, and
// skip (saying why) without them.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "harness.h"

#ifndef HOOP_RUN_PATH
#define HOOP_RUN_PATH "hoop-run"
#endif
#ifndef HOOP_BENCH_PATH
#define HOOP_BENCH_PATH "hoop-bench"
#endif

namespace {

// The checkout's root, from the build or else from this file's own path
// (CMake compiles with absolute paths), to find tools/netsim.sh.
std::string SourceDir() {
#ifdef HOOP_SOURCE_DIR
  return HOOP_SOURCE_DIR;
#else
  std::string file = __FILE__;
  return file.substr(0, file.rfind("/tests/"));
#endif
}

const std::string kNetsim = SourceDir() + "/tools/netsim.sh";

using Output = hooptest::ShellOutput;
using hooptest::run_shell;

// The hoopsim-* namespaces that `ip netns` knows.
std::set<std::string> HoopsimNamespaces() {
  std::set<std::string> names;
  DIR *dir = opendir("/var/run/netns");
  if (dir == nullptr) return names;
  while (struct dirent *e = readdir(dir)) {
    std::string name = e->d_name;
    if (name.rfind("hoopsim-", 0) == 0) names.insert(name);
  }
  closedir(dir);
  return names;
}

// Runs `body` in a child that has joined namespace `ns`, so that the test
// process itself stays where it is; returns the child's exit code.
template <typename F>
int InNamespace(const std::string &ns, F body) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(("/var/run/netns/" + ns).c_str(), O_RDONLY);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) _exit(100);
    _exit(body());
  }
  int st;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

sockaddr_in Addr(const char *ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

// Checks that host `from` reaches host `to_ip` (in namespace `to_ns`):
// ping if it is installed, else a TCP connection to a listener there.
void ExpectReachable(const std::string &from, const std::string &to_ns,
                     const char *to_ip) {
  if (system("command -v ping >/dev/null 2>&1") == 0) {
    Output out = run_shell("ip netns exec " + from + " ping -c1 -W1 " + to_ip);
    EXPECT_EQ(out.status, 0) << from << " -> " << to_ip << "\n" << out.text;
    return;
  }
  const int port = 17777;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t listener = fork();
  ASSERT_GE(listener, 0);
  if (listener == 0) {
    close(ready[0]);
    _exit(InNamespace(to_ns, [&] {
      int s = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a = Addr(to_ip, port);
      if (s < 0 || bind(s, (sockaddr *)&a, sizeof a) != 0 ||
          listen(s, 1) != 0)
        return 1;
      (void)!write(ready[1], "x", 1);
      int c = accept(s, nullptr, nullptr);
      return c >= 0 ? 0 : 2;
    }));
  }
  close(ready[1]);
  char byte;
  bool listening = read(ready[0], &byte, 1) == 1;
  close(ready[0]);
  int connected = -1;
  if (listening) {
    connected = InNamespace(from, [&] {
      int s = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a = Addr(to_ip, port);
      return s >= 0 && connect(s, (sockaddr *)&a, sizeof a) == 0 ? 0 : 1;
    });
  } else {
    kill(listener, SIGKILL);
  }
  int st;
  waitpid(listener, &st, 0);
  EXPECT_TRUE(listening) << "no listener in " << to_ns;
  EXPECT_EQ(connected, 0) << from << " cannot connect to " << to_ip;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
      << to_ns << "'s listener saw no connection";
}

class Netsim : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
    if (!HoopsimNamespaces().empty())
      GTEST_SKIP() << "hoopsim namespaces exist already: another run (a "
                      "benchmark?) is using them";
    Output probe = run_shell("ip netns add hoopsim-probe");
    if (probe.status != 0)
      GTEST_SKIP() << "'ip netns add' fails here: " << probe.text;
    run_shell("ip netns del hoopsim-probe");
  }

  void TearDown() override {
    if (!IsSkipped()) run_shell(kNetsim + " down");
  }
};

TEST_F(Netsim, UpBuildsHostsThatReachEachOtherAndDownRemovesThem) {
  Output up = run_shell(kNetsim + " up 3 1gbit");
  ASSERT_EQ(up.status, 0) << up.text;
  std::set<std::string> want = {"hoopsim-h0", "hoopsim-h1", "hoopsim-h2",
                                "hoopsim-sw"};
  EXPECT_EQ(HoopsimNamespaces(), want);
  ExpectReachable("hoopsim-h0", "hoopsim-h1", "10.99.0.2");
  ExpectReachable("hoopsim-h2", "hoopsim-h0", "10.99.0.1");
  // A second up must refuse rather than disturb the running one.
  EXPECT_NE(run_shell(kNetsim + " up 2 1gbit").status, 0);
  Output down = run_shell(kNetsim + " down");
  EXPECT_EQ(down.status, 0) << down.text;
  EXPECT_TRUE(HoopsimNamespaces().empty());
  EXPECT_EQ(run_shell(kNetsim + " down").status, 0) << "down is idempotent";
}

TEST_F(Netsim, RunTearsDownAfterAFailingCommandAndReturnsItsCode) {
  Output out = run_shell(kNetsim +
                   " run 2 1gbit -- sh -c 'test -e /var/run/netns/hoopsim-h1 "
                   "&& exit 7'");
  EXPECT_EQ(out.status, 7) << out.text;
  EXPECT_TRUE(HoopsimNamespaces().empty());
}

TEST_F(Netsim, RejectsBadArguments) {
  EXPECT_NE(run_shell(kNetsim + " up 0 1gbit").status, 0);
  EXPECT_NE(run_shell(kNetsim + " up 2 fast").status, 0);
  EXPECT_TRUE(HoopsimNamespaces().empty());
}

TEST_F(Netsim, HoopRunNamesAMissingNamespace) {
  Output out = run_shell(std::string(HOOP_RUN_PATH) + " --netns hoopsim -n 2 true");
  EXPECT_NE(out.status, 0);
  EXPECT_NE(out.text.find("/var/run/netns/hoopsim-h0"), std::string::npos)
      << out.text;
}

// hoop-bench rows from rank 0 with #wrong 0 out of and in place; how many.
int CheckedBenchRows(const std::string &text) {
  std::vector<std::vector<std::string>> rows =
      hooptest::bench_rows(text, "[0] ");
  for (const std::vector<std::string> &f : rows) {
    EXPECT_TRUE(f.size() == 13u || f.size() == 20u) << text;  // -B 1: 20
    if (f.size() != 13u && f.size() != 20u) continue;
    EXPECT_EQ(f[8], "0") << "out-of-place #wrong: " << f[0];
    EXPECT_EQ(f[12], "0") << "in-place #wrong: " << f[0];
  }
  return (int)rows.size();
}

// Rows with -B 1 that ran `algo`: each must have sent `per_k` times its
// size between hosts, all ranks together.  Returns how many there were.
int CheckOffHostBytes(const std::string &text, const std::string &algo,
                      unsigned per_k) {
  int rows = 0;
  for (const std::vector<std::string> &f : hooptest::bench_rows(text, "[0] ")) {
    if (f.size() != 20u || f[18] != algo)
      continue;
    rows++;
    EXPECT_EQ(std::stoull(f[19]), per_k * std::stoull(f[0])) << text;
  }
  return rows;
}

// Four ranks on two hosts: a ring all-reduce of K bytes that follows the
// hosts crosses between them on two of its four edges, each carrying
// 2(N-1)K/N = 1.5K, so 3K leave the hosts whatever the placement (a ring in
// rank order over 0,2 | 1,3 would cross on all four: 6K).  Rows with -B 1
// that ran the ring are checked (callers pass -B 1 to all-reduces only); the
// count is returned.
int CheckRingOffHostBytes(const std::string &text) {
  return CheckOffHostBytes(text, "ring", 3);
}

TEST_F(Netsim, HoopBenchAcrossEmulatedHostsIsCorrect) {
  REQUIRE_BENCH();
  Output out = run_shell(kNetsim + " run 3 1gbit -- " + HOOP_RUN_PATH +
                   " --netns hoopsim -n 3 " + HOOP_BENCH_PATH +
                   " -b 1K -e 64K -c 1");
  ASSERT_EQ(out.status, 0) << out.text;
  EXPECT_TRUE(HoopsimNamespaces().empty());
  EXPECT_EQ(CheckedBenchRows(out.text), 7) << out.text;  // 1K, 2K, ..., 64K
}

// Two ranks on each of two emulated hosts: shared memory inside a host,
// TCP between them, in one communicator, and every algorithm still right.
TEST_F(Netsim, MixedHostsUseShmInsideAndTcpBetween) {
  std::string run = std::string(HOOP_RUN_PATH) +
                    " --netns hoopsim --ranks-per-host 2 -n 4 ";
  Output info = run_shell(kNetsim + " run 2 1gbit -- " + run + HOOP_INFO_PATH);
  ASSERT_EQ(info.status, 0) << info.text;
  EXPECT_NE(info.text.find("2 rank(s) from rank 0; shm yes"),
            std::string::npos)
      << info.text;
  EXPECT_NE(info.text.find("inside: shm; to host 0: -"), std::string::npos)
      << info.text;
  EXPECT_NE(info.text.find("2 rank(s) from rank 2; shm yes"),
            std::string::npos)
      << info.text;
  EXPECT_NE(info.text.find("inside: shm; to host 0: tcp"), std::string::npos)
      << info.text;
  REQUIRE_BENCH();
  std::string benches = "true";
  for (const char *algo : {"ring", "tree", "ps"})
    benches += std::string(" && ") + run + HOOP_BENCH_PATH +
               " -b 1K -e 1M -f 32 -n 2 -w 1 -c 1 -B 1 -a " + algo;
  Output out = run_shell(kNetsim + " run 2 1gbit -- sh -c '" + benches + "'");
  ASSERT_EQ(out.status, 0) << out.text;
  EXPECT_TRUE(HoopsimNamespaces().empty());
  // 1K, 32K and 1M for each algorithm.
  EXPECT_EQ(CheckedBenchRows(out.text), 3 * 3) << out.text;
  EXPECT_EQ(CheckRingOffHostBytes(out.text), 3) << out.text;
}

// Ranks dealt out over the hosts in turn (hoop-run --cyclic, as srun's
// cyclic distribution places them): the ring and the chains follow the
// hosts rather than the rank numbers, and every algorithm stays right.
TEST_F(Netsim, CyclicPlacementKeepsEveryAlgorithmRight) {
  REQUIRE_BENCH();
  std::string run = std::string(HOOP_RUN_PATH) +
                    " --netns hoopsim --ranks-per-host 2 --cyclic -n 4 ";
  const char *calls[] = {"-a ring",          "-a tree",
                         "-a ps",            "-C reducescatter",
                         "-C allgather",     "-C broadcast -r 1",
                         "-C reduce -r 2"};
  std::string benches = "true";
  for (const char *call : calls)
    benches += std::string(" && ") + run + HOOP_BENCH_PATH +
               " -b 1K -e 1M -f 32 -n 2 -w 1 -c 1 " +
               (std::string(call) == "-a ring" ? "-B 1 " : "") + call;
  Output out = run_shell(kNetsim + " run 2 1gbit -- sh -c '" + benches + "'");
  ASSERT_EQ(out.status, 0) << out.text;
  EXPECT_TRUE(HoopsimNamespaces().empty());
  // 1K, 32K and 1M for each call.
  EXPECT_EQ(CheckedBenchRows(out.text), 7 * 3) << out.text;
  EXPECT_EQ(CheckRingOffHostBytes(out.text), 3) << out.text;
}


// hoop-run over the emulated hosts, `per_host` ranks on each, dealt out in
// turn with `cyclic` (as srun's cyclic distribution places them).
std::string HostsRun(int per_host, int n, bool cyclic) {
  return std::string(HOOP_RUN_PATH) + " --netns hoopsim --ranks-per-host " +
         std::to_string(per_host) + (cyclic ? " --cyclic" : "") + " -n " +
         std::to_string(n) + " ";
}

// The hierarchical all-reduce: a ring inside each host, one across the
// hosts, one inside again.  Right in both placements, for sizes from one
// element to past a segment (4 MiB) and not divisible by the ranks, for
// other dtypes and ops, on 2 hosts of 2 and 3 and 3 hosts of 2; across M
// hosts its ranks send 2(M-1)K between them, all together, where the
// flat ring sends 3K on 2 hosts of 2.  With hosts of unequal size it is
// the ring.
TEST_F(Netsim, HierarchicalAllReduceIsRightAndCrossesLess) {
  REQUIRE_BENCH();
  std::string bench = std::string(HOOP_BENCH_PATH) + " -n 2 -w 1 -c 1 ";
  std::string two_hosts = "true";
  for (bool cyclic : {false, true})
    two_hosts += " && " + HostsRun(2, 4, cyclic) + bench +
                 "-b 4 -e 128K -f 32 -B 1 -a hier && " +
                 HostsRun(2, 4, cyclic) + bench +
                 "-b 9437188 -e 9437188 -B 1 -a hier";
  two_hosts += " && " + HostsRun(2, 4, true) + bench +
               "-b 1K -e 32K -f 32 -d double -o avg -a hier && " +
               HostsRun(2, 4, false) + bench +
               "-b 3 -e 3 -d int8 -o max -a hier";
  two_hosts += " && " + HostsRun(3, 6, true) + bench +
               "-b 4 -e 128K -f 32 -B 1 -a hier";
  two_hosts += " && " + HostsRun(2, 3, false) + bench +
               "-b 4K -e 4K -B 1 -a hier";
  Output out = run_shell(kNetsim + " run 2 1gbit -- sh -c '" + two_hosts + "'");
  ASSERT_EQ(out.status, 0) << out.text;
  // (4, 128, 4K, 128K; 9M + 4) twice, 1K and 32K, 3, then 2 x 3, then 3.
  EXPECT_EQ(CheckedBenchRows(out.text), 5 * 2 + 2 + 1 + 4 + 1) << out.text;
  EXPECT_EQ(CheckOffHostBytes(out.text, "hier", 2), 5 * 2 + 4) << out.text;
  // 3 ranks on hosts of 2 and 1: the ring's 2(N-1)/N K on both crossings.
  EXPECT_EQ(hooptest::bench_rows(out.text, "[0] ").back().at(18), "ring")
      << out.text;

  Output three = run_shell(kNetsim + " run 3 1gbit -- sh -c '" +
                           HostsRun(2, 6, false) + bench +
                           "-b 4 -e 128K -f 32 -B 1 -a hier && " +
                           HostsRun(2, 6, true) + bench +
                           "-b 1M -e 1M -B 1 -a hier'");
  ASSERT_EQ(three.status, 0) << three.text;
  EXPECT_TRUE(HoopsimNamespaces().empty());
  EXPECT_EQ(CheckedBenchRows(three.text), 5) << three.text;
  EXPECT_EQ(CheckOffHostBytes(three.text, "hier", 4), 5) << three.text;
}

// Hierarchical reduce-scatter and all-gather: rings inside each host over
// the blocks of every host's ranks, and one across the hosts among the
// ranks of each place.  Right against hoop-bench's own reference in both
// placements, out of place and in place, for no element, one and odd
// counts a rank, past a segment (4 MiB), for other dtypes and ops, in 1-3
// channels, on 2 hosts of 2 and 3, 3 hosts of 2 and 4 hosts of 2; across
// M hosts their ranks send (M-1)K between them, all together, where the
// flat ring sends (N-1)K/N on each crossing host link (1.5K on 2 hosts of
// 2).  The model picks them for large calls, the ring for small ones,
// under AUTO and under settings they have no schedule of.  With hosts of
// unequal size they are the ring.
TEST_F(Netsim, HierarchicalReduceScatterAndAllGatherAreRightAndCrossLess) {
  REQUIRE_BENCH();
  std::string bench = std::string(HOOP_BENCH_PATH) + " -n 2 -w 1 -c 1 ";
  // Sizes are the whole buffer: 0, 8, 256 and 8,192 floats a rank, then
  // 1,001 and 589,825 (two segments).
  const char *sizes[] = {"-b 4 -e 128K -f 32", "-b 16016 -e 16016",
                         "-b 9437200 -e 9437200"};
  std::string two_hosts = "true";
  for (const char *coll : {"reducescatter", "allgather"}) {
    for (bool cyclic : {false, true})
      for (const char *size : sizes)
        two_hosts += " && " + HostsRun(2, 4, cyclic) + bench + "-C " + coll +
                     " " + size + " -B 1 -a hier";
    two_hosts += " && " + HostsRun(3, 6, true) + bench + "-C " + coll +
                 " -b 4 -e 128K -f 32 -B 1 -a hier";
  }
  two_hosts += " && " + HostsRun(2, 4, true) + bench +
               "-C reducescatter -b 1K -e 32K -f 32 -d double -o avg -B 1 "
               "-a hier && " +
               HostsRun(2, 4, false) + bench +
               "-C reducescatter -b 4 -e 4 -d int8 -o max -B 1 -a hier && " +
               HostsRun(2, 4, true) + bench +
               "-C allgather -b 1K -e 32K -f 32 -d int64 -B 1 -a hier";
  // Rings of 2 and 3 channels (HOOP_NSOCKS), each over part of every chunk.
  two_hosts += " && HOOP_NSOCKS=2 " + HostsRun(2, 4, true) + bench +
               "-C reducescatter -b 9437200 -e 9437200 -B 1 -a hier && "
               "HOOP_NSOCKS=3 " + HostsRun(2, 4, false) + bench +
               "-C allgather -d bfloat16 -b 4M -e 4M -B 1 -a hier";
  // The model's pick under a setting with no such schedule (HOOP_ALGO=tree)
  // and under AUTO: hier for 16 MiB, the ring for 4 KiB.
  two_hosts += " && HOOP_ALGO=tree " + HostsRun(2, 4, false) + bench +
               "-C allgather -b 16M -e 16M -B 1 && " + HostsRun(2, 4, true) +
               bench + "-C reducescatter -b 4K -e 4K -B 1";
  two_hosts += " && " + HostsRun(2, 3, false) + bench +
               "-C reducescatter -b 4K -e 4K -B 1 -a hier";
  Output out = run_shell(kNetsim + " run 2 1gbit -- sh -c '" + two_hosts + "'");
  ASSERT_EQ(out.status, 0) << out.text;
  // Per collective: (4 sizes, 16016, 9437200) twice, 4 sizes on 2 x 3;
  // then 2, 1 and 2; 2 with channels; the model's two; then 1 on hosts of
  // 2 and 1.
  EXPECT_EQ(CheckedBenchRows(out.text), 2 * (6 * 2 + 4) + 5 + 2 + 2 + 1)
      << out.text;
  EXPECT_EQ(CheckOffHostBytes(out.text, "hier", 1),
            2 * (6 * 2 + 4) + 5 + 2 + 1)
      << out.text;
  std::vector<std::vector<std::string>> rows =
      hooptest::bench_rows(out.text, "[0] ");
  ASSERT_GE(rows.size(), 3u) << out.text;
  EXPECT_EQ(rows[rows.size() - 3].at(18), "hier") << out.text;
  EXPECT_EQ(rows[rows.size() - 2].at(18), "ring") << out.text;
  // 3 ranks on hosts of 2 and 1: the ring.
  EXPECT_EQ(rows.back().at(18), "ring") << out.text;

  Output more = run_shell(
      kNetsim + " run 3 1gbit -- sh -c '" + HostsRun(2, 6, false) + bench +
      "-C reducescatter -b 4 -e 128K -f 32 -B 1 -a hier && " +
      HostsRun(2, 6, true) + bench +
      "-C allgather -b 16008 -e 16008 -B 1 -a hier'");
  ASSERT_EQ(more.status, 0) << more.text;
  EXPECT_EQ(CheckedBenchRows(more.text), 5) << more.text;
  EXPECT_EQ(CheckOffHostBytes(more.text, "hier", 2), 5) << more.text;

  Output four = run_shell(
      kNetsim + " run 4 1gbit -- sh -c '" + HostsRun(2, 8, true) + bench +
      "-C reducescatter -b 32 -e 32K -f 32 -B 1 -a hier && " +
      HostsRun(2, 8, false) + bench +
      "-C allgather -b 32 -e 32K -f 32 -B 1 -a hier'");
  ASSERT_EQ(four.status, 0) << four.text;
  EXPECT_TRUE(HoopsimNamespaces().empty());
  EXPECT_EQ(CheckedBenchRows(four.text), 6) << four.text;
  EXPECT_EQ(CheckOffHostBytes(four.text, "hier", 3), 6) << four.text;
}

}  // namespace
