// The shipped programs end to end: hoop-bench under hoop-run and under
// Open MPI's mpirun (unchanged), its rows parsed and checked.
#include <gtest/gtest.h>

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
  if (system("command -v mpirun >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "mpirun (openmpi-bin) is not installed";
  Output out = run_shell("mpirun --allow-run-as-root --oversubscribe -np 2 " +
                   std::string(HOOP_BENCH_PATH) +
                   " -b 4K -e 64K -f 16 -n 3 -w 1 -c 1");
  expect_good_rows(out, 2);
}

TEST(Programs, HoopBenchReportsABadRendezvousAddress) {
  Output out = run_shell("HOOP_ROOT_ADDR=127.0.0.1:99999 " +
                   std::string(HOOP_RUN_PATH) + " -n 2 " + HOOP_BENCH_PATH +
                   " -b 1K -e 1K");
  EXPECT_NE(out.status, 0) << out.text;
  EXPECT_NE(out.text.find("hoop-bench: rank"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("127.0.0.1:99999"), std::string::npos) << out.text;
}

} // namespace
