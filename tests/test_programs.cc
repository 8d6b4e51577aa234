// The shipped programs end to end: hoop-bench and the README's example
// under hoop-run, Open MPI's mpirun and PyTorch's torchrun (unchanged),
// their output parsed and checked.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using Output = hooptest::ShellOutput;
using hooptest::run_shell;

struct Row {
  std::vector<double> cols;
};

// Data rows: not comments; an optional "[r] " prefix from hoop-run.
std::vector<Row> bench_rows(const std::string &text) {
  std::vector<Row> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("[0] ", 0) == 0)
      line = line.substr(4);
    std::istringstream fields(line);
    std::string first;
    if (!(fields >> first) || first[0] == '#' || first[0] == '[' ||
        !isdigit((unsigned char)first[0]))
      continue;
    Row r;
    r.cols.push_back(std::stod(first));
    std::string f;
    while (fields >> f) {
      if (f == "float" || f == "sum")
        r.cols.push_back(0);
      else
        r.cols.push_back(std::stod(f));
    }
    rows.push_back(r);
  }
  return rows;
}

void expect_good_rows(const Output &out, size_t want_rows) {
  ASSERT_EQ(out.status, 0) << out.text;
  std::vector<Row> rows = bench_rows(out.text);
  ASSERT_EQ(rows.size(), want_rows) << out.text;
  for (const Row &r : rows) {
    ASSERT_EQ(r.cols.size(), 13u) << out.text;
    EXPECT_EQ(r.cols[8], 0) << "out-of-place #wrong\n" << out.text;
    EXPECT_EQ(r.cols[12], 0) << "in-place #wrong\n" << out.text;
    EXPECT_GT(r.cols[5], 0) << "time";
    EXPECT_GE(r.cols[7], 0) << "busbw";
  }
}

TEST(Programs, HoopBenchUnderHoopRunChecksAndPrintsRows) {
  REQUIRE_BENCH();
  Output out = run_shell(std::string(HOOP_RUN_PATH) + " -n 3 " + HOOP_BENCH_PATH +
                   " -b 1K -e 1M -f 32 -n 3 -w 1 -c 1");
  expect_good_rows(out, 3); // 1K, 32K, 1M
}

TEST(Programs, ReadmeExampleRunsOnFourRanks) {
  Output out = run_shell(std::string(HOOP_RUN_PATH) + " -n 4 " + HOOP_EXAMPLE_PATH);
  ASSERT_EQ(out.status, 0) << out.text;
  for (int r = 0; r < 4; r++) {
    std::string line = "[" + std::to_string(r) + "] rank " +
                       std::to_string(r) + " of 4: grad[0] = 10 (correct)";
    EXPECT_NE(out.text.find(line), std::string::npos) << out.text;
  }
}

TEST(Programs, HoopBenchRunsUnchangedUnderMpirun) {
  REQUIRE_BENCH();
  if (system("command -v mpirun >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "mpirun (openmpi-bin) is not installed";
  Output out = run_shell("mpirun --allow-run-as-root --oversubscribe -np 2 " +
                   std::string(HOOP_BENCH_PATH) +
                   " -b 4K -e 64K -f 16 -n 3 -w 1 -c 1");
  expect_good_rows(out, 2);
}

// torchrun as Debian's python3-torch 1.13 ships it, run as users run it.
// Its flags, and why each is needed:
//   --standalone      one node: its store takes a free port, and hoop
//                     rank 0 listens on that port + 1
//   --no_python       exec the program itself, not `python3 -u program`
//                     (1.13 knows only the underscore spelling)
//   --redirects 2 --tee 2
//                     under Python 3.11 torch 1.13's Std.from_str turns
//                     the defaults "0" (and "3") into None, and torchrun
//                     dies with "'NoneType' object has no attribute 'get'"
//                     before starting a worker; 1 or 2 parse.  2 sends the
//                     workers' stderr through a log file that torchrun
//                     tails to its own stderr, and leaves stdout alone.
const char kTorchrunFlags[] =
    " --standalone --no_python --redirects 2 --tee 2 --nproc_per_node ";

// Bounds each torchrun run: a worker that never joins would leave torchrun
// waiting for good.  The three torchrun tests took 32 s together on a
// loaded 2-core machine; a test makes at most two runs one after the
// other, which leaves room within its ctest TIMEOUT of 300 s.
const char kRunTimeout[] = "timeout -k 5 60 ";

// Empty when torchrun can run here, else why not.
std::string torchrun_missing() {
  if (run_shell("/usr/bin/python3 -c 'import torch.distributed.run'")
          .status != 0)
    return "PyTorch is not importable by /usr/bin/python3 (apt-get install "
           "python3-torch)";
  return "";
}

// What a torchrun job needs besides torchrun's variables: the ranks'
// shared secret.
const std::string kTokenEnv =
    std::string("HOOP_AUTH_TOKEN=") + hooptest::kTestToken + " ";

Output run_torchrun(const std::string &launcher, int nranks,
                    const std::string &program) {
  return run_shell(kTokenEnv + kRunTimeout + launcher + kTorchrunFlags +
                   std::to_string(nranks) + " " + program);
}

TEST(Programs, ReadmeExampleRunsUnderTorchrunOnTwoAndThreeRanks) {
  if (!torchrun_missing().empty())
    GTEST_SKIP() << torchrun_missing();
  for (int n : {2, 3}) {
    Output out = run_torchrun("/usr/bin/python3 -m torch.distributed.run", n,
                              HOOP_EXAMPLE_PATH);
    ASSERT_EQ(out.status, 0) << out.text;
    std::string sum = std::to_string(n * (n + 1) / 2);
    for (int r = 0; r < n; r++) {
      std::string line = "rank " + std::to_string(r) + " of " +
                         std::to_string(n) + ": grad[0] = " + sum +
                         " (correct)";
      EXPECT_NE(out.text.find(line), std::string::npos) << out.text;
    }
  }
}

// A port P with P + 1 free too, for torchrun's store and hoop's rank 0;
// 0 if none turned up.
int free_port_pair() {
  for (int attempt = 0; attempt < 20; attempt++) {
    int fds[2] = {socket(AF_INET, SOCK_STREAM, 0),
                  socket(AF_INET, SOCK_STREAM, 0)};
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (bind(fds[0], (sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fds[0], (sockaddr *)&a, &len) == 0 &&
        ntohs(a.sin_port) < 65535) {
      a.sin_port = htons(ntohs(a.sin_port) + 1);
      if (bind(fds[1], (sockaddr *)&a, sizeof a) == 0)
        port = ntohs(a.sin_port) - 1;
    }
    close(fds[0]);
    close(fds[1]);
    if (port != 0)
      return port;
  }
  return 0;
}

// Two nodes as users start them, one torchrun agent each (both on
// loopback here): four ranks, numbered across the agents.
TEST(Programs, ReadmeExampleRunsUnderTwoTorchrunAgents) {
  if (!torchrun_missing().empty())
    GTEST_SKIP() << torchrun_missing();
  int port = free_port_pair();
  ASSERT_NE(port, 0) << "no two free ports in a row on loopback";
  auto node = [&](int rank) {
    return kTokenEnv + kRunTimeout +
           "/usr/bin/python3 -m torch.distributed.run --nnodes 2 "
           "--node_rank " + std::to_string(rank) +
           " --master_addr 127.0.0.1 --master_port " + std::to_string(port) +
           " --no_python --redirects 2 --tee 2 --nproc_per_node 2 " +
           HOOP_EXAMPLE_PATH;
  };
  Output out = run_shell("(" + node(0) + " & first=$!; " + node(1) +
                         "; second=$?; wait $first; first=$?; "
                         "exit $((first | second)))");
  ASSERT_EQ(out.status, 0) << out.text;
  for (int r = 0; r < 4; r++) {
    std::string line = "rank " + std::to_string(r) +
                       " of 4: grad[0] = 10 (correct)";
    EXPECT_NE(out.text.find(line), std::string::npos) << out.text;
  }
}

TEST(Programs, HoopBenchRunsUnchangedUnderTheTorchrunCommand) {
  REQUIRE_BENCH();
  if (!torchrun_missing().empty())
    GTEST_SKIP() << torchrun_missing();
  if (system("command -v torchrun >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "no torchrun command on PATH (python3-torch installs "
                    "/usr/bin/torchrun)";
  Output out = run_torchrun("torchrun", 3, std::string(HOOP_BENCH_PATH) +
                                               " -b 1K -e 1M -f 32 -n 3 -w 1 "
                                               "-c 1");
  // Three rows, not nine: one job of three ranks, where workers that
  // missed torchrun's variables would each have run alone.
  expect_good_rows(out, 3);
}

TEST(Programs, HoopBenchReportsABadRendezvousAddress) {
  REQUIRE_BENCH();
  Output out = run_shell("HOOP_ROOT_ADDR=127.0.0.1:99999 " +
                   std::string(HOOP_RUN_PATH) + " -n 2 " + HOOP_BENCH_PATH +
                   " -b 1K -e 1K");
  EXPECT_NE(out.status, 0) << out.text;
  EXPECT_NE(out.text.find("hoop-bench: rank"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("127.0.0.1:99999"), std::string::npos) << out.text;
}

} // namespace
