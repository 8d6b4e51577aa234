// hoop-bench for every collective, end to end under hoop-run: the rows
// follow nccl-tests' sizes, counts and bus-bandwidth factors, the check
// finds nothing wrong, the JSON lines hold the same rows, the traffic
// columns equal the model where the model is exact, a spoiled result is
// caught (HOOP_BENCH_CORRUPT), and bad flags exit 2 with a message.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"
#include "hoop_build_config.h"

namespace {

using hooptest::run_shell;
using Output = hooptest::ShellOutput;

using Fields = std::vector<std::string>;

// Data rows (first field a number), split on blanks.
struct Coll {
  const char *name;
  bool per_rank_count;    // count column is size / N (nccl-tests)
  bool in_place;
  const char *extra;      // flags that make the model's bytes exact
};

double Factor(const Coll &c, int n) {
  if (std::string(c.name) == "allreduce") return 2.0 * (n - 1) / n;
  if (c.per_rank_count) return (n - 1.0) / n;
  return 1.0;
}

const Coll kColls[] = {
    {"allreduce", false, true, "-a ps"},
    {"reducescatter", true, true, ""},
    {"allgather", true, true, ""},
    {"broadcast", false, true, "-a ring -r 1"},
    {"reduce", false, true, "-a ring -r 1"},
    {"alltoall", true, false, ""},
};

std::string Bench(int nranks, const Coll &c, const std::string &flags) {
  return std::string(HOOP_RUN_PATH) + " --no-prefix -n " +
         std::to_string(nranks) + " " + HOOP_BENCH_PATH + " -C " + c.name +
         " " + c.extra + " " + flags;
}

// The run's data rows: `nrows` of them, each with nccl-tests' 13 columns
// and nothing wrong in either placement.
std::vector<Fields> ExpectCheckedRows(const Output &out, size_t nrows) {
  auto rows = hooptest::bench_rows(out.text);
  EXPECT_EQ(rows.size(), nrows) << out.text;
  for (const auto &r : rows) {
    EXPECT_EQ(r.size(), 13u) << out.text;
    if (r.size() != 13u)
      continue;
    EXPECT_EQ(r[8], "0") << out.text;
    EXPECT_EQ(r[12], "0") << out.text;
  }
  return rows;
}

class BenchColl : public ::testing::TestWithParam<std::tuple<int, int>> {
 protected:
  const Coll &coll() const { return kColls[std::get<0>(GetParam())]; }
  int nranks() const { return std::get<1>(GetParam()); }
};

TEST_P(BenchColl, RowsFollowNcclTestsAndMatchTheJson) {
  const Coll &c = coll();
  const int n = nranks();
  char json[] = "/tmp/hoop-bench-test-XXXXXX";
  int fd = mkstemp(json);
  ASSERT_GE(fd, 0);
  close(fd);
  Output out = run_shell(Bench(n, c, "-b 1K -e 64K -f 8 -n 2 -w 1 -c 1 -B 1 "
                                     "-J " + std::string(json)));
  ASSERT_EQ(out.status, 0) << out.text;
  std::vector<Fields> rows = hooptest::bench_rows(out.text);
  ASSERT_EQ(rows.size(), 3u) << out.text;  // 1K, 8K, 64K
  size_t elems = 256;
  for (const Fields &f : rows) {
    ASSERT_EQ(f.size(), 20u) << out.text;
    EXPECT_EQ(f[19], "0") << "one host: no byte leaves it\n" << out.text;
    // nccl-tests: whole multiples of N elements; count is per rank.
    size_t per = c.per_rank_count ? elems / n : elems;
    size_t bytes = c.per_rank_count ? per * n * 4 : elems * 4;
    EXPECT_EQ(f[0], std::to_string(bytes)) << out.text;
    EXPECT_EQ(f[1], std::to_string(per)) << out.text;
    EXPECT_EQ(f[2], "float");
    for (int group : {5, 9}) {
      if (group == 9 && !c.in_place) {
        EXPECT_EQ(f[9], "N/A");
        EXPECT_EQ(f[12], "N/A");
        continue;
      }
      double t = std::stod(f[group]), algbw = std::stod(f[group + 1]);
      double busbw = std::stod(f[group + 2]);
      EXPECT_GT(t, 0);
      // Bandwidths are printed to 0.01 GB/s and computed from the time
      // before it was rounded to 0.01 us, which matters for short times.
      double expect = bytes / t / 1e3, slack = 0.006 + expect * 0.006 / t;
      EXPECT_NEAR(algbw, expect, slack) << out.text;
      EXPECT_NEAR(busbw, expect * Factor(c, n), slack) << out.text;
      EXPECT_EQ(f[group + 3], "0") << "#wrong\n" << out.text;
    }
    // The busiest rank's bytes, either way, against the model's.
    double most = std::max(std::stod(f[15]), std::stod(f[16]));
    EXPECT_EQ(most, std::stod(f[17])) << out.text;
    elems *= 8;
  }
  // Every line must load as JSON; print what to compare with the rows.
  Output js = run_shell(
      "python3 -c 'import json,sys\n"
      "for l in open(sys.argv[1]):\n"
      "  o = json.loads(l)\n"
      "  print(o[\"collective\"], o[\"bytes\"], o[\"count\"], "
      "o[\"in_place\"], o[\"wrong\"], o[\"max_sent_B\"], "
      "o[\"model_link_B\"], o[\"time_us\"])' " + std::string(json));
  unlink(json);
  ASSERT_EQ(js.status, 0) << js.text;
  std::vector<std::string> got, want;
  std::istringstream in(js.text);
  size_t i = 0;
  for (std::string line; std::getline(in, line); i++) {
    // The row rounds the time to 2 decimals, the JSON to 3.
    size_t cut = line.rfind(' ');
    got.push_back(line.substr(0, cut));
    size_t row = c.in_place ? i / 2 : i, ip = c.in_place ? i % 2 : 0;
    ASSERT_LT(row, rows.size()) << js.text;
    EXPECT_NEAR(std::stod(line.substr(cut + 1)),
                std::stod(rows[row][5 + 4 * ip]), 0.0051)
        << line;
  }
  for (const Fields &f : rows) {
    for (int ip = 0; ip < (c.in_place ? 2 : 1); ip++)
      want.push_back(std::string(c.name) + " " + f[0] + " " + f[1] + " " +
                     std::to_string(ip) + " " + f[8 + 4 * ip] + " " + f[15] +
                     " " + f[17]);
  }
  EXPECT_EQ(got, want) << out.text;
}

TEST_P(BenchColl, CheckCatchesASpoiledResultAndFails) {
  const Coll &c = coll();
  Output out = run_shell("HOOP_BENCH_CORRUPT=1 " +
                         Bench(nranks(), c, "-b 1K -e 8K -f 8 -n 1 -w 0"));
  EXPECT_EQ(out.status, 1) << out.text;
  std::vector<Fields> rows = hooptest::bench_rows(out.text);
  ASSERT_EQ(rows.size(), 2u) << out.text;
  for (const Fields &f : rows) {
    ASSERT_EQ(f.size(), 13u) << out.text;
    EXPECT_EQ(f[8], "1") << "one element spoiled out of place\n" << out.text;
    EXPECT_EQ(f[12], c.in_place ? "0" : "N/A") << out.text;
  }
  EXPECT_NE(out.text.find("hoop-bench: 2 wrong elements"), std::string::npos)
      << out.text;
}

INSTANTIATE_TEST_SUITE_P(
    Bench, BenchColl,
    ::testing::Combine(::testing::Range(0, 6), ::testing::Values(2, 3)),
    [](const ::testing::TestParamInfo<std::tuple<int, int>> &p) {
      return std::string(kColls[std::get<0>(p.param)].name) + "_" +
             std::to_string(std::get<1>(p.param)) + "ranks";
    });

// The double binary tree's busiest link: the bench's model column (a
// half-buffer to the parent and each child in both trees, at the busiest
// rank) against what the counters saw, across the sizes where the trees'
// shapes differ: 1.5K at 3-4 ranks, 2K from 5 on.
class BenchTreeModel : public ::testing::TestWithParam<int> {};

TEST_P(BenchTreeModel, ColumnMatchesTheCounters) {
  Output out = run_shell(std::string(HOOP_RUN_PATH) + " --no-prefix -n " +
                         std::to_string(GetParam()) + " " + HOOP_BENCH_PATH +
                         " -a tree -b 64K -e 64K -n 1 -w 0 -c 1 -B 1");
  ASSERT_EQ(out.status, 0) << out.text;
  std::vector<Fields> rows = hooptest::bench_rows(out.text);
  ASSERT_EQ(rows.size(), 1u) << out.text;
  const Fields &f = rows[0];
  ASSERT_EQ(f.size(), 20u) << out.text;
  double most = std::max(std::stod(f[15]), std::stod(f[16]));
  EXPECT_EQ(most, std::stod(f[17])) << out.text;
  EXPECT_EQ(most, (GetParam() <= 4 ? 1.5 : 2.0) * 65536) << out.text;
}

INSTANTIATE_TEST_SUITE_P(Bench, BenchTreeModel, ::testing::Values(3, 4, 5, 8),
                         [](const ::testing::TestParamInfo<int> &p) {
                           return std::to_string(p.param) + "ranks";
                         });

struct BadFlags {
  const char *flags;
  const char *message;
};

// Names the case in ctest's listing by its flags.
void PrintTo(const BadFlags &b, std::ostream *os) { *os << b.flags; }

class BenchBadFlags : public ::testing::TestWithParam<BadFlags> {};

TEST_P(BenchBadFlags, ExitTwoWithAMessage) {
  Output out = run_shell(std::string(HOOP_RUN_PATH) + " -n 2 " +
                         HOOP_BENCH_PATH + " -b 1K -e 1K " +
                         GetParam().flags);
  EXPECT_EQ(out.status, 2) << out.text;
  EXPECT_NE(out.text.find(GetParam().message), std::string::npos) << out.text;
}

INSTANTIATE_TEST_SUITE_P(
    Bench, BenchBadFlags,
    ::testing::Values(
        BadFlags{"-m disk", "unknown memory \"disk\""},
        BadFlags{"-C gather", "unknown collective \"gather\""},
        BadFlags{"-C broadcast -a ps", "-a ps: broadcast offers auto ring tree"},
        BadFlags{"-C allgather -a tree", "allgather offers auto ring"},
        BadFlags{"-C allgather -o max", "-o: allgather reduces nothing"},
        BadFlags{"-r 1", "-r: allreduce has no root"},
        BadFlags{"-C reduce -r 2", "-r 2: there are only 2 ranks"},
        BadFlags{"-n ten", "-n: \"ten\" is not a number"},
        BadFlags{"-c 2", "-c and -B 0 or 1"},
        BadFlags{"-E lots", "bad size \"lots\""},
        BadFlags{"-E 1M -I lukewarm", "-I wants warm or cold, not \"lukewarm\""},
        BadFlags{"-I cold", "-I says what -E leaves of the input; it needs -E"},
        BadFlags{"-S -5", "-S >= 0"},
        BadFlags{"-d float128", "unknown dtype \"float128\""},
        BadFlags{"stray", "unexpected argument \"stray\""}),
    [](const ::testing::TestParamInfo<BadFlags> &p) {
      return "case" + std::to_string(p.index);
    });

// -m cuda runs and checks every element where a GPU is usable; elsewhere
// it exits 2 saying why (no CUDA in this build, or no usable device).
TEST(Bench, CudaMemoryRunsOrIsRefusedWithAReason) {
  Output out = run_shell(std::string(HOOP_RUN_PATH) + " --no-prefix -n 2 " +
                         HOOP_BENCH_PATH +
                         " -m cuda -b 1K -e 256K -f 16 -n 2 -w 1");
  if (out.status != 0) {
    EXPECT_EQ(out.status, 2) << out.text;
    EXPECT_NE(out.text.find("-m cuda: "), std::string::npos) << out.text;
    if (!HOOP_HAVE_CUDA) {
      EXPECT_NE(out.text.find("has no CUDA"), std::string::npos) << out.text;
    }
    return;
  }
  EXPECT_NE(out.text.find("cuda buffers"), std::string::npos) << out.text;
  ExpectCheckedRows(out, 3);
}

// -E writes other memory before every call, untimed, then the input
// again unless -I cold; the header says which, and the rows are measured
// and checked as without it.
TEST(Bench, EvictsCachesBeforeEachCallWhenAsked) {
  const std::pair<const char *, const char *> cases[] = {
      {"", "then the input rewritten"},
      {" -I warm", "then the input rewritten"},
      {" -I cold", "the input left cold (-I cold)"}};
  for (const auto &[flag, says] : cases) {
    Output out = run_shell(std::string(HOOP_RUN_PATH) + " --no-prefix -n 3 " +
                           HOOP_BENCH_PATH +
                           " -o avg -b 1K -e 64K -f 8 -n 3 -w 1 -c 1 -E 256K" +
                           flag);
    ASSERT_EQ(out.status, 0) << flag << ": " << out.text;
    EXPECT_NE(out.text.find(std::string("# caches: 262144 bytes of other "
                                        "memory written before each call "
                                        "(-E), ") + says),
              std::string::npos)
        << flag << ": " << out.text;
    ExpectCheckedRows(out, 3);
  }
}

// -S: in each timed call one rank arrives 50 ms after the others, and the
// time is that rank's from its arrival, so it is well under the 50 ms its
// peers spent waiting (which the slowest-rank rule would have reported).
TEST(Bench, StaggeredCallsTimeTheLateRankFromItsArrival) {
  Output out = run_shell(std::string(HOOP_RUN_PATH) + " --no-prefix -n 3 " +
                         HOOP_BENCH_PATH +
                         " -b 4K -e 4K -n 3 -w 1 -c 1 -S 50000");
  ASSERT_EQ(out.status, 0) << out.text;
  EXPECT_NE(out.text.find("# arrival: in call i rank i mod N starts 50000 "
                          "us after the others (-S)"),
            std::string::npos)
      << out.text;
  auto rows = ExpectCheckedRows(out, 1);
  ASSERT_EQ(rows.size(), 1u) << out.text;
  ASSERT_EQ(rows[0].size(), 13u) << out.text;
  EXPECT_LT(std::stod(rows[0][5]), 50000.0) << out.text;
  EXPECT_LT(std::stod(rows[0][9]), 50000.0) << out.text;
}

// Without -a the library's own setting stands: HOOP_ALGO=ps runs every
// all-reduce on the parameter server and HOOP_ALGO=tree on the trees (at
// least one of them is not what auto would pick), and the header says
// where the setting came from; -a still overrides the environment.  A
// collective that cannot use the setting reports auto, saying why, in the
// header and in the JSON.
TEST(Bench, HoopAlgoChoosesUnlessDashAIsGiven) {
  struct Case {
    const char *env, *flag, *ran, *header;
  };
  const Case cases[] = {
      {"ps", "", "ps", "algorithm ps (HOOP_ALGO)"},
      {"tree", "", "tree", "algorithm tree (HOOP_ALGO)"},
      {"ps", "-a ring ", "ring", "algorithm ring (-a)"},
  };
  for (const Case &c : cases) {
    Output out = run_shell(std::string("env -u HOOP_TRANSPORT HOOP_ALGO=") +
                           c.env + " " + HOOP_RUN_PATH + " --no-prefix -n 3 " +
                           HOOP_BENCH_PATH + " " + c.flag +
                           "-b 1K -e 64K -f 8 -n 2 -w 1 -c 1 -B 1");
    ASSERT_EQ(out.status, 0) << c.env << ": " << out.text;
    EXPECT_NE(out.text.find(std::string("# hoop-bench allreduce: 3 ranks, "
                                        "float sum, root -1, ") +
                            c.header + ","),
              std::string::npos)
        << c.env << " " << c.flag << ": " << out.text;
    std::vector<Fields> rows = hooptest::bench_rows(out.text);
    ASSERT_EQ(rows.size(), 3u) << out.text;
    for (const Fields &f : rows) {
      ASSERT_EQ(f.size(), 20u) << out.text;
      EXPECT_EQ(f[18], c.ran) << c.env << " " << c.flag << ": " << out.text;
      EXPECT_EQ(f[8], "0") << out.text;
      EXPECT_EQ(f[12], "0") << out.text;
    }
  }
  for (const char *coll : {"broadcast", "allgather", "alltoall"}) {
    char json[] = "/tmp/hoop-bench-test-XXXXXX";
    int fd = mkstemp(json);
    ASSERT_GE(fd, 0);
    close(fd);
    Output out = run_shell(std::string("env -u HOOP_TRANSPORT HOOP_ALGO=ps ") +
                           HOOP_RUN_PATH + " --no-prefix -n 3 " +
                           HOOP_BENCH_PATH + " -C " + coll +
                           " -b 1K -e 1K -n 1 -w 0 -J " + json);
    std::ifstream in(json);
    std::stringstream lines;
    lines << in.rdbuf();
    unlink(json);
    ASSERT_EQ(out.status, 0) << coll << ": " << out.text;
    const std::string why = std::string("HOOP_ALGO=ps not used by ") + coll;
    EXPECT_NE(out.text.find(", algorithm auto (" + why + "), "),
              std::string::npos)
        << out.text;
    EXPECT_NE(lines.str().find("\"algo_requested\":\"auto\","
                               "\"algo_source\":\"" + why + "\""),
              std::string::npos)
        << lines.str();
  }
  // Nothing set: the library's default, which the header names as such.
  Output out = run_shell(std::string("env -u HOOP_ALGO ") + HOOP_RUN_PATH +
                         " --no-prefix -n 2 " + HOOP_BENCH_PATH +
                         " -b 1K -e 1K -n 1 -w 0");
  ASSERT_EQ(out.status, 0) << out.text;
  EXPECT_NE(out.text.find(", algorithm auto (default), "), std::string::npos)
      << out.text;
}

// nccl-tests spellings pick the same collective.
TEST(Bench, AcceptsNcclTestsNames) {
  Output out = run_shell(std::string(HOOP_RUN_PATH) + " --no-prefix -n 2 " +
                         HOOP_BENCH_PATH +
                         " -C all_gather -b 1K -e 1K -n 1 -w 0");
  ASSERT_EQ(out.status, 0) << out.text;
  EXPECT_NE(out.text.find("# hoop-bench allgather: 2 ranks"),
            std::string::npos)
      << out.text;
}

}  // namespace
